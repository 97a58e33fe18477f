"""/metrics as a Prometheus server reads it: the whole page parsed by `prometheus_client`'s
own text parser (not our strings), with two models loaded. Run by scripts/client-tests.sh,
which serves the default model twice: under its file's name and as `second`.

Checks: every family parses, with a type and help; each model has its own series in the
scheduler's families and in vLLM's names gateways read; histograms are whole (buckets rising
to `+Inf` == `_count`); the request counter counts what was just sent.
"""

import os
import sys
import urllib.request

import openai
from prometheus_client.parser import text_string_to_metric_families

BASE_URL = os.environ.get("FERROX_URL", "http://127.0.0.1:8080/v1")
ROOT = BASE_URL.removesuffix("/v1")
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)


def scrape():
    with urllib.request.urlopen(ROOT + "/metrics", timeout=30) as r:
        assert r.headers["content-type"].startswith("text/plain"), r.headers["content-type"]
        return {f.name: f for f in text_string_to_metric_families(r.read().decode())}


def samples(families, name, **labels):
    return [s for f in families.values() for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def test_metrics_parse_with_two_models_loaded():
    ids = [m.id for m in client.models.list().data]
    assert "second" in ids and len(ids) == 2, ids
    for model in ids:
        r = client.completions.create(model=model, prompt="Hello", max_tokens=3, temperature=0)
        assert r.usage.completion_tokens == 3
    families = scrape()
    for f in families.values():
        assert f.type in ("counter", "gauge", "histogram", "info", "unknown"), (f.name, f.type)
        assert f.documentation, f"{f.name} has no HELP"
    for model in ids:
        for name in ("ferrox_kv_blocks_total", "ferrox_sequences_running",
                     "ferrox_tokens_decoded_total"):
            assert len(samples(families, name, model=model)) == 1, (name, model)
        for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
            assert len(samples(families, name, model_name=model)) == 1, (name, model)
        decoded = samples(families, "ferrox_tokens_decoded_total", model=model)[0].value
        assert decoded >= 2, (model, decoded)
    # Histograms are whole: cumulative buckets ending at +Inf, which equals the count.
    hist = families["ferrox_time_to_first_token_seconds"]
    assert hist.type == "histogram"
    buckets = [s for s in hist.samples if s.name.endswith("_bucket")]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf", buckets
    count = [s for s in hist.samples if s.name.endswith("_count")][0].value
    assert buckets[-1].value == count and count >= 2, (buckets[-1], count)
    # The completions just sent are counted under their route and status.
    ok = samples(families, "ferrox_requests_total", route="/v1/completions", status="200")
    assert ok and ok[0].value >= 2, ok


if __name__ == "__main__":
    from runner import run

    sys.exit(run(globals()))
