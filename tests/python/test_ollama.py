"""Ollama's API through the clients people use: the official `ollama` Python library (which
parses every reply with pydantic, so a wrong shape fails here) and LangChain's `ChatOllama`.
Run by scripts/client-tests.sh against `ferrox serve` with the default model (and the same
file as `second`).

The default model is a tiny base model: the tests check the protocol (shapes, streams equal
to buffered replies, counts, errors, tool-call arguments as objects, schemas that
validate), never the quality of an answer.
"""

import math
import os
import sys
from typing import Literal

import ollama
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_ollama import ChatOllama
from pydantic import BaseModel

ROOT = os.environ.get("FERROX_URL", "http://127.0.0.1:8080/v1").removesuffix("/v1")
client = ollama.Client(host=ROOT, timeout=120)


def model():
    return client.list().models[0].model


def ask(**kw):
    args = dict(
        model=model(),
        messages=[{"role": "user", "content": "What is 2 + 2?"}],
        options={"temperature": 0, "num_predict": 12},
    )
    args.update(kw)
    return args


def test_chat_streamed_equals_buffered_with_counts_and_durations():
    r = client.chat(**ask())
    assert r.done and r.done_reason in ("stop", "length"), r
    assert r.message.role == "assistant" and r.message.content
    assert r.eval_count <= 12 and r.prompt_eval_count > 0
    assert r.total_duration >= r.eval_duration > 0
    parts = list(client.chat(**ask(), stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert parts[-1].done_reason == r.done_reason
    assert parts[-1].eval_count == r.eval_count
    assert "".join(p.message.content or "" for p in parts) == r.message.content
    # Ollama's clients add the default tag; the reply echoes it.
    tagged = client.chat(**ask(model=model() + ":latest"))
    assert tagged.model == model() + ":latest"
    assert tagged.message.content == r.message.content


def test_generate_streamed_equals_buffered():
    args = dict(model=model(), prompt="The capital of France is",
                options={"temperature": 0, "num_predict": 10})
    r = client.generate(**args)
    assert r.done and r.response
    joined = "".join(p.response for p in client.generate(**args, stream=True))
    assert joined == r.response
    raw = client.generate(**args, raw=True)
    assert raw.response and raw.prompt_eval_count < r.prompt_eval_count


def test_list_show_ps_and_version():
    names = [m.model for m in client.list().models]
    assert "second" in names and len(names) == 2, names
    m = client.list().models[0]
    assert m.details.format == "gguf" and m.details.family == "gemma3"
    assert m.details.quantization_level == "Q4_K_M" and m.size > 0
    show = client.show(model())
    assert "completion" in show.capabilities and "tools" in show.capabilities
    assert show.modelinfo["general.architecture"] == "gemma3"
    assert isinstance(show.template, str)  # the GGUF's Jinja template; this one has none
    client.chat(**ask())
    running = [p.model for p in client.ps().models]
    assert model() in running, running
    version = client._client.get("/api/version").json()["version"]
    assert tuple(int(x) for x in version.split(".")) >= (0, 6, 4)


def test_embed_gives_unit_vectors():
    r = client.embed(model=model(), input=["a cat", "a dog"])
    assert len(r.embeddings) == 2
    for v in r.embeddings:
        assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-3
    old = client.embeddings(model=model(), prompt="a cat")
    assert old.embedding == pytest.approx(r.embeddings[0], abs=1e-6)


def test_errors_are_ollamas():
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(**ask(model="no-such-model"))
    assert e.value.status_code == 404 and "no-such-model" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(**ask(options={"mirostat": 2}))
    assert e.value.status_code == 400 and "options.mirostat" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(**ask(think=True))
    assert e.value.status_code == 400 and "thinking" in e.value.error


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
        },
    },
}


def test_tools_answer_text_or_calls_with_object_arguments_and_a_result_continues():
    msgs = [{"role": "user", "content": "What is the weather in Paris? Call get_weather."}]
    for seed in range(3):
        for stream in (False, True):
            opts = {"temperature": 1.0, "seed": seed, "num_predict": 40}
            if stream:
                parts = list(client.chat(model=model(), messages=msgs, tools=[WEATHER],
                                         options=opts, stream=True))
                calls = [c for p in parts for c in (p.message.tool_calls or [])]
            else:
                calls = client.chat(model=model(), messages=msgs, tools=[WEATHER],
                                    options=opts).message.tool_calls or []
            for c in calls:
                assert c.function.name == "get_weather"
                assert c.function.arguments["city"] in ("Paris", "Rome")
    history = msgs + [
        {"role": "assistant", "content": "",
         "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18 C and sunny", "tool_name": "get_weather"},
    ]
    r = client.chat(model=model(), messages=history, tools=[WEATHER],
                    options={"temperature": 0, "num_predict": 8})
    assert r.done


class Colour(BaseModel):
    colour: Literal["red", "green", "blue"]


def test_a_schema_format_validates():
    for seed in range(3):
        r = client.chat(**ask(format=Colour.model_json_schema(),
                              options={"temperature": 1.0, "seed": seed, "num_predict": 40}))
        assert r.done_reason == "stop", r
        Colour.model_validate_json(r.message.content)


def langchain(**kw):
    return ChatOllama(model=model(), base_url=ROOT, temperature=0, num_predict=12, **kw)


def test_langchain_invoke_and_stream():
    llm = langchain()
    answer = llm.invoke([HumanMessage("What is 2 + 2?")])
    streamed = "".join(c.content for c in llm.stream([HumanMessage("What is 2 + 2?")]))
    assert answer.content and streamed == answer.content
    assert answer.usage_metadata["output_tokens"] > 0


def test_langchain_tools_and_structured_output():
    llm = langchain(num_ctx=2048).bind_tools([WEATHER])
    messages = [HumanMessage("What is the weather in Rome? Call get_weather.")]
    reply = llm.invoke(messages)
    for call in reply.tool_calls:
        assert call["name"] == "get_weather" and call["args"]["city"] in ("Paris", "Rome")
    if reply.tool_calls:
        messages += [reply, ToolMessage("sunny", tool_call_id=reply.tool_calls[0]["id"])]
        assert llm.invoke(messages) is not None
    structured = ChatOllama(model=model(), base_url=ROOT, temperature=0, num_predict=40)
    picked = structured.with_structured_output(Colour).invoke("Pick a colour.")
    assert isinstance(picked, Colour)


if __name__ == "__main__":
    from runner import run

    sys.exit(run(globals()))
