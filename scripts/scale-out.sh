#!/usr/bin/env bash
# Scale-out on an existing gateway: two `ferrox serve` replicas of the default model behind the
# SGLang Model Gateway (`smg`, from PyPI) with its cache-aware policy, all on loopback, with an
# API key required as the manifests require one (smg registers a replica by reading its
# /v1/models with `--api-key`, and passes each client's own key on); then
# tests/scale_out/check.py runs conversations through the gateway (they must all succeed and
# stay on the replica holding their prefix) and kills a replica mid-run (the gateway must move
# on). Installs `smg` if it is missing. The exit status is the check's.
#
#   scripts/scale-out.sh            # the check
#   KEEP=1 scripts/scale-out.sh     # leave the three processes running afterwards
#   POLICY=round_robin scripts/scale-out.sh   # another smg policy (this one fails the check)
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build -q -p ferrox
python3 -c "import smg" 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check smg
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
logs=$(mktemp -d)
pids=()
cleanup() {
    if [ -z "${KEEP:-}" ]; then
        for p in "${pids[@]}"; do { kill -KILL "$p" && wait "$p"; } 2>/dev/null || true; done
    fi
    rm -rf "$logs"
}
trap cleanup EXIT
wait_health() { # url pid what
    for _ in $(seq 300); do
        curl -sf "$1/health" >/dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || { echo "$3 exited:"; cat "$logs"/*; return 1; }
        sleep 1
    done
    echo "$3 not healthy in 5 minutes"; return 1
}

urls=()
# As the manifests run them: a key required, /metrics public for the scraper.
export FERROX_API_KEY="sk-scale-out-$RANDOM$RANDOM"
# One thread each: two replicas share the machine's two cores.
for i in 1 2; do
    port=$(free_port)
    target/debug/ferrox serve --host 127.0.0.1 --port "$port" --threads 1 -a default \
        --metrics-public >"$logs/replica$i.log" 2>&1 &
    pids+=($!)
    urls+=("http://127.0.0.1:$port")
done
for i in 0 1; do wait_health "${urls[$i]}" "${pids[$i]}" "replica $((i + 1))"; done

gport=$(free_port)
smg launch --host 127.0.0.1 --port "$gport" --worker-urls "${urls[@]}" \
    --policy "${POLICY:-cache_aware}" --health-check-interval-secs 2 --health-failure-threshold 1 \
    --prometheus-port "$(free_port)" --log-level warn --api-key "$FERROX_API_KEY" \
    >"$logs/gateway.log" 2>&1 &
pids+=($!)
wait_health "http://127.0.0.1:$gport" "${pids[2]}" "the gateway"

API_KEY="$FERROX_API_KEY" GATEWAY_URL="http://127.0.0.1:$gport" REPLICA_URLS="${urls[*]}" KILL_PID="${pids[1]}" \
    python3 tests/scale_out/check.py || { tail -20 "$logs"/gateway.log; exit 1; }
