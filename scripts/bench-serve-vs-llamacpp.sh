#!/usr/bin/env bash
# Side-by-side HTTP load: llama-server vs `ferrox serve` on the same machine, in the same run.
#
# Each round starts llama-server (`-np 8 -c 16384 -t 2`, as in ../shared/anchors.md), fires
# `ferrox bench serve` at it (N concurrent streaming /v1/completions, unique ~100-token
# prompts, 128 tokens each, temperature 0, ignore_eos), records its peak RSS (VmHWM) and stops
# it; then the same for `ferrox serve -t 2`. Rounds alternate the two (A B A B ...) and the
# table holds medians and ratios. llama.cpp is built as in scripts/llamacpp.sh.
#
#   scripts/bench-serve-vs-llamacpp.sh      # ROUNDS=3 THREADS=2 LEVELS=1,4,8,16
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
LEVELS=${LEVELS:-1,4,8,16}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PORT=${PORT:-18093}

build_llama_cpp
build_ferrox

# run NAME CMD...: start a server on $PORT, wait for /health, load it, record its peak RSS.
run() {
    local name=$1 round=$2
    shift 2
    "$@" >"$OUT/$name.$round.log" 2>&1 &
    local pid=$!
    for _ in $(seq 600); do
        kill -0 "$pid" 2>/dev/null || { cat "$OUT/$name.$round.log" >&2; exit 1; }
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
        sleep 0.1
    done
    "$FERROX" bench serve --url "http://127.0.0.1:$PORT" -n "$LEVELS" --json \
        >"$OUT/$name.$round.json"
    grep VmHWM "/proc/$pid/status" | awk '{print $2}' >"$OUT/$name.$round.rss"
    kill -INT "$pid"
    wait "$pid" || true
}

for r in $(seq "$ROUNDS"); do
    echo "round $r/$ROUNDS" >&2
    run llama-server "$r" "$LCPP_BUILD/bin/llama-server" -m "$MODEL" -np 8 -c 16384 \
        -t "$THREADS" --host 127.0.0.1 --port "$PORT"
    run ferrox "$r" "$FERROX" serve -m "$MODEL" -t "$THREADS" --host 127.0.0.1 --port "$PORT"
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
cells = {}
for who in ("llama-server", "ferrox"):
    for r in range(1, rounds + 1):
        for lv in json.load(open(f"{out}/{who}.{r}.json"))["levels"]:
            for k in ("output_tok_per_s", "ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms", "itl_p90_ms"):
                cells.setdefault((lv["concurrency"], k), {}).setdefault(who, []).append(lv[k] or float("nan"))
            if lv["failed"]:
                print(f"warning: {who} round {r} N={lv['concurrency']}: {lv['failed']} failed requests")
        rss = int(open(f"{out}/{who}.{r}.rss").read()) / 1024
        cells.setdefault((0, "peak RSS MiB"), {}).setdefault(who, []).append(rss)
print("| N | measure | llama-server (median) | ferrox (median) | ferrox / llama-server |")
print("|---|---|---|---|---|")
for (n, k), v in sorted(cells.items()):
    a, b = med(v["llama-server"]), med(v["ferrox"])
    print(f"| {n or 'all'} | {k} | {a:.1f} | {b:.1f} | {b / a:.2f} |")
print(f"\n({rounds} alternating rounds; raw results in {out})")
PY
