#!/usr/bin/env bash
# The fidelity gate (issue 23, item 4; the rule is `../shared/golden/gemma3-270m/README.md`,
# "The gate for work that changes the engine's numbers"): serves the default model with
# `ferrox serve` and with llama-server (built by scripts/llamacpp.sh, outside the repository),
# then `scripts/fidelity-gate.py` compares both with the float64 reference, position by
# position. Exit status 0 when the gate passes. Run it with every change to the engine's
# numbers and record its figures in docs/PERFORMANCE.md.
#
#   scripts/fidelity-gate.sh                  # THREADS=2, ports 18431/18432
#   FERROX_ISA=avx2 scripts/fidelity-gate.sh  # the gate for one ISA spelling
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
THREADS=${THREADS:-2}
OURS=${OURS_PORT:-18431}
THEIRS=${THEIRS_PORT:-18432}
LOG=$(mktemp -d)

python3 -c 'import numpy, gguf' 2>/dev/null || python3 -m pip install --quiet numpy gguf
build_llama_cpp
build_ferrox

"$FERROX" serve -m "$MODEL" -t "$THREADS" --host 127.0.0.1 --port "$OURS" >"$LOG/ferrox.log" 2>&1 &
OURS_PID=$!
"$LCPP_BUILD/bin/llama-server" -m "$MODEL" -t "$THREADS" --host 127.0.0.1 --port "$THEIRS" \
    -c 4096 >"$LOG/llama-server.log" 2>&1 &
THEIRS_PID=$!
trap 'kill "$OURS_PID" "$THEIRS_PID" 2>/dev/null || true' EXIT
for port in "$OURS" "$THEIRS"; do
    for _ in $(seq 1 240); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
        sleep 0.5
    done
done

python3 scripts/fidelity-gate.py --model "$MODEL" --ours "http://127.0.0.1:$OURS" \
    --theirs "http://127.0.0.1:$THEIRS" --json "$LOG/gate.json"
echo "(figures in $LOG/gate.json; server logs beside it)"
