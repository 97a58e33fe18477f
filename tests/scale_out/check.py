"""Two ferrox replicas behind the SGLang Model Gateway (`smg`, cache-aware policy): run by
scripts/scale-out.sh, which starts them and passes the URLs.

Checks, through the gateway's OpenAI routes:
1. concurrent conversations (each its own long system prompt, three turns) all succeed;
2. each conversation stays on the replica that holds its prefix: the replica whose prefix
   cache was queried by turn 1 is the one whose prefix cache hits grow on turns 2 and 3
   (read from each replica's /metrics, one conversation at a time so the deltas are its own);
3. a replica killed while it decodes costs only the requests in flight at that moment: every
   request started after the kill succeeds, on the survivor.

The replicas require an API key (as the manifests make them), which clients send to the
gateway and the gateway passes on.

Exits non-zero on the first failure. Standard library only.
"""

import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

GATEWAY = os.environ["GATEWAY_URL"]
REPLICAS = os.environ["REPLICA_URLS"].split()
KILL_PID = int(os.environ["KILL_PID"])  # the second replica's pid
# The replicas require this key, as the Kubernetes manifests make them; the gateway must
# pass it on. Their /metrics is public (--metrics-public), as for a scraper.
API_KEY = os.environ["API_KEY"]

WORDS = ("river stone lantern orchard copper meadow signal harbor violet ember canyon thistle "
         "marble falcon willow quartz").split()


def post(path, body, timeout=300):
    req = urllib.request.Request(GATEWAY + path, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json",
                                          "authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metric(base, name):
    """The sum of a series over its labels (one per loaded model)."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        values = [float(line.split()[-1]) for line in r.read().decode().splitlines()
                  if line.startswith(name + " ") or line.startswith(name + "{")]
        if values:
            return sum(values)
    raise AssertionError(f"{base}: no {name}")


def system_prompt(i):
    # ~600 tokens, different for every conversation from its first word.
    words = [WORDS[(i * 7 + k * (i + 3)) % len(WORDS)] for k in range(400)]
    return f"Conversation {i}. Remember these words: " + " ".join(words)


def turn(messages):
    r = post("/v1/chat/completions", {"model": "default", "messages": messages,
                                      "max_tokens": 6, "temperature": 0})
    answer = r["choices"][0]["message"]["content"]
    messages.append({"role": "assistant", "content": answer})
    return r


def conversation(i, turns=3, after_each=None):
    messages = [{"role": "system", "content": system_prompt(i)}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"Question {t}: which word comes first?"})
        turn(messages)
        if after_each:
            after_each(t)


def check_concurrent():
    errors = []

    def run(i):
        try:
            conversation(100 + i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"conversation {i}: {e!r}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    print("ok: 6 concurrent conversations of 3 turns each succeeded")


def check_affinity():
    for i in range(4):
        snapshots = []

        def snap(_turn=None):
            snapshots.append([(metric(b, "ferrox_prefix_cache_queries_total"),
                               metric(b, "ferrox_prefix_cache_hits_total")) for b in REPLICAS])

        snap()
        conversation(i, after_each=snap)
        queried = [r for r in range(len(REPLICAS)) if snapshots[1][r][0] > snapshots[0][r][0]]
        assert len(queried) == 1, f"conversation {i}: turn 1 queried replicas {queried}"
        home = queried[0]
        for t in (2, 3):
            grew = [r for r in range(len(REPLICAS))
                    if snapshots[t][r][1] - snapshots[t - 1][r][1] >= 300]
            assert grew == [home], (
                f"conversation {i} turn {t}: prefix hits grew on {grew}, its prefix is on {home}")
    print("ok: 4 conversations each stayed on the replica holding their prefix")


def check_failover():
    """Kills the second replica while it is decoding, then checks what DEPLOY.md promises:
    only requests in flight at the kill may fail; every request started after it succeeds."""
    results = []  # (started, ended, error or None) per request

    def run(i):
        messages = [{"role": "system", "content": system_prompt(200 + i)}]
        for t in range(3):
            messages.append({"role": "user", "content": f"Question {t}: which word comes first?"})
            started = time.time()
            try:
                turn(messages)
                results.append((started, time.time(), None))
            except Exception as e:  # noqa: BLE001 - judged below
                results.append((started, time.time(), repr(e)))
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    # Kill only once the replica has work in flight, so the kill costs something.
    deadline = time.time() + 120
    while metric(REPLICAS[1], "ferrox_sequences_running") < 1:
        assert time.time() < deadline, "the second replica never got a request"
        time.sleep(0.05)
    killed_at = time.time()
    os.kill(KILL_PID, signal.SIGKILL)
    for t in threads:
        t.join()
    in_flight = [r for r in results if r[0] <= killed_at <= r[1]]
    failed = [r for r in results if r[2] is not None]
    late = [r[2] for r in failed if r[0] > killed_at]
    assert not late, f"requests started after the kill failed: {late}"
    assert len(failed) <= len(in_flight), (failed, len(in_flight))
    # Afterwards the gateway keeps serving: every new request succeeds (on the survivor).
    for i in range(6):
        conversation(300 + i, turns=1)
    print(f"ok: killed a replica with work in flight; {len(failed)} of {len(in_flight)} "
          f"requests in flight failed, none of {sum(r[0] > killed_at for r in results)} "
          "started after the kill, then 6 of 6 new conversations succeeded")


def main():
    check_concurrent()
    check_affinity()
    check_failover()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}")
        sys.exit(1)
