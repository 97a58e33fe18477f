#!/usr/bin/env python3
"""What a quantized KV cache costs in fidelity, ours beside llama.cpp's (issue 24, item 4).

Teacher-forced over the positions `--from`..`--to` of one fixed text (its first `--to`
tokens: deep in a long context, where a quantized cache has the most to get wrong), each
engine is asked for its top-20 log-probabilities at every position twice: with an f16 KV
cache and with a quantized one (q8_0 or q4_0; the `*-q8` URLs). The figure is the mean
KL(f16 || quantized) of each engine over those
positions, bounded from below from the two top-20 lists as `fidelity-gate.py` bounds it (the
f16 list's ids are buckets, everything else one tail bucket), and how often the top-1
changes. Target: ours no larger than llama.cpp's.

  scripts/kv-quant-fidelity.sh    # serves the four configurations, then runs this
  python3 scripts/kv-quant-fidelity.py --ours-f16 URL --ours-q8 URL --theirs-f16 URL \\
      --theirs-q8 URL --text FILE [--from 3000 --to 4000]
"""
import argparse
import importlib.util
import json
import math
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("gate", os.path.join(HERE, "fidelity-gate.py"))
gate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gate)


def as_distribution(top, vocab):
    """A full distribution from a top list: the listed probabilities, the rest of the mass
    spread evenly over every other id (so that none of them enters a top-20)."""
    p = np.zeros(vocab)
    listed = {i: math.exp(lp) for i, lp in top}
    rest = max(1.0 - sum(listed.values()), 0.0)
    p[:] = rest / (vocab - len(listed))
    for i, q in listed.items():
        p[i] = q
    return p


def run(base, ids, lo, hi):
    return [gate.engine_top(base, ids[:n]) for n in range(lo, hi)]


def main():
    ap = argparse.ArgumentParser()
    for name in ("ours-f16", "ours-q8", "theirs-f16", "theirs-q8"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--from", dest="lo", type=int, default=3000)
    ap.add_argument("--to", dest="hi", type=int, default=4000)
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--json")
    a = ap.parse_args()
    ids = gate.tokenize(getattr(a, "ours_f16"), open(a.text).read())[: a.hi]
    assert len(ids) >= a.hi, f"the text has {len(ids)} tokens, fewer than {a.hi}"
    out = {}
    for who in ("ours", "theirs"):
        f16 = run(getattr(a, f"{who}_f16"), ids, a.lo, a.hi)
        q8 = run(getattr(a, f"{who}_q8"), ids, a.lo, a.hi)
        kls = [gate.kl_lower_bound(as_distribution(p, a.vocab), q) for p, q in zip(f16, q8)]
        flips = sum(p[0][0] != q[0][0] for p, q in zip(f16, q8))
        out[who] = {
            "mean_kld": float(np.mean(kls)),
            "p99_kld": float(np.percentile(kls, 99)),
            "top1_changed": flips / len(kls),
            "positions": len(kls),
        }
        print(f"{who:>6}: mean KL(f16 || quantized) {out[who]['mean_kld']:.6f}, "
              f"p99 {out[who]['p99_kld']:.5f}, top-1 changed at "
              f"{100 * out[who]['top1_changed']:.2f}% of {len(kls)} positions "
              f"({a.lo}..{a.hi})")
    ratio = out["ours"]["mean_kld"] / max(out["theirs"]["mean_kld"], 1e-12)
    print(f"ours / theirs: {ratio:.3f} ({'pass' if ratio <= 1.0 else 'FAIL'}: target <= 1)")
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)
    return 0 if ratio <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
