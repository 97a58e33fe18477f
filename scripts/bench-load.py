#!/usr/bin/env python3
"""Time to a model's first token from cold, side by side (docs/PERFORMANCE.md, "Loading a
model"). Interleaved, ROUNDS times each, medians printed:

- ferrox, load on demand: one running `ferrox serve` with the model also registered under a
  second id; a streamed chat request for that id loads it (from the page cache) and answers;
  the model is unloaded again through /admin/models/unload before the next round;
- ferrox, start-up: `ferrox serve -m FILE` spawned, /health polled, then the same request;
  time from the spawn to the first token;
- llama-server, start-up: the same for `llama-server -m FILE`.

    python3 scripts/bench-load.py FERROX LLAMA_SERVER MODEL [ROUNDS] [THREADS]

Standard library only. LD_LIBRARY_PATH must let llama-server find its libraries.
"""

import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def first_token(base, model):
    """Seconds from now to the first streamed content token of a short chat."""
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4,
            "stream": True}
    if model:
        body["model"] = model
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    start = time.time()
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):
                    return time.time() - start
    raise RuntimeError("no token")


def wait_healthy(base, proc):
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.01)


def cold_start(cmd):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    start = time.time()
    proc = subprocess.Popen(cmd + ["--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_healthy(base, proc)
        first_token(base, None)
        return time.time() - start
    finally:
        proc.terminate()
        proc.wait()


def main():
    ferrox, llama, model = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    threads = sys.argv[5] if len(sys.argv) > 5 else "2"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([ferrox, "serve", "-m", model, "--alias", f"cold={model}",
                               "-t", threads, "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {"ferrox load on demand": [], "ferrox start-up": [], "llama-server start-up": []}
    try:
        wait_healthy(base, server)
        for _ in range(rounds):
            results["ferrox load on demand"].append(first_token(base, "cold"))
            post(base, "/admin/models/unload", {"model": "cold"})
            time.sleep(0.5)  # the unloaded model's threads end
            results["ferrox start-up"].append(cold_start([ferrox, "serve", "-m", model,
                                                          "-t", threads]))
            results["llama-server start-up"].append(cold_start([llama, "-m", model,
                                                                "-t", threads]))
    finally:
        server.terminate()
        server.wait()
    for name, times in results.items():
        print(f"{name:24} median {statistics.median(times) * 1000:6.0f} ms  "
              f"({', '.join(f'{t * 1000:.0f}' for t in times)})")


if __name__ == "__main__":
    main()
