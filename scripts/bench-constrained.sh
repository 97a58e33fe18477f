#!/usr/bin/env bash
# Constrained decoding under load, against one `ferrox serve`: N concurrent streaming
# completions (unique prompts, MAX_TOKENS each, ignore_eos) unconstrained, then the same with
# every output constrained to scripts/bench-schema.json (a record with a 64-item list, so no
# output ends before MAX_TOKENS), alternated for ROUNDS rounds after one discarded warm-up
# pass (which also builds the tokenizer's trie). Prints medians and the per-round ratio, then
# `ferrox bench grammar`'s compile time and per-token mask time for the same schema.
#
#   scripts/bench-constrained.sh      # ROUNDS=3 N=16 MAX_TOKENS=128 THREADS=2
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
ROUNDS=${ROUNDS:-3}
N=${N:-16}
MAX_TOKENS=${MAX_TOKENS:-128}
THREADS=${THREADS:-2}
PORT=${PORT:-18096}
OUT=${OUT:-$(mktemp -d)}
SCHEMA=scripts/bench-schema.json

build_ferrox
serve_ferrox "$PORT" "$THREADS" "$OUT/server.log"

run() { # name, extra args...
    local name=$1
    shift
    "$FERROX" bench serve --url "http://127.0.0.1:$PORT" -n "$N" --max-tokens "$MAX_TOKENS" \
        --json "$@" >"$OUT/$name.json"
}
run warm-free
run warm-constrained --schema "$SCHEMA"
for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then
        run "free.$round"
        run "constrained.$round" --schema "$SCHEMA"
    else
        run "constrained.$round" --schema "$SCHEMA"
        run "free.$round"
    fi
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
level = lambda name: json.load(open(f"{out}/{name}.json"))["levels"][0]
free = [level(f"free.{i}") for i in range(1, rounds + 1)]
con = [level(f"constrained.{i}") for i in range(1, rounds + 1)]
tps = lambda ls: [l["output_tok_per_s"] for l in ls]
ratios = [c / f for c, f in zip(tps(con), tps(free))]
print(f"unconstrained: {statistics.median(tps(free)):.1f} tok/s ({free[0]['output_tokens']} tokens a wave)")
print(f"constrained:   {statistics.median(tps(con)):.1f} tok/s ({con[0]['output_tokens']} tokens a wave)")
print(f"ratio (median of rounds): {statistics.median(ratios):.3f}  ({' '.join(f'{r:.2f}' for r in ratios)})")
PY
kill "$FERROX_PID" 2>/dev/null || true
wait "$FERROX_PID" 2>/dev/null || true
"$FERROX" bench grammar --schema "$SCHEMA"
