#!/usr/bin/env python3
"""Times /v1/embeddings on a running server (ferrox or llama-server --embeddings): one warm-up,
then ROUNDS rounds of CONCURRENCY requests at once (1 unless given), each of N inputs (~23
tokens each), and prints the median round's time, tok/s and inputs/s.

    python3 scripts/bench-embeddings.py http://127.0.0.1:8080 64 3
    python3 scripts/bench-embeddings.py http://127.0.0.1:8080 4 3 16   # 16 clients at once

docs/PERFORMANCE.md ("Embeddings") has the side-by-side numbers. Standard library only.
"""

import json
import statistics
from concurrent.futures import ThreadPoolExecutor
import sys
import time
import urllib.request


def main():
    base, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    clients = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    words = ("river stone lantern orchard copper meadow signal harbor violet ember canyon "
             "thistle").split()
    inputs = [" ".join(words[(i + k) % len(words)] for k in range(18)) + f" number {i}"
              for i in range(n * clients)]

    def post(body):
        req = urllib.request.Request(base + "/v1/embeddings", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    post({"input": inputs[:2]})
    times = []
    # Each client embeds its own inputs, so no two requests share a prompt.
    batches = [inputs[c * n:(c + 1) * n] for c in range(clients)]
    with ThreadPoolExecutor(clients) as pool:
        for _ in range(rounds):
            start = time.time()
            replies = list(pool.map(lambda b: post({"input": b}), batches))
            times.append(time.time() - start)
            assert all(len(r["data"]) == n for r in replies)
    tokens = sum(r["usage"]["prompt_tokens"] for r in replies)
    median = statistics.median(times)
    total = n * clients
    print(f"{clients} x {n} inputs, {tokens} tokens: median {median * 1000:.0f} ms, "
          f"{tokens / median:.0f} tok/s, {total / median:.1f} inputs/s")


if __name__ == "__main__":
    main()
