#!/usr/bin/env python3
"""The fidelity gate for work that changes the engine's numbers (issue 23, item 4).

Judges an engine statistically against the float64 reference forward
(`../shared/reference/gemma3_ref.py`), with llama.cpp as the bar, as
`../shared/golden/gemma3-270m/README.md` ("The gate for work that changes the engine's
numbers") defines it:

  teacher-forced over >= 1,000 positions (the golden prompts followed by the reference's own
  greedy continuations, plus texts of our own: prose, code, a list, numbers, other languages,
  a chat turn), at every position KL(f64 || engine) and whether the engine's top-1 is the
  reference's; pass if our mean KLD <= 1.10 x llama.cpp's, our top-1 agreement >= llama.cpp's
  - 0.010, and no single text's mean KLD above 1.5 x llama.cpp's on that text.

Both engines are asked the same way, one position per request through llama-server's
`/completion` (`n_predict: 1`, `n_probs: 20`, raw log-probabilities, the prompt as token ids;
each request extends the previous one, so both reuse their cached prefix): the schedule is
"one new token per request, the rest from the prompt cache" for both. With only a top-20 list
the KL is bounded from below: the reference's top-20 ids are buckets of their own, everything
else one tail bucket; an id the engine did not list gets the mass that minimises the KL within
what its list allows (at most its 20th probability), the rest goes to the tail.

  scripts/fidelity-gate.sh     # builds and serves both engines, then runs this
  python3 scripts/fidelity-gate.py --model M --ours URL --theirs URL [--json OUT]

Needs `numpy` and `gguf` (pip, by package name).
"""
import argparse
import json
import math
import os
import sys
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared")
sys.path.insert(0, os.path.join(SHARED, "reference"))
from gemma3_ref import Gemma3  # noqa: E402

TOP = 20

# Texts of our own, so that the positions are not all short factual prompts.
TEXTS = {
    "prose": "The old lighthouse keeper climbed the spiral stairs every evening, counting the "
    "steps as his father had taught him. Ninety-seven, always ninety-seven, even on the "
    "night the storm tore the shutters from the windows and the sea came over the rocks. "
    "He lit the lamp, wiped the salt from the glass, and sat down to write in the log.",
    "code": "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n"
    "    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n"
    "        else:\n            out.append(b[j])\n            j += 1\n"
    "    out.extend(a[i:])\n    out.extend(b[j:])\n    return out\n",
    "list": "Shopping list for the week:\n- 2 kg potatoes\n- 6 eggs\n- a loaf of rye bread\n"
    "- olive oil\n- tomatoes, onions and garlic\n- coffee beans (dark roast)\n- 1 litre of milk\n",
    "numbers": "In 2023 the company sold 14,250 units at an average price of $39.99, for a "
    "revenue of about $569,857. Costs were 61.4% of revenue, and the margin rose from 31.2% "
    "to 38.6% between Q1 and Q4. The target for 2024 is 18,000 units.",
    "german_french": "Der schnelle braune Fuchs springt über den faulen Hund. Am Abend gehen "
    "wir in den Park. Le petit chat dort sur le canapé pendant que la pluie tombe dehors, et "
    "nous buvons un café en lisant le journal.",
    "recipe": "To make a simple tomato soup, heat two tablespoons of olive oil in a large pot. "
    "Add one chopped onion and cook for five minutes until soft. Stir in three cloves of "
    "garlic, then a kilo of ripe tomatoes cut into quarters. Pour in half a litre of stock, "
    "season with salt and pepper, and simmer for twenty minutes before blending until smooth.",
    "chat": "<start_of_turn>user\nCan you explain in two sentences why the sky is blue?"
    "<end_of_turn>\n<start_of_turn>model\nSunlight is scattered by the molecules in the air, "
    "and shorter blue wavelengths are scattered much more than red ones. So when we look at "
    "the sky away from the sun, we mostly see that scattered blue light.<end_of_turn>\n",
}


def post(url, body):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def tokenize(base, text):
    r = post(f"{base}/tokenize", {"content": text, "add_special": True, "parse_special": True})
    return r["tokens"]


def engine_top(base, ids):
    """The engine's top-20 (id, logprob) after the prefix `ids`, raw (no sampler)."""
    r = post(
        f"{base}/completion",
        {
            "prompt": ids,
            "n_predict": 1,
            "temperature": 0,
            "n_probs": TOP,
            "post_sampling_probs": False,
            "cache_prompt": True,
        },
    )
    probs = r["completion_probabilities"][0]
    return [(t["id"], t["logprob"]) for t in probs["top_logprobs"]]


class AllPositions(Gemma3):
    """The reference forward with every position's logits: the last layer's residual stream
    is taken from the reference's own norm calls (its input to the FFN norm, plus the FFN's
    normed output), then the same output norm and head."""

    def rms(self, x, wname):
        out = super().rms(x, wname)
        last = f"blk.{self.n_layer - 1}."
        if wname == last + "ffn_norm.weight":
            self._x_mid = x
        elif wname == last + "post_ffw_norm.weight":
            self._ffn = out
        return out

    def all_logits(self, ids):
        self.forward_last_logits(ids)
        x = self._x_mid + self._ffn
        h = super().rms(x, "output_norm.weight")
        lg = h @ self._cache["__head64"].T
        if self.softcap:
            lg = np.tanh(lg / self.softcap) * self.softcap
        return lg


