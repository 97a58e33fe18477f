#!/usr/bin/env bash
# Throughput through each protocol adapter, in one run against one `ferrox serve`:
# `ferrox bench serve -n N --route R` for every route, the routes interleaved round by round
# (R1 R2 ... R1 R2 ...), medians of output tok/s. Each adapter is compared with its twin:
# Anthropic's `messages` and OpenAI's `responses` with `chat` (all three render the same chat
# template, greedy, so they generate the same tokens), llama.cpp's `completion` with OpenAI's
# `completions` (raw prompts, ignore_eos: exactly MAX_TOKENS each).
#
#   scripts/bench-routes.sh   # ROUNDS=3 N=16 MAX_TOKENS=128 THREADS=2 ROUTES="chat messages ..."
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
ROUNDS=${ROUNDS:-3}
N=${N:-16}
MAX_TOKENS=${MAX_TOKENS:-128}
THREADS=${THREADS:-2}
PORT=${PORT:-18095}
OUT=${OUT:-$(mktemp -d)}
read -ra ROUTES <<<"${ROUTES:-chat messages responses completions completion}"

build_ferrox
"$FERROX" serve -t "$THREADS" --host 127.0.0.1 --port "$PORT" >"$OUT/server.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    sleep 0.5
done

for round in $(seq 1 "$ROUNDS"); do
    for route in "${ROUTES[@]}"; do
        "$FERROX" bench serve --url "http://127.0.0.1:$PORT" -n "$N" --route "$route" \
            --max-tokens "$MAX_TOKENS" --json >"$OUT/$route.$round.json"
        echo "round $round $route: $(python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["levels"][0]; print(round(l["output_tok_per_s"],1), "tok/s,", l["output_tokens"], "tokens")' "$OUT/$route.$round.json")"
    done
done

python3 - "$OUT" "$ROUNDS" "${ROUTES[@]}" <<'PY'
import json, statistics, sys
out, rounds, routes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = {}
for r in routes:
    levels = [json.load(open(f"{out}/{r}.{i}.json"))["levels"][0] for i in range(1, rounds + 1)]
    med[r] = (statistics.median(l["output_tok_per_s"] for l in levels),
              statistics.median(l["output_tokens"] for l in levels))
twin = {"messages": "chat", "responses": "chat", "completion": "completions"}
print(f"{'route':<12} {'tok/s':>8} {'tokens':>7}  vs twin")
for r in routes:
    tps, toks = med[r]
    ratio = f"{tps / med[twin[r]][0]:.3f} x {twin[r]}" if twin.get(r) in med else ""
    print(f"{r:<12} {tps:>8.1f} {toks:>7}  {ratio}")
PY
