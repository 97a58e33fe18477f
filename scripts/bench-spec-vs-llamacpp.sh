#!/usr/bin/env bash
# Speculative decoding side by side: ferrox (speculation on vs off, interleaved per round on
# one server) against llama-server without speculation and with each of its n-gram
# `--spec-type`s, on the same machine, in the same run, through `ferrox bench serve
# --scenario code-edit | extract | chat` (fixed inputs, greedy except chat; see
# crates/ferrox/src/bench_spec.rs).
#
# Every server is started fresh for every scenario of every round and stopped after it, so no
# drafter, n-gram cache or prefix cache is warm from an earlier round: the cold run is the one
# that counts. Rounds alternate the servers (A B C ...); the table holds medians of the
# per-round median decode rates (output tokens after the first / time from first to last).
#
#   scripts/bench-spec-vs-llamacpp.sh     # ROUNDS=4 THREADS=2 (each prompt twice)
#   SCENARIOS="code-edit" SPEC_TYPES="ngram-simple" scripts/bench-spec-vs-llamacpp.sh
#   SHAPE=gemma3-4b scripts/bench-spec-vs-llamacpp.sh   # a real-shape random-weight model
#   DRAFT=FILE ...     # draft-model speculation: ferrox `-md FILE`, llama-server
#                      # `--spec-type draft-simple -md FILE --spec-draft-n-max 16`
#   TEMP=0 CONCURRENCY=1,8 ...   # every request greedy; the concurrency levels
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
ROUNDS=${ROUNDS:-4}
THREADS=${THREADS:-2}
SCENARIOS=${SCENARIOS:-code-edit extract chat}
if [ -n "${DRAFT:-}" ]; then
    SPEC_TYPES=${SPEC_TYPES:-draft-simple}
    FERROX_DRAFT=(-md "$DRAFT")
    LLAMA_DRAFT=(-md "$DRAFT" --spec-draft-n-max 16)
else
    SPEC_TYPES=${SPEC_TYPES:-ngram-simple ngram-map-k ngram-mod}
    FERROX_DRAFT=()
    LLAMA_DRAFT=()
fi
BENCH_ARGS=()
[ -n "${TEMP:-}" ] && BENCH_ARGS+=(--temperature "$TEMP")
[ -n "${CONCURRENCY:-}" ] && BENCH_ARGS+=(-n "$CONCURRENCY")
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PORT=${PORT:-18094}

build_llama_cpp
build_ferrox

# run NAME SCENARIO ROUND SPEC CMD...: start a server on $PORT, wait for /health, run the
# scenario against it (--spec SPEC), stop it.
run() {
    local name=$1 scenario=$2 round=$3 spec=$4
    shift 4
    "$@" >"$OUT/$name.$scenario.$round.log" 2>&1 &
    local pid=$!
    wait_healthy "$pid" "$PORT" "$OUT/$name.$scenario.$round.log" || exit 1
    "$FERROX" bench serve --url "http://127.0.0.1:$PORT" --scenario "$scenario" --spec "$spec" \
        ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"} --json >"$OUT/$name.$scenario.$round.json"
    kill -INT "$pid"
    wait "$pid" || true
}

LLAMA=("$LCPP_BUILD/bin/llama-server" -m "$MODEL" -np 16 -c 65536 -t "$THREADS"
    --host 127.0.0.1 --port "$PORT")
for r in $(seq "$ROUNDS"); do
    for s in $SCENARIOS; do
        echo "round $r/$ROUNDS: $s" >&2
        run ferrox "$s" "$r" both "$FERROX" serve -m "$MODEL" -t "$THREADS" --host 127.0.0.1 \
            --port "$PORT" ${FERROX_DRAFT[@]+"${FERROX_DRAFT[@]}"}
        run llama-none "$s" "$r" on "${LLAMA[@]}"
        for t in $SPEC_TYPES; do
            extra=()
            [[ $t == draft* ]] && extra=("${LLAMA_DRAFT[@]}")
            run "llama-$t" "$s" "$r" on "${LLAMA[@]}" --spec-type "$t" ${extra[@]+"${extra[@]}"}
        done
    done
done

python3 - "$OUT" "$ROUNDS" "$SCENARIOS" "$SPEC_TYPES" <<'PY'
import json, statistics, sys
out, rounds, scenarios, types = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
med = statistics.median

def rates(name, s):
    """{concurrency: {mode: [per-round median decode rate]}}, and accepted/drafted totals."""
    got, drafts = {}, {}
    for r in range(1, rounds + 1):
        for lv in json.load(open(f"{out}/{name}.{s}.{r}.json"))["levels"]:
            for m in lv["modes"]:
                rep = m["report"]
                if rep["failed"]:
                    print(f"warning: {name} {s} round {r}: {rep['failed']} failed requests")
                key = "on" if m["speculative"] else "off"
                got.setdefault(lv["concurrency"], {}).setdefault(key, []).append(
                    rep["median_decode_tok_per_s"] or float("nan"))
                if rep["drafts_accepted"] is not None:
                    a = drafts.setdefault((lv["concurrency"], key), [0, 0])
                    a[0] += rep["drafts_accepted"]
                    a[1] += rep["drafts_accepted"] + rep["drafts_rejected"]
    return got, drafts

print("| scenario | N | ferrox off | ferrox on | on / off | acceptance | llama-server none | "
      "llama-server best (type) | ferrox on / llama best |")
print("|---|---|---|---|---|---|---|---|---|")
for s in scenarios:
    fx, drafts = rates("ferrox", s)
    none, _ = rates("llama-none", s)
    best = {}
    for t in types:
        lt, _ = rates(f"llama-{t}", s)
        for n, modes in lt.items():
            v = med(modes["on"])
            if n not in best or v > best[n][0]:
                best[n] = (v, t)
    for n in sorted(fx):
        off, on = med(fx[n]["off"]), med(fx[n]["on"])
        acc = drafts.get((n, "on"))
        acc = f"{acc[0] / acc[1]:.2f} ({acc[0]}/{acc[1]})" if acc and acc[1] else "-"
        b, t = best[n]
        print(f"| {s} | {n} | {off:.1f} | {on:.1f} | {on / off:.2f} | {acc} | "
              f"{med(none[n]['on']):.1f} | {b:.1f} ({t}) | {on / b:.2f} |")
print(f"\n(median decode tok/s of {rounds} rounds; raw results in {out})")
PY
