#!/usr/bin/env bash
# Side-by-side prompt reuse: llama-server vs `ferrox serve` on the same machine, in the same run.
#
# Two scenarios of `ferrox bench serve` (crates/ferrox/src/bench_reuse.rs says what each
# sends), each against a freshly started server, so no scenario finds another's prompt cached:
# - conversation: one streaming chat, a 1,500-word system prompt, TURNS turns (default 4) of
#   16 new tokens each, the whole history resent every turn; TTFT of turn 1 and of turns 2+.
#   llama-server `-np 4 -c 16384` (4,096 positions a slot; the chat ends near 2,000).
# - shared-prefix: USERS concurrent chats (default 16) behind one ~1,500-token system prompt,
#   each its own question, 32 tokens each; TTFT p50/p90 and output tok/s. llama-server
#   `-np 16 -c 32768`: a slot per user, as in the 16-concurrent anchor of
#   ../shared/anchors.md; `-c` is split across slots, and 2,048 positions fit the prompt
#   where the HTTP load's `-c 16384` would leave 1,024.
# llama-server also gets `--no-jinja --chat-template gemma` (LLAMA_CHAT_ARGS): the default
# model's GGUF carries no chat template, and without one llama-server renders ChatML, which
# Gemma reads as plain text (27 tokens more for a 60-word system prompt and one question);
# ferrox uses Gemma's own format. With the flag both count the same prompt tokens.
# ferrox runs as `ferrox serve -t 2` with its defaults. Each scenario alternates the two
# servers every round (A B A B ...); the table holds medians and ratios, with each server's
# prompt and output tokens beside them (no ignore_eos here, so a reply may end early).
# llama.cpp is built as in scripts/llamacpp.sh.
#
#   scripts/bench-prefix-vs-llamacpp.sh      # ROUNDS=3 THREADS=2 TURNS=4 USERS=16
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
TURNS=${TURNS:-4}
USERS=${USERS:-16}
CONV_NP=${CONV_NP:-4}
CONV_CTX=${CONV_CTX:-16384}
SHARED_NP=${SHARED_NP:-$USERS}
SHARED_CTX=${SHARED_CTX:-32768}
read -ra LLAMA_CHAT <<<"${LLAMA_CHAT_ARGS:---no-jinja --chat-template gemma}"
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PORT=${PORT:-18094}

build_llama_cpp
build_ferrox

# run NAME ROUND SCENARIO CMD...: start a server on $PORT, wait for /health, run the
# scenario against it, record its peak RSS, stop it.
run() {
    local name=$1 round=$2 scenario=$3
    shift 3
    local tag="$name.$scenario.$round"
    "$@" >"$OUT/$tag.log" 2>&1 &
    local pid=$!
    for _ in $(seq 600); do
        kill -0 "$pid" 2>/dev/null || { cat "$OUT/$tag.log" >&2; exit 1; }
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
        sleep 0.1
    done
    local load=(--scenario "$scenario")
    case $scenario in
    conversation) load+=(--turns "$TURNS") ;;
    shared-prefix) load+=(-n "$USERS") ;;
    esac
    if ! "$FERROX" bench serve --url "http://127.0.0.1:$PORT" "${load[@]}" --json \
        >"$OUT/$tag.json"; then
        kill -INT "$pid"
        wait "$pid" || true
        echo "$name, $scenario, round $round failed; server log: $OUT/$tag.log" >&2
        exit 1
    fi
    grep VmHWM "/proc/$pid/status" | awk '{print $2}' >"$OUT/$tag.rss"
    kill -INT "$pid"
    wait "$pid" || true
}

for r in $(seq "$ROUNDS"); do
    echo "round $r/$ROUNDS" >&2
    run llama-server "$r" conversation "$LCPP_BUILD/bin/llama-server" -m "$MODEL" \
        -np "$CONV_NP" -c "$CONV_CTX" -t "$THREADS" "${LLAMA_CHAT[@]}" \
        --host 127.0.0.1 --port "$PORT"
    run ferrox "$r" conversation "$FERROX" serve -m "$MODEL" -t "$THREADS" \
        --host 127.0.0.1 --port "$PORT"
    run llama-server "$r" shared-prefix "$LCPP_BUILD/bin/llama-server" -m "$MODEL" \
        -np "$SHARED_NP" -c "$SHARED_CTX" -t "$THREADS" "${LLAMA_CHAT[@]}" \
        --host 127.0.0.1 --port "$PORT"
    run ferrox "$r" shared-prefix "$FERROX" serve -m "$MODEL" -t "$THREADS" \
        --host 127.0.0.1 --port "$PORT"
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, math, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
who_all = ("llama-server", "ferrox")
rows = {}  # (scenario, measure) -> {server: [per-round values]}

def put(scenario, measure, who, value):
    value = float("nan") if value is None else float(value)
    rows.setdefault((scenario, measure), {}).setdefault(who, []).append(value)

for who in who_all:
    for r in range(1, rounds + 1):
        c = json.load(open(f"{out}/{who}.conversation.{r}.json"))
        turns = c["turns"]
        put("conversation", "turn 1 TTFT ms", who, turns[0]["ttft_ms"])
        put("conversation", "turns 2+ TTFT ms (median)", who, c["later_turns_ttft_p50_ms"])
        put("conversation", "turn 1 prompt tokens", who, turns[0]["prompt_tokens"])
        put("conversation", "output tokens, all turns", who,
            sum(t["output_tokens"] or 0 for t in turns))
        put("conversation", "peak RSS MiB", who,
            int(open(f"{out}/{who}.conversation.{r}.rss").read()) / 1024)
        s = json.load(open(f"{out}/{who}.shared-prefix.{r}.json"))
        for lv in s["levels"]:
            n = lv["concurrency"]
            if lv["failed"]:
                print(f"warning: {who} round {r} shared-prefix N={n}: {lv['failed']} failed")
            put(f"shared-prefix N={n}", "TTFT p50 ms", who, lv["ttft_p50_ms"])
            put(f"shared-prefix N={n}", "TTFT p90 ms", who, lv["ttft_p90_ms"])
            put(f"shared-prefix N={n}", "output tok/s", who, lv["output_tok_per_s"])
            put(f"shared-prefix N={n}", "mean prompt tokens", who, lv["mean_prompt_tokens"])
            put(f"shared-prefix N={n}", "output tokens", who, lv["output_tokens"])
        put("shared-prefix", "peak RSS MiB", who,
            int(open(f"{out}/{who}.shared-prefix.{r}.rss").read()) / 1024)

print("| scenario | measure | llama-server (median) | ferrox (median) | ferrox / llama-server |")
print("|---|---|---|---|---|")
for (scenario, measure), v in rows.items():
    a, b = statistics.median(v["llama-server"]), statistics.median(v["ferrox"])
    ratio = b / a if a and not math.isnan(a) else float("nan")
    print(f"| {scenario} | {measure} | {a:.1f} | {b:.1f} | {ratio:.2f} |")
print(f"\n({rounds} alternating rounds per scenario; raw results in {out})")
PY
