"""The official `anthropic` Python SDK against a running `ferrox serve` (the default model).

Run by scripts/client-tests.sh, which starts the server and sets FERROX_URL (the base URL
including /v1; the Anthropic SDK wants it without). Works under pytest or as a plain script.
The default model is a tiny base model: the tests check the protocol, never the answers.
"""

import json
import os
import sys
import urllib.request

import anthropic

BASE_URL = os.environ.get("FERROX_URL", "http://127.0.0.1:8080/v1").removesuffix("/v1")
client = anthropic.Anthropic(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)
MODEL = None


def model():
    global MODEL
    if MODEL is None:
        with urllib.request.urlopen(f"{BASE_URL}/v1/models") as r:
            MODEL = json.load(r)["data"][0]["id"]
    return MODEL


def ask(**kw):
    # The SDK no longer takes `temperature` as an argument; the API still does.
    args = dict(
        model=model(),
        max_tokens=8,
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "What is 2 + 2?"}],
    )
    args.update(kw)
    return client.messages.create(**args)


def test_basic_message_has_anthropics_shape():
    m = ask()
    assert m.id.startswith("msg_")
    assert m.type == "message" and m.role == "assistant"
    assert m.model == model()
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.output_tokens >= 1
    if m.stop_reason == "max_tokens":
        # Cut by the budget: every token counted, and some text to show for them.
        assert m.usage.output_tokens == 8  # ask()'s max_tokens
        assert m.content[0].type == "text" and m.content[0].text
    else:
        assert all(b.type == "text" for b in m.content)


def test_system_prompt_and_multi_turn():
    m = ask(
        system=[{"type": "text", "text": "Answer in one word."}],
        messages=[
            {"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": [{"type": "text", "text": "Blue."}]},
            {"role": "user", "content": "Another one?"},
        ],
    )
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens > 20


def test_streaming_events_in_order_and_equal_to_the_message():
    whole = ask(max_tokens=12)
    with client.messages.stream(
        model=model(),
        max_tokens=12,
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "What is 2 + 2?"}],
    ) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_message()
    assert types[0] == "message_start", types
    assert types[-1] == "message_stop", types
    assert "message_delta" in types
    text = "".join(b.text for b in final.content)
    assert text == "".join(b.text for b in whole.content)
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_stop_sequence_is_named():
    # Greedy: the first of these prompts whose answer is long enough to cut, every run.
    for prompt in ("Count: 1, 2, 3,", "Write a sentence about the sea.", "List three colours."):
        messages = [{"role": "user", "content": prompt}]
        whole = ask(max_tokens=24, messages=messages)
        text = "".join(b.text for b in whole.content)
        if len(text) >= 6:
            break
    else:
        raise AssertionError(f"no prompt gave an answer of 6 characters to cut: {text!r}")
    stop = text[3:5]
    m = ask(max_tokens=24, stop_sequences=[stop], messages=messages)
    assert m.stop_reason == "stop_sequence", m
    assert m.stop_sequence == stop
    assert "".join(b.text for b in m.content) == text[: text.find(stop)]


def test_count_tokens_equals_what_a_call_reports():
    messages = [{"role": "user", "content": "Tell me about the sea."}]
    counted = client.messages.count_tokens(
        model=model(), messages=messages, system="Be brief.", cache_control={"type": "ephemeral"}
    )
    m = ask(messages=messages, system="Be brief.")
    assert counted.input_tokens == m.usage.input_tokens + m.usage.cache_read_input_tokens


def test_errors_are_typed():
    try:
        ask(thinking={"type": "enabled", "budget_tokens": 1024})
        raise AssertionError("thinking was accepted")
    except anthropic.BadRequestError as e:
        assert e.body["error"]["type"] == "invalid_request_error"
        assert "thinking" in e.body["error"]["message"]
    try:
        ask(model="claude-opus-4-1")
        raise AssertionError("an unknown model was served")
    except anthropic.NotFoundError as e:
        assert e.body["error"]["type"] == "not_found_error"
    try:
        client.messages.create(model=model(), messages=[{"role": "user", "content": "x"}], max_tokens=0)
        raise AssertionError("max_tokens 0 was accepted")
    except anthropic.BadRequestError:
        pass


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city", "unit"],
    },
}


def test_a_forced_tool_use_streams_its_input():
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = ask(messages=msgs, tools=[WEATHER], tool_choice={"type": "any"}, max_tokens=64)
    assert m.stop_reason == "tool_use", m
    block = m.content[0]
    assert block.type == "tool_use" and block.name == "get_weather"
    assert set(block.input) == {"city", "unit"} and block.input["unit"] in ("c", "f")
    with client.messages.stream(
        model=model(), max_tokens=64, messages=msgs, tools=[WEATHER],
        tool_choice={"type": "any"}, extra_body={"temperature": 0},
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[0].input == block.input
    history = msgs + [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True)]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "18 C"}]},
    ]
    m = ask(messages=history, tools=[WEATHER], max_tokens=8)
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")


if __name__ == "__main__":
    from runner import run

    sys.exit(run(globals()))
