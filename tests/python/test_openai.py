"""The official `openai` Python SDK against a running `ferrox serve` (the default model).

Run by scripts/client-tests.sh, which starts the server and sets FERROX_URL (the base URL
including /v1). Works under pytest or as a plain script (`python3 test_openai.py`), which
prints "N passed, N failed" and exits non-zero on a failure.

The default model (Gemma 3 270M, a base model) is tiny and not instruction-tuned, so the
tests check the protocol (shapes, usage, stop, seeds, n, logprobs, errors), never the
quality of an answer.
"""

import os
import sys

import openai

BASE_URL = os.environ.get("FERROX_URL", "http://127.0.0.1:8080/v1")
# No retries: a 503 or a 400 must reach the test as it is.
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)


def served_model():
    return client.models.list().data[0].id


MODEL = None


def model():
    global MODEL
    if MODEL is None:
        MODEL = served_model()
    return MODEL


def chat(**kw):
    args = dict(
        model=model(),
        messages=[{"role": "user", "content": "What is 2 + 2?"}],
        max_tokens=8,
        temperature=0,
    )
    args.update(kw)
    return client.chat.completions.create(**args)


def complete(**kw):
    args = dict(model=model(), prompt="The capital of France is", max_tokens=8, temperature=0)
    args.update(kw)
    return client.completions.create(**args)


def expect_error(cls, fn, code=None, param=None):
    try:
        fn()
    except cls as e:
        if code is not None:
            assert e.code == code, (e.code, e.body)
        if param is not None:
            assert e.param == param, (e.param, e.body)
        return e
    raise AssertionError(f"expected {cls.__name__}")


def test_models_lists_the_served_models():
    # client-tests.sh serves the default model, then the same file as `second`.
    models = client.models.list().data
    assert [m.id for m in models][1:] == ["second"], models
    assert all(m.object == "model" for m in models)
    assert client.models.retrieve(model()).id == model()


def test_chat_completion_has_message_and_usage():
    r = chat()
    assert r.object == "chat.completion"
    assert r.model == model()
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8
    assert r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_has_text_and_usage():
    r = complete(extra_body={"ignore_eos": True})
    assert r.object == "text_completion"
    assert r.choices[0].text
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8


