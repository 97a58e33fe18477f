#!/usr/bin/env bash
# Python client tests: the official `openai` (chat, completions, responses), `anthropic`
# (messages) and `ollama` SDKs, LangChain's `ChatOllama`, and the agent frameworks
# (test_agents.py: LangChain, LiteLLM, Instructor, the Agents SDK, pydantic-ai, `llm`)
# against a live `ferrox serve` with the default model. Builds the binary (dev profile, which is optimized), installs the
# client libraries and `pytest` if missing, starts the server on a free loopback port,
# waits for /health, runs tests/python, then stops the server with SIGTERM and checks that
# it exits 0 (graceful shutdown). The exit status is the tests'.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build -q -p ferrox
pip_install() {
    python3 -m pip install --quiet --disable-pip-version-check "$@"
}
python3 -c "import openai" 2>/dev/null || pip_install openai
python3 -c "import anthropic" 2>/dev/null || pip_install anthropic
python3 -c "import prometheus_client" 2>/dev/null || pip_install prometheus_client
python3 -c "import ollama" 2>/dev/null || pip_install ollama
python3 -c "import langchain_ollama" 2>/dev/null || pip_install langchain-ollama
python3 -c "import selenium" 2>/dev/null || pip_install selenium  # the chat page, test_webui.py
# What agent frameworks send (test_agents.py), through the libraries themselves.
python3 -c "import langchain_openai, langchain_anthropic, langgraph, litellm, instructor, agents, pydantic_ai, llm" \
    2>/dev/null || pip_install langchain-openai langchain-anthropic langgraph litellm instructor \
    openai-agents "pydantic-ai-slim[openai]" llm
python3 -c "import pytest" 2>/dev/null || pip_install pytest || echo "pytest unavailable; running the tests as a plain script"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
# The default model, and the same file as a second model, so /metrics has two (test_metrics).
model=$(target/debug/ferrox pull)
target/debug/ferrox serve --host 127.0.0.1 --port "$port" -m "$model" --alias second="$model" \
    >"$log" 2>&1 &
pid=$!
cleanup() {
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$log"
}
trap cleanup EXIT

# Wait for /health (200 once the model is loaded), at most 5 minutes.
python3 - "$port" "$pid" <<'PY'
import os, sys, time, urllib.request, urllib.error
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 300
while time.time() < deadline:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except (urllib.error.URLError, ConnectionError, OSError):
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("ferrox serve exited before becoming healthy")
    time.sleep(0.25)
sys.exit("ferrox serve did not become healthy in 5 minutes")
PY

export FERROX_URL="http://127.0.0.1:$port/v1"
# Nothing may reach outside: LiteLLM reads its model price list from its own package instead
# of fetching it, Selenium never looks for drivers or reports statistics.
export LITELLM_LOCAL_MODEL_COST_MAP=True SE_OFFLINE=true SE_AVOID_STATS=true
status=0
results=$(mktemp)
if python3 -c "import pytest" 2>/dev/null; then
    python3 -m pytest -q -rfE tests/python 2>&1 | tee "$results" || status=$?
else
    for t in tests/python/test_*.py; do
        python3 "$t" 2>&1 | tee -a "$results" || status=$?
    done
fi

# Graceful shutdown: SIGTERM must stop the server with exit status 0.
kill -TERM "$pid"
server_status=0
wait "$pid" || server_status=$?
if [ "$server_status" -ne 0 ]; then
    echo "ferrox serve exited with status $server_status after SIGTERM; its log:"
    cat "$log"
    [ "$status" -ne 0 ] || status=1
elif [ "$status" -ne 0 ]; then
    echo "ferrox serve log:"
    tail -n 30 "$log"
fi
# A long log truncates in the middle: what failed is repeated last, where it is read.
if [ "$status" -ne 0 ]; then
    echo "the Python tests' failures:"
    grep -E "^(FAILED|ERROR)|Error|assert" "$results" | tail -n 40
fi
rm -f "$results"
exit "$status"
