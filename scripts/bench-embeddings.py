#!/usr/bin/env python3
"""Times /v1/embeddings on a running server (ferrox or llama-server --embeddings): one warm-up,
then ROUNDS requests of N inputs (~23 tokens each), and prints the median time and tok/s.

    python3 scripts/bench-embeddings.py http://127.0.0.1:8080 64 3

docs/PERFORMANCE.md ("Embeddings") has the side-by-side numbers. Standard library only.
"""

import json
import statistics
import sys
import time
import urllib.request


def main():
    base, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    words = ("river stone lantern orchard copper meadow signal harbor violet ember canyon "
             "thistle").split()
    inputs = [" ".join(words[(i + k) % len(words)] for k in range(18)) + f" number {i}"
              for i in range(n)]

    def post(body):
        req = urllib.request.Request(base + "/v1/embeddings", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    post({"input": inputs[:2]})
    times = []
    for _ in range(rounds):
        start = time.time()
        reply = post({"input": inputs})
        times.append(time.time() - start)
        assert len(reply["data"]) == n
    tokens = reply["usage"]["prompt_tokens"]
    median = statistics.median(times)
    print(f"{n} inputs, {tokens} tokens: median {median * 1000:.0f} ms, "
          f"{tokens / median:.0f} tok/s, {n / median:.1f} inputs/s")


if __name__ == "__main__":
    main()
