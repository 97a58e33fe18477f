#!/usr/bin/env bash
# Regenerates the llama.cpp parity goldens (issue 25, item 4): for every model of
# `SyntheticSpec::parity_models()` (a random-weight GGUF per architecture), writes the file,
# serves it with llama-server (built by scripts/llamacpp.sh, outside the repository) and
# records llama.cpp's greedy tokens and top-10 log-probabilities in
# crates/engine/tests/data/parity/NAME.json. `crates/engine/tests/parity.rs` holds our engine
# to them; `bert-reranker` is a cross-encoder, whose golden is llama-server's `/v1/rerank`
# scores (`crates/server/tests/http/rerank.rs`). Run it when the synthetic writer or a parity spec changes (the test names the
# model's fingerprint and says so), or with a new llama.cpp.
#
#   scripts/gen-parity-goldens.sh [NAME...]     # default: every parity model
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
PORT=${PORT:-18561}
WORK=$(mktemp -d)
OUT=crates/engine/tests/data/parity
mkdir -p "$OUT"

build_llama_cpp
cargo build -q --release -p ferrox-engine --example parity_model
NAMES=("$@")
if [ ${#NAMES[@]} -eq 0 ]; then
    NAMES=(gemma3 gemma2 phi3 llama qwen2 qwen3 qwen3moe olmoe mixtral gpt-oss granite granitemoe
        olmo2 smollm3 glm4 llama3.1 mistral3 qwen2moe phi4-mini granitemoe-shared bert-reranker)
fi
for name in "${NAMES[@]}"; do
    fp=$(target/release/examples/parity_model "$name" "$WORK/$name.gguf")
    extra=()
    [ "$name" = bert-reranker ] && extra=(--reranking)
    "$LCPP_BUILD/bin/llama-server" -m "$WORK/$name.gguf" -t 2 -c 2048 --host 127.0.0.1 \
        --port "$PORT" "${extra[@]}" >"$WORK/$name.log" 2>&1 &
    pid=$!
    trap 'kill "$pid" 2>/dev/null || true' EXIT
    wait_healthy "$pid" "$PORT" "$WORK/$name.log"
    if [ "$name" = bert-reranker ]; then
        # llama-server's scores for fixed pairs (crates/server/tests/http/rerank.rs).
        python3 - "$fp" "http://127.0.0.1:$PORT" "$OUT/$name.json" <<'PY'
import json, sys, urllib.request
fp, url, out = sys.argv[1:]
query = "hello world"
docs = ["the cat sat", "hello world playing", "unaffable !", "the world sat", "中文 hello"]
req = urllib.request.Request(url + "/v1/rerank", data=json.dumps(
    {"query": query, "documents": docs}).encode(), headers={"Content-Type": "application/json"})
r = json.loads(urllib.request.urlopen(req).read())
scores = [None] * len(docs)
for item in r["results"]:
    scores[item["index"]] = item["relevance_score"]
json.dump({"model": "bert-reranker", "fingerprint": fp, "query": query, "documents": docs,
           "scores": scores, "prompt_tokens": r["usage"]["prompt_tokens"]}, open(out, "w"))
print("bert-reranker:", scores)
PY
    else
        python3 scripts/gen-parity-goldens.py --name "$name" --fingerprint "$fp" \
            --url "http://127.0.0.1:$PORT" --out "$OUT/$name.json" --llama-cpp "$VERSION"
    fi
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done
rm -rf "$WORK"