def test_chat_streaming_with_usage():
    whole = chat(max_tokens=10)
    chunks = list(chat(max_tokens=10, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_completion_streaming_with_usage():
    whole = complete()
    chunks = list(complete(stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_stop_string_ends_the_text():
    full = complete(max_tokens=16).choices[0].text
    words = full.split()
    assert len(words) >= 3, full
    stop = " " + words[2]
    r = complete(max_tokens=16, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == full[: full.index(stop)]
    assert stop not in r.choices[0].text


def test_seed_reproduces_sampling():
    def sampled(seed):
        r = complete(temperature=1.5, seed=seed, max_tokens=12, extra_body={"ignore_eos": True})
        return r.choices[0].text

    a, b = sampled(1234), sampled(1234)
    assert a == b
    # And the seed is really sampling: other seeds give other texts (were temperature or seed
    # ignored, all of them would be the same).
    others = {sampled(seed) for seed in range(1, 5)}
    assert len(others | {a}) > 1, others


def test_n_gives_several_choices():
    r = chat(n=3, temperature=1.0, seed=7, max_tokens=6)
    assert [c.index for c in r.choices] == [0, 1, 2]
    # Each choice has its own seed (seed + index): sampled texts differ.
    assert len({c.message.content for c in r.choices}) > 1
    assert r.usage.completion_tokens <= 18  # the sum over the choices
    r = complete(n=2, temperature=1.0, seed=7, max_tokens=6, extra_body={"ignore_eos": True})
    assert len(r.choices) == 2
    assert r.usage.completion_tokens == 12


def test_chat_logprobs():
    r = chat(logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) >= 1
    for entry in content:
        assert entry.logprob <= 0.0
        assert len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely.
        assert abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-5
        assert isinstance(entry.bytes, list)


def test_embeddings_are_unit_vectors_and_a_batch_equals_each_input_alone():
    texts = ["The capital of France is", "Paris"]
    r = client.embeddings.create(model=model(), input=texts, encoding_format="float")
    assert [d.index for d in r.data] == [0, 1]
    for d in r.data:
        assert abs(sum(x * x for x in d.embedding) - 1) < 1e-4
    assert r.data[0].embedding != r.data[1].embedding
    alone = client.embeddings.create(model=model(), input=texts[1], encoding_format="float")
    assert alone.data[0].embedding == r.data[1].embedding
    assert r.usage.prompt_tokens == r.usage.total_tokens > alone.usage.prompt_tokens > 0
    # The SDK's default asks for base64 and decodes it: the same vector, to f32 precision.
    b64 = client.embeddings.create(model=model(), input=texts[1])
    assert len(b64.data[0].embedding) == len(alone.data[0].embedding)
    assert all(abs(a - b) < 1e-6 for a, b in zip(b64.data[0].embedding, alone.data[0].embedding))
    expect_error(openai.BadRequestError,
                 lambda: client.embeddings.create(model=model(), input="x", dimensions=8),
                 param="dimensions")


def test_completion_logprobs():
    # ignore_eos: every generated token is a text token with its logprobs.
    r = complete(logprobs=2, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert len(lp.tokens) == r.usage.completion_tokens == 8
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 2, top
        # Greedy: the chosen token is the most likely of its top two.
        assert abs(top[token] - logprob) < 1e-5 and logprob >= min(top.values()), (token, top)
    assert lp.text_offset[0] == 0


def test_unsupported_parameter_is_400_naming_it():
    functions = [{"name": "f", "parameters": {"type": "object"}}]
    expect_error(
        openai.BadRequestError, lambda: chat(functions=functions), "unsupported_parameter", "functions"
    )
    expect_error(
        openai.BadRequestError,
        lambda: chat(extra_body={"frobnicate": 1}),
        "unknown_parameter",
        "frobnicate",
    )


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city", "unit"],
        },
    },
}


def test_a_required_tool_call_has_valid_arguments_streamed_or_not():
    import json

    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = chat(messages=msgs, tools=[WEATHER], tool_choice="required", max_tokens=64)
    assert r.choices[0].finish_reason == "tool_calls", r
    call = r.choices[0].message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert set(args) == {"city", "unit"} and args["unit"] in ("c", "f"), args
    stream = chat(messages=msgs, tools=[WEATHER], tool_choice="required", max_tokens=64, stream=True)
    name, pieces, content, finish = None, [], "", None
    for chunk in stream:
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            name = name or (tc.function.name if tc.function else None)
            pieces.append((tc.function.arguments or "") if tc.function else "")
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == "" and name == "get_weather"
    assert "".join(pieces) == call.function.arguments
    # The call and its result as history: the next turn renders.
    history = msgs + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"},
    ]
    r = chat(messages=history, tools=[WEATHER], max_tokens=8)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_validation_errors_are_400():
    expect_error(openai.BadRequestError, lambda: chat(messages=[]), "invalid_value", "messages")
    expect_error(openai.BadRequestError, lambda: chat(max_tokens=10**13), "invalid_value", "max_tokens")
    expect_error(openai.BadRequestError, lambda: chat(temperature=-1), "invalid_value", "temperature")
    expect_error(openai.BadRequestError, lambda: chat(n=1000), "invalid_value", "n")
    e = expect_error(
        openai.BadRequestError, lambda: complete(max_tokens=10**6), "context_length_exceeded"
    )
    assert e.body["estimated_bytes"] > e.body["limit_bytes"]


def test_a_resent_conversation_reports_cached_tokens_and_the_same_answer():
    history = [
        {"role": "system", "content": "You answer briefly. " * 20},
        {"role": "user", "content": "Name a colour."},
    ]
    salt = os.urandom(8).hex()  # a tenant of its own: no earlier test's blocks
    first = chat(messages=history, max_tokens=6, extra_body={"cache_salt": salt})
    again = chat(messages=history, max_tokens=6, extra_body={"cache_salt": salt})
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    assert again.choices[0].message.content == first.choices[0].message.content
    other = chat(messages=history, max_tokens=6, extra_body={"cache_salt": salt + "x"})
    assert other.usage.prompt_tokens_details.cached_tokens == 0


def test_unknown_model_is_404():
    expect_error(openai.NotFoundError, lambda: chat(model="gpt-4o"), "model_not_found", "model")


def test_server_still_serves_after_errors():
    assert chat(max_tokens=2).choices[0].message.content is not None


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": ["ann", "bob", "cy"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def check_person(text):
    import json

    v = json.loads(text)
    assert set(v) == {"name", "age"}, v
    assert v["name"] in ("ann", "bob", "cy") and 0 <= v["age"] <= 120, v


def test_structured_output_validates_on_every_seed():
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for seed in range(6):
        r = chat(max_tokens=48, temperature=0.9, seed=seed, response_format=fmt)
        assert r.choices[0].finish_reason == "stop", r
        check_person(r.choices[0].message.content)
    r = client.responses.create(
        model=model(),
        input="A person as JSON.",
        max_output_tokens=48,
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON}},
    )
    assert r.status == "completed", r
    check_person(r.output_text)


def test_a_schema_that_cannot_be_enforced_is_400():
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}}
    e = expect_error(openai.BadRequestError, lambda: chat(response_format=bad), "invalid_value")
    assert e.param == "response_format", e.body


if __name__ == "__main__":
    from runner import run

    sys.exit(run(globals()))
