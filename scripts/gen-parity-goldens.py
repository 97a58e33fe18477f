#!/usr/bin/env python3
"""Asks a running llama-server for the goldens of one parity model (issue 25, item 4).

The model is one of `SyntheticSpec::parity_models()` (a random-weight GGUF of one
architecture, written by `cargo run -p ferrox-engine --example parity_model`). For each of
PROMPTS seeded random prompts (BOS + 12 token ids) llama.cpp continues for N tokens, sampled
at temperature 1 with a fixed seed and no truncation (greedy decoding of a random model falls
into repeating one token; sampling keeps the contexts varied), and reports at every generated
position its top-K raw log-probabilities (`n_probs`, `post_sampling_probs: false`: the
model's own distribution, whatever the sampler drew). That is teacher forcing on llama.cpp's
own tokens: `crates/engine/tests/parity.rs` feeds the
same ids to our engine and judges its distributions against these.

    python3 scripts/gen-parity-goldens.py --name NAME --fingerprint F --url URL --out FILE

Run through `scripts/gen-parity-goldens.sh`, which builds both sides and loops over models.
"""
import argparse
import json
import random
import urllib.request

PROMPTS = 8
N = 128
K = 10


def post(url, body):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--fingerprint", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--llama-cpp", default="", help="the llama.cpp version, recorded")
    ap.add_argument("--n-vocab", type=int, default=512)
    args = ap.parse_args()
    rng = random.Random(f"parity-{args.name}")
    seqs = []
    for _ in range(PROMPTS):
        prompt = [2] + [rng.randrange(4, args.n_vocab) for _ in range(12)]
        r = post(
            f"{args.url}/completion",
            {
                "prompt": prompt,
                "n_predict": N,
                "temperature": 1.0,
                "top_k": 0,
                "top_p": 1.0,
                "min_p": 0.0,
                "seed": 1000 + len(seqs),
                "n_probs": K,
                "post_sampling_probs": False,
                "ignore_eos": True,
                "cache_prompt": False,
            },
        )
        probs = r["completion_probabilities"]
        got = [p["id"] for p in probs]
        assert len(probs) == N, (len(probs), r.get("stop_type"), r.get("tokens_predicted"), got[-5:])
        seqs.append(
            {
                "prompt": prompt,
                "tokens": [p["id"] for p in probs],
                "top": [[[t["id"], round(t["logprob"], 5)] for t in p["top_logprobs"]] for p in probs],
            }
        )
    golden = {
        "model": args.name,
        "fingerprint": args.fingerprint,
        "llama_cpp": args.llama_cpp,
        "how": "llama-server /completion, temperature 1 seeded, n_probs %d, post_sampling_probs false, "
        "ignore_eos, prompt as token ids, -t 2 -c 2048" % K,
        "sequences": seqs,
    }
    with open(args.out, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    sharp = sum(
        1 for s in seqs for t in s["top"] if len(t) > 1 and t[0][1] - t[1][1] >= 0.6
    )
    print(f"{args.name}: {PROMPTS * N} positions, {sharp} with a top-1/top-2 gap >= 0.6")


if __name__ == "__main__":
    main()
