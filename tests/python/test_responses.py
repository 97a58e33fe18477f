"""The official `openai` SDK's Responses API against a running `ferrox serve`.

Run by scripts/client-tests.sh (FERROX_URL is the base URL including /v1). Works under
pytest or as a plain script. Checks the protocol, never the quality of an answer.
"""

import os
import sys

import openai

BASE_URL = os.environ.get("FERROX_URL", "http://127.0.0.1:8080/v1")
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)
MODEL = None


def model():
    global MODEL
    if MODEL is None:
        MODEL = client.models.list().data[0].id
    return MODEL


def respond(**kw):
    args = dict(model=model(), input="Name a color.", max_output_tokens=8, temperature=0)
    args.update(kw)
    return client.responses.create(**args)


def test_string_and_item_inputs():
    a = respond()
    assert a.id.startswith("resp_")
    assert a.output[0].id.startswith("msg_")
    assert a.status in ("completed", "incomplete")
    if a.status == "incomplete":
        assert a.incomplete_details.reason == "max_output_tokens"
    b = respond(
        instructions="Be brief.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Name a color."}]}],
    )
    assert b.usage.input_tokens > a.usage.input_tokens
    assert b.usage.total_tokens == b.usage.input_tokens + b.usage.output_tokens


def test_streaming_events_and_ids():
    whole = respond(store=False)
    stream = respond(stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[1] == "response.in_progress", kinds
    assert kinds[-1] in ("response.completed", "response.incomplete"), kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.id == events[0].response.id
    item = next(e.item for e in events if e.type == "response.output_item.added")
    assert final.output[0].id == item.id
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == whole.output_text


def test_store_and_previous_response_id():
    first = respond()
    got = client.responses.retrieve(first.id)
    assert got.id == first.id and got.output_text == first.output_text
    second = respond(previous_response_id=first.id, input="Another one?")
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens - 1
    assert second.usage.input_tokens_details.cached_tokens > 0
    client.responses.delete(first.id)
    try:
        client.responses.retrieve(first.id)
        raise AssertionError("a deleted response was returned")
    except openai.NotFoundError:
        pass


def test_unknown_previous_response_id_is_404():
    try:
        respond(previous_response_id="resp_doesnotexist")
        raise AssertionError("an unknown previous_response_id was ignored")
    except openai.NotFoundError as e:
        assert e.code == "not_found", e.body


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
    },
}


def test_a_required_function_call_and_its_output():
    import json

    r = respond(input="Weather in Paris?", tools=[WEATHER], tool_choice="required", max_output_tokens=48)
    call = r.output[0]
    assert call.type == "function_call" and call.name == "get_weather", r
    assert "city" in json.loads(call.arguments)  # other keys are allowed by this schema
    events = list(respond(input="Weather in Paris?", tools=[WEATHER], tool_choice="required",
                          max_output_tokens=48, stream=True))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert args == events[-1].response.output[0].arguments
    follow = respond(
        previous_response_id=r.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=8,
    )
    assert follow.output[0].type == "message"


if __name__ == "__main__":
    from runner import run

    sys.exit(run(globals()))
