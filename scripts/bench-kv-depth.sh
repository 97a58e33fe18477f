#!/usr/bin/env bash
# Decode deep in a context, by KV cache type: llama-bench vs `ferrox bench` with the same
# depth (`-d`, tokens already in the KV, computed untimed) and the same `-ctk/-ctv`, on the
# same machine, interleaved (A B A B ...), medians. llama.cpp runs with flash attention, which
# its quantized V cache needs. llama.cpp is built as in scripts/llamacpp.sh.
#
#   scripts/bench-kv-depth.sh                       # ROUNDS=3 DEPTHS="4000 16000" TYPES="f16 q8_0"
#   SHAPE=gemma3-4b DEPTHS=4000 scripts/bench-kv-depth.sh   # a real-shape random-weight model
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
DEPTHS=${DEPTHS:-4000 16000}
TYPES=${TYPES:-f16 q8_0}
NGEN=${NGEN:-64}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

build_llama_cpp
build_ferrox

for r in $(seq "$ROUNDS"); do
    for d in $DEPTHS; do
        for t in $TYPES; do
            echo "round $r/$ROUNDS: depth $d, $t" >&2
            "$LCPP_BUILD/bin/llama-bench" -m "$MODEL" -t "$THREADS" -p 0 -n "$NGEN" -d "$d" \
                -ctk "$t" -ctv "$t" -fa 1 -r 1 -o json >"$OUT/llama.$d.$t.$r.json" 2>/dev/null
            "$FERROX" bench -m "$MODEL" -t "$THREADS" -p 0 -n "$NGEN" -d "$d" -r 1 \
                --cache-type-k "$t" --cache-type-v "$t" --json >"$OUT/ferrox.$d.$t.$r.json"
        done
    done
done

python3 - "$OUT" "$ROUNDS" "$DEPTHS" "$TYPES" "$NGEN" <<'PY'
import json, statistics, sys
out, rounds, depths, types, ngen = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
med = statistics.median
print(f"| depth | KV | llama.cpp tg{ngen} (median) | ferrox tg{ngen} (median) | ferrox / llama.cpp |")
print("|---|---|---|---|---|")
for d in depths:
    for t in types:
        a = med(json.load(open(f"{out}/llama.{d}.{t}.{r}.json"))[0]["avg_ts"] for r in range(1, rounds + 1))
        b = med(json.load(open(f"{out}/ferrox.{d}.{t}.{r}.json"))[f"tg{ngen} @ d{d}"]["median"]
                for r in range(1, rounds + 1))
        print(f"| {d} | {t} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
print(f"\n({rounds} interleaved rounds; raw results in {out})")
PY