def kl_lower_bound(p, top):
    """KL(p || engine) bounded from below from the engine's top list (see the module doc).
    `p`: the reference's full distribution (float64); `top`: [(id, logprob)]."""
    k_ids = np.argsort(-p)[:TOP]
    k_set = set(int(i) for i in k_ids)
    q_listed = {i: math.exp(lp) for i, lp in top}
    q_min = min(q_listed.values())
    p_tail = max(1.0 - float(p[k_ids].sum()), 0.0)
    known = [(float(p[i]), q_listed[int(i)]) for i in k_ids if int(i) in q_listed]
    unknown = [float(p[i]) for i in k_ids if int(i) not in q_listed]
    q_tail_listed = sum(q for i, q in q_listed.items() if i not in k_set)
    rest = max(1.0 - sum(q_listed.values()), 0.0)
    base = sum(pi * math.log(pi / qi) for pi, qi in known if pi > 0)

    def fill(mass):
        # Spread `mass` over the unlisted ids in proportion to p, none above q_min.
        qs, left, todo = {}, mass, list(range(len(unknown)))
        while todo:
            ps = sum(unknown[j] for j in todo)
            if ps <= 0:
                break
            capped = [j for j in todo if unknown[j] * left / ps > q_min]
            if not capped:
                for j in todo:
                    qs[j] = unknown[j] * left / ps
                break
            for j in capped:
                qs[j] = q_min
                left -= q_min
            todo = [j for j in todo if j not in capped]
        return qs

    def total(x_tail):
        qs = fill(rest - x_tail)
        s = base
        for j, pj in enumerate(unknown):
            if pj > 0:
                s += pj * math.log(pj / max(qs.get(j, 0.0), 1e-300))
        if p_tail > 0:
            s += p_tail * math.log(p_tail / max(q_tail_listed + x_tail, 1e-300))
        return s

    # The minimum over how the unlisted mass splits between the tail and the unlisted top ids
    # (convex in x_tail): a coarse grid, then a finer one around the best point.
    lo, hi = 0.0, rest
    best = min(total(lo + (hi - lo) * t / 32) for t in range(33))
    for _ in range(3):
        xs = [lo + (hi - lo) * t / 32 for t in range(33)]
        vals = [total(x) for x in xs]
        b = int(np.argmin(vals))
        best = min(best, vals[b])
        lo, hi = xs[max(b - 1, 0)], xs[min(b + 1, 32)]
    return max(best, 0.0)


def sequences(golden, base):
    out = []
    for line in open(golden):
        d = json.loads(line)
        out.append((d["prompt"][:24], d["ids_prompt"] + d["ref_f64_ids_out"]))
    for name, text in TEXTS.items():
        out.append((name, tokenize(base, text)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ours", required=True, help="base URL of ferrox serve")
    ap.add_argument("--theirs", required=True, help="base URL of llama-server")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    golden = os.path.join(SHARED, "golden", "gemma3-270m", "greedy.jsonl")
    seqs = sequences(golden, args.ours)
    ref = AllPositions(args.model)
    engines = {"ferrox": args.ours, "llama.cpp": args.theirs}
    per_text = []
    totals = {e: {"kl": [], "top1": []} for e in engines}
    for name, ids in seqs:
        lg = ref.all_logits(ids)
        row = {"text": name, "positions": len(ids)}
        for e, base in engines.items():
            kls, top1 = [], []
            for pos in range(len(ids)):
                l = lg[pos]
                p = np.exp(l - l.max())
                p /= p.sum()
                top = engine_top(base, ids[: pos + 1])
                kls.append(kl_lower_bound(p, top))
                top1.append(int(top[0][0] == int(np.argmax(l))))
            totals[e]["kl"] += kls
            totals[e]["top1"] += top1
            row[e] = {"kld": float(np.mean(kls)), "top1": float(np.mean(top1))}
        per_text.append(row)
        print(
            f"{name:24s} {len(ids):4d} pos  KLD ferrox {row['ferrox']['kld']:.5f} "
            f"llama.cpp {row['llama.cpp']['kld']:.5f}  top-1 {row['ferrox']['top1']:.3f} / "
            f"{row['llama.cpp']['top1']:.3f}",
            file=sys.stderr,
        )
    n = len(totals["ferrox"]["kl"])
    ours_kl = float(np.mean(totals["ferrox"]["kl"]))
    their_kl = float(np.mean(totals["llama.cpp"]["kl"]))
    ours_t1 = float(np.mean(totals["ferrox"]["top1"]))
    their_t1 = float(np.mean(totals["llama.cpp"]["top1"]))
    worst = max(per_text, key=lambda r: r["ferrox"]["kld"] / max(r["llama.cpp"]["kld"], 1e-12))
    worst_ratio = worst["ferrox"]["kld"] / max(worst["llama.cpp"]["kld"], 1e-12)
    checks = {
        "positions >= 1000": bool(n >= 1000),
        "mean KLD <= 1.10 x llama.cpp": bool(ours_kl <= 1.10 * their_kl),
        "top-1 >= llama.cpp - 0.010": bool(ours_t1 >= their_t1 - 0.010),
        "every text's KLD <= 1.5 x llama.cpp's": bool(worst_ratio <= 1.5),
    }
    print(f"positions {n}")
    print(f"mean KLD  ferrox {ours_kl:.5f}  llama.cpp {their_kl:.5f}  ratio {ours_kl / their_kl:.3f}")
    print(f"top-1     ferrox {ours_t1:.4f}  llama.cpp {their_t1:.4f}")
    print(f"worst text {worst['text']!r}: KLD ratio {worst_ratio:.3f}")
    for what, ok in checks.items():
        print(f"{'pass' if ok else 'FAIL'}: {what}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"positions": n, "ferrox": {"kld": ours_kl, "top1": ours_t1},
                       "llama.cpp": {"kld": their_kl, "top1": their_t1},
                       "texts": per_text, "checks": checks}, f, indent=1)
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
