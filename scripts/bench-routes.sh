#!/usr/bin/env bash
# Throughput through each protocol adapter, in one run against one `ferrox serve`:
# `ferrox bench serve -n N --route R` for every route, the routes interleaved round by round
# and their order rotated each round (so no route always runs first), medians of output
# tok/s, and the median over rounds of each adapter's ratio to its twin in the same round
# (the machine's speed drifts between rounds; a ratio within one round does not). Each adapter is compared with its twin:
# Anthropic's `messages` and OpenAI's `responses` with `chat` (all three render the same chat
# template, greedy, so they generate the same tokens), llama.cpp's `completion` with OpenAI's
# `completions` (raw prompts, ignore_eos: exactly MAX_TOKENS each), Ollama's `ollama` chat with
# `chat` (the same template and tokens, an NDJSON stream).
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
read -ra ROUTES <<<"${ROUTES:-chat messages responses ollama completions completion}"

build_ferrox
serve_ferrox "$PORT" "$THREADS" "$OUT/server.log"
# Ollama's API names the model: the served one.
MODEL=$(python3 -c 'import json,sys,urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1]))["data"][0]["id"])' "http://127.0.0.1:$PORT/v1/models")

# One discarded pass first: the server's first full batches touch fresh KV and activation
# memory and run slower, whichever route they come through.
for route in "${ROUTES[@]}"; do
    "$FERROX" bench serve --url "http://127.0.0.1:$PORT" -n "$N" --route "$route" \
        --model "$MODEL" --max-tokens "$MAX_TOKENS" --json >/dev/null
done

for round in $(seq 1 "$ROUNDS"); do
    k=$(( (round - 1) % ${#ROUTES[@]} ))
    for route in "${ROUTES[@]:k}" "${ROUTES[@]:0:k}"; do
        "$FERROX" bench serve --url "http://127.0.0.1:$PORT" -n "$N" --route "$route" \
            --model "$MODEL" --max-tokens "$MAX_TOKENS" --json >"$OUT/$route.$round.json"
        echo "round $round $route: $(python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["levels"][0]; print(round(l["output_tok_per_s"],1), "tok/s,", l["output_tokens"], "tokens")' "$OUT/$route.$round.json")"
    done
done

python3 - "$OUT" "$ROUNDS" "${ROUTES[@]}" <<'PY'
import json, statistics, sys
out, rounds, routes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
levels = {r: [json.load(open(f"{out}/{r}.{i}.json"))["levels"][0] for i in range(1, rounds + 1)]
          for r in routes}
tps = {r: [l["output_tok_per_s"] for l in ls] for r, ls in levels.items()}
twin = {"messages": "chat", "responses": "chat", "ollama": "chat", "completion": "completions"}
print(f"{'route':<12} {'tok/s':>8} {'tokens':>7}  per-round ratio to its twin (median)")
for r in routes:
    toks = statistics.median(l["output_tokens"] for l in levels[r])
    ratio = ""
    if twin.get(r) in tps:
        ratios = [a / b for a, b in zip(tps[r], tps[twin[r]])]
        ratio = f"{statistics.median(ratios):.3f} x {twin[r]}  ({' '.join(f'{x:.2f}' for x in ratios)})"
    print(f"{r:<12} {statistics.median(tps[r]):>8.1f} {toks:>7}  {ratio}")
PY
