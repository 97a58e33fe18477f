#!/usr/bin/env bash
# A quantized KV cache's fidelity, ours beside llama.cpp's (scripts/kv-quant-fidelity.py says
# how): serves the default model four times — ferrox and llama-server, each with an f16 and a
# `KV` (q8_0 or q4_0) cache — and compares each engine's quantized run with its own f16 run, teacher-forced deep in
# a ~4k-token context. Exit status 0 when ours is no worse than llama.cpp's.
#
#   scripts/kv-quant-fidelity.sh        # THREADS=2 FROM=3000 TO=4000 KV=q8_0 (or q4_0)
#   KV_K=q4_0 KV_V=f16 scripts/kv-quant-fidelity.sh   # keys and values apart
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
THREADS=${THREADS:-2}
FROM=${FROM:-3000}
TO=${TO:-4000}
KV=${KV:-q8_0}
KV_K=${KV_K:-$KV}
KV_V=${KV_V:-$KV}
LOG=$(mktemp -d)

python3 -c 'import numpy, gguf' 2>/dev/null || python3 -m pip install --quiet numpy gguf
build_llama_cpp
build_ferrox

# The text: fixed files of the repository, far longer than TO tokens.
cat crates/ferrox/src/bench_spec/release-notes.md docs/SCHEDULER.md docs/ARCHITECTURE.md \
    >"$LOG/text.md"

PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
serve() { # port log cmd...
    local port=$1 log=$2
    shift 2
    "$@" --host 127.0.0.1 --port "$port" >"$LOG/$log.log" 2>&1 &
    PIDS+=($!)
    wait_healthy "$!" "$port" "$LOG/$log.log"
}
serve 18441 ferrox-f16 "$FERROX" serve -m "$MODEL" -t "$THREADS"
serve 18442 ferrox-q8 "$FERROX" serve -m "$MODEL" -t "$THREADS" --cache-type-k "$KV_K" \
    --cache-type-v "$KV_V"
LLAMA=("$LCPP_BUILD/bin/llama-server" -m "$MODEL" -t "$THREADS" -c 8192 -fa on)
serve 18443 llama-f16 "${LLAMA[@]}"
serve 18444 llama-q8 "${LLAMA[@]}" -ctk "$KV_K" -ctv "$KV_V"

python3 scripts/kv-quant-fidelity.py --text "$LOG/text.md" --from "$FROM" --to "$TO" \
    --ours-f16 http://127.0.0.1:18441 --ours-q8 http://127.0.0.1:18442 \
    --theirs-f16 http://127.0.0.1:18443 --theirs-q8 http://127.0.0.1:18444 \
    --json "$LOG/kv-fidelity.json"
echo "(figures in $LOG/kv-fidelity.json; server logs beside it)"
