#!/usr/bin/env bash
# Side-by-side speed: llama.cpp vs ferrox on the same machine, in the same run.
#
# Builds llama.cpp from the llama-cpp-python sdist on PyPI (it vendors llama.cpp) into a cache
# directory OUTSIDE the repository (nothing of llama.cpp is committed), then interleaves
# llama-bench / llama-batched-bench with `ferrox bench` (A B A B ...) and prints medians and
# ratios. The machines are noisy: quote the medians, never a single run.
#
#   scripts/bench-vs-llamacpp.sh            # ROUNDS=5 THREADS=2 BATCH=1,2,4,8,16
#   SHAPE=gemma3-4b ROUNDS=3 BATCH=16 scripts/bench-vs-llamacpp.sh   # a real-shape model (llamacpp.sh)
#   ISA=avx2 SHAPE=gemma3-4b scripts/bench-vs-llamacpp.sh   # both engines' AVX2 spellings (llamacpp.sh)
#
# The tg row is also given as read bandwidth: the weights a decode token reads (`ferrox bench
# --bandwidth`'s decode_bytes, the same file for every engine) times tokens per second, and
# that as a share of the plain read bandwidth `ferrox bench` measures in each round; ferrox's
# also as a share of plain reads of its own weights' memory taken beside each run.
#
# IK_LLAMA_DIR=DIR adds ik_llama.cpp's llama-bench (DIR/build/bin/llama-bench; built by hand,
# see docs/PERFORMANCE.md) to every round, as a third column (with ISA=avx2, an AVX2 build).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llamacpp.sh
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-2}
BATCH=${BATCH:-1,2,4,8,16}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

build_llama_cpp
build_ferrox

IK=${IK_LLAMA_DIR:+$IK_LLAMA_DIR/build/bin/llama-bench}
for r in $(seq "$ROUNDS"); do
    echo "round $r/$ROUNDS" >&2
    if [ -n "$IK" ]; then
        "$IK" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r 1 -o json >"$OUT/ik-bench.$r.json" 2>/dev/null
    fi
    "$LCPP_BUILD/bin/llama-bench" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r 1 -o json \
        >"$OUT/llama-bench.$r.json" 2>/dev/null
    "$FERROX" bench -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r 1 --bandwidth --json \
        >"$OUT/ferrox.$r.json"
    "$LCPP_BUILD/bin/llama-batched-bench" -m "$MODEL" -c 4096 -b 2048 -ub 512 -t "$THREADS" \
        -npp 128 -ntg 128 -npl "$BATCH" --output-format jsonl >"$OUT/batched.$r.jsonl" 2>/dev/null
    "$FERROX" bench -m "$MODEL" -t "$THREADS" -p 0 -n 128 -r 1 --batch "$BATCH" \
        --batch-prompt 128 --json >"$OUT/ferrox-batch.$r.json"
    /usr/bin/time -f "%M" -o "$OUT/rss-llama.$r" "$LCPP_BUILD/bin/llama-bench" -m "$MODEL" \
        -t "$THREADS" -p 512 -n 128 -r 1 >/dev/null 2>&1
    /usr/bin/time -f "%M" -o "$OUT/rss-ferrox.$r" "$FERROX" bench -m "$MODEL" -t "$THREADS" \
        -p 512 -n 128 -r 1 >/dev/null 2>&1
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys, glob
out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
rows = {}
decode_bytes, read_gbps, own_share = None, [], {}
def add(k, who, v):
    rows.setdefault(k, {}).setdefault(who, []).append(v)
for r in range(1, rounds + 1):
    for t in json.load(open(f"{out}/llama-bench.{r}.json")):
        k = f"pp{t['n_prompt']}" if t["n_gen"] == 0 else f"tg{t['n_gen']}"
        add(k, "llama.cpp", t["avg_ts"])
    fx = json.load(open(f"{out}/ferrox.{r}.json"))
    for k, s in fx.items():
        if k == "decode_bytes":
            decode_bytes = s
        elif k == "read_gbps":
            read_gbps.append(s["median"])
        elif k == "tg_weights_read_pct":
            # ferrox's decode against plain reads of its own weights taken right before and
            # after each run: the same memory at the same time.
            own_share.setdefault("tg", []).append(s["median"])
        elif k != "weights_read_gbps":
            add(k, "ferrox", s["median"])
    try:
        for t in json.load(open(f"{out}/ik-bench.{r}.json")):
            k = f"pp{t['n_prompt']}" if t["n_gen"] == 0 else f"tg{t['n_gen']}"
            add(k, "ik_llama.cpp", t["avg_ts"])
    except FileNotFoundError:
        pass
    for line in open(f"{out}/batched.{r}.jsonl"):
        line = line.strip()
        if line.startswith("{"):
            t = json.loads(line)
            if "pl" in t:
                add(f"batch{t['pl']}", "llama.cpp", t["speed_tg"])
    for k, s in json.load(open(f"{out}/ferrox-batch.{r}.json")).items():
        if k.startswith("batch"):
            add(k, "ferrox", s["median"])
    add("peak RSS MiB", "llama.cpp", int(open(f"{out}/rss-llama.{r}").read().split()[-1]) / 1024)
    add("peak RSS MiB", "ferrox", int(open(f"{out}/rss-ferrox.{r}").read().split()[-1]) / 1024)
ik = any("ik_llama.cpp" in v for v in rows.values())
print("| test | llama.cpp (median) | ferrox (median) | ratio |" + (" ik_llama.cpp | ferrox / ik |" if ik else ""))
print("|---|---|---|---|" + ("---|---|" if ik else ""))
for k, v in rows.items():
    a, b = med(v.get("llama.cpp", [float("nan")])), med(v.get("ferrox", [float("nan")]))
    line = f"| {k} | {a:.1f} | {b:.1f} | {b / a:.2f}x |"
    if ik:
        c = med(v.get("ik_llama.cpp", [float("nan")]))
        line += f" {c:.1f} | {b / c:.2f}x |"
    print(line)
if decode_bytes and read_gbps:
    bw = med(read_gbps)
    print(f"\nplain read: {bw:.1f} GB/s (median of rounds: {', '.join(f'{g:.1f}' for g in read_gbps)}); "
          f"a decode token reads {decode_bytes / 1e6:.0f} MB of weights")
    for k, v in rows.items():
        if k.startswith("tg"):
            for who, ts in v.items():
                gbs = med(ts) * decode_bytes / 1e9
                print(f"{k} {who}: {gbs:.1f} GB/s, {100 * gbs / bw:.0f} % of the plain read")
    for k, v in own_share.items():
        print(f"{k} ferrox against plain reads of its own weights beside each run: "
              f"{med(v):.0f} % (rounds: {', '.join(f'{p:.0f}' for p in v)})")
print(f"\n({rounds} interleaved rounds; raw results in {out})")
PY
