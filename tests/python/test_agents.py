"""What agent frameworks and client libraries send, through the libraries themselves:
LangChain (ChatOpenAI, ChatAnthropic, OpenAIEmbeddings, messages with names as LangGraph
writes them), LangGraph's prebuilt agent, LiteLLM, Instructor, the OpenAI Agents SDK, pydantic-ai and the `llm` CLI,
against `ferrox serve` with the default model (run by scripts/client-tests.sh).

The default model is a tiny base model that decides badly: where a library runs an agent
loop, a run may end in a tool call every turn (the library's turn limit) — the tests then
check every request the loop made was served, never that the model chose well. Whatever it
chooses, a tool call's arguments and a structured answer validate: the grammar sees to it.
"""

import json
import os
import subprocess
import sys
import tempfile
from typing import Literal

import pytest
from pydantic import BaseModel

BASE_URL = os.environ.get("FERROX_URL", "http://127.0.0.1:8080/v1")
ROOT = BASE_URL.removesuffix("/v1")


def model():
    import urllib.request

    with urllib.request.urlopen(f"{BASE_URL}/models") as r:
        return json.load(r)["data"][0]["id"]


class Colour(BaseModel):
    colour: Literal["red", "green", "blue"]


class Weather(BaseModel):
    city: Literal["Paris", "Rome"]
    days: int


def get_weather(city: Literal["Paris", "Rome"], days: int) -> str:
    """The weather in a city for some days."""
    return f"sunny in {city} for {days} days"


# --- LangChain -------------------------------------------------------------------------


def chat_openai(**kw):
    from langchain_openai import ChatOpenAI

    kw.setdefault("max_tokens", 40)
    return ChatOpenAI(model=model(), base_url=BASE_URL, api_key="unused", temperature=0,
                      max_retries=0, **kw)


def test_langchain_openai_invoke_stream_names_and_embeddings():
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_openai import OpenAIEmbeddings

    llm = chat_openai()
    # LangGraph's agents name their messages.
    history = [HumanMessage("Hi", name="user_1"), AIMessage("Hello.", name="agent"),
               HumanMessage("What is 2 + 2?")]
    answer = llm.invoke(history)
    streamed = "".join(c.content for c in llm.stream(history))
    assert answer.content and streamed == answer.content
    emb = OpenAIEmbeddings(model=model(), base_url=BASE_URL, api_key="unused",
                           check_embedding_ctx_length=False)
    vectors = emb.embed_documents(["a cat", "a dog"])
    assert len(vectors) == 2 and len(vectors[0]) > 0


def test_langchain_openai_forced_tool_call_and_its_result():
    from langchain_core.messages import HumanMessage, ToolMessage

    llm = chat_openai().bind_tools([get_weather], tool_choice="get_weather")
    messages = [HumanMessage("Weather in Rome for 3 days?")]
    reply = llm.invoke(messages)
    call = reply.tool_calls[0]
    Weather.model_validate(call["args"])
    messages += [reply, ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"])]
    assert chat_openai().bind_tools([get_weather]).invoke(messages) is not None


def test_langchain_structured_output_with_and_without_tools():
    picked = chat_openai().with_structured_output(Colour, method="json_schema").invoke(
        "Pick a colour.")
    assert isinstance(picked, Colour)
    # Tools and the typed answer together: either a call or the schema's JSON.
    llm = chat_openai(max_tokens=160, model_kwargs={"response_format": {
        "type": "json_schema",
        "json_schema": {"name": "Colour", "schema": Colour.model_json_schema()}}})
    reply = llm.bind_tools([get_weather], strict=True).invoke(
        "Pick a colour, or look up the weather.")
    if reply.tool_calls:
        Weather.model_validate(reply.tool_calls[0]["args"])
    else:
        Colour.model_validate_json(reply.content)


def test_langgraph_react_agent_with_a_name_and_a_typed_answer():
    from langgraph.errors import GraphRecursionError
    from langgraph.prebuilt import create_react_agent

    # A named agent (its messages carry `name`) with a typed final answer.
    agent = create_react_agent(chat_openai(max_tokens=60), tools=[get_weather],
                               response_format=Colour, name="colour_agent")
    try:
        state = agent.invoke({"messages": [("user", "Pick a colour.")]},
                             {"recursion_limit": 6})
        assert isinstance(state["structured_response"], Colour)
    except GraphRecursionError:
        pass  # the tiny model called the tool every step: each call was served and valid


def test_langchain_anthropic_structured_output_and_forced_tool():
    from langchain_anthropic import ChatAnthropic

    llm = ChatAnthropic(model=model(), base_url=ROOT, api_key="unused", temperature=0,
                        max_tokens=60, max_retries=0)
    picked = llm.with_structured_output(Colour, method="json_schema").invoke("Pick a colour.")
    assert isinstance(picked, Colour)
    reply = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    Weather.model_validate(reply.tool_calls[0]["args"])


# --- LiteLLM ---------------------------------------------------------------------------


def test_litellm_openai_and_anthropic_routes_with_a_forced_tool():
    import litellm

    tool = {"type": "function", "function": {
        "name": "get_weather", "parameters": Weather.model_json_schema()}}
    for prefix, base in (("openai", BASE_URL), ("anthropic", ROOT)):
        kw = dict(model=f"{prefix}/{model()}", api_base=base, api_key="unused",
                  temperature=0, max_tokens=60)
        r = litellm.completion(messages=[{"role": "user", "content": "Hi"}], **kw)
        assert r.choices[0].message.content
        chunks = litellm.completion(messages=[{"role": "user", "content": "Hi"}], stream=True, **kw)
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == r.choices[0].message.content
        r = litellm.completion(
            messages=[{"role": "user", "content": "Weather in Rome for 2 days?"}],
            tools=[tool], tool_choice={"type": "function", "function": {"name": "get_weather"}},
            **kw)
        call = r.choices[0].message.tool_calls[0]
        Weather.model_validate_json(call.function.arguments)


# --- Instructor ------------------------------------------------------------------------


def test_instructor_json_schema_and_tools_modes():
    import instructor
    from openai import OpenAI

    raw = OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0)
    for mode in (instructor.Mode.JSON_SCHEMA, instructor.Mode.TOOLS):
        client = instructor.from_openai(raw, mode=mode)
        picked = client.chat.completions.create(
            model=model(), response_model=Colour, max_retries=0, temperature=0, max_tokens=60,
            messages=[{"role": "user", "content": "Pick a colour."}])
        assert isinstance(picked, Colour), mode


# --- OpenAI Agents SDK -----------------------------------------------------------------


def test_openai_agents_sdk_tools_with_a_typed_final_output():
    from agents import (Agent, MaxTurnsExceeded, ModelSettings, OpenAIChatCompletionsModel,
                        Runner, function_tool, set_tracing_disabled)
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=BASE_URL, api_key="unused", max_retries=0)
    agent = Agent(
        name="assistant",
        instructions="Answer with a colour.",
        model=OpenAIChatCompletionsModel(model=model(), openai_client=client),
        model_settings=ModelSettings(temperature=0, max_tokens=60),
        tools=[function_tool(get_weather)],
        output_type=Colour,
    )
    try:
        result = Runner.run_sync(agent, "Pick a colour.", max_turns=3)
        assert isinstance(result.final_output, Colour)
    except MaxTurnsExceeded:
        pass  # the tiny model called the tool every turn: each call was served and valid
    # The tools offered but not callable this turn: the typed answer must come.
    settled = agent.clone(model_settings=ModelSettings(temperature=0, max_tokens=60,
                                                       tool_choice="none"))
    result = Runner.run_sync(settled, "Pick a colour.", max_turns=2)
    assert isinstance(result.final_output, Colour)


# --- pydantic-ai -----------------------------------------------------------------------


def test_pydantic_ai_native_output_with_a_tool():
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.usage import UsageLimits

    chat = OpenAIChatModel(model(), provider=OpenAIProvider(base_url=BASE_URL, api_key="unused"))
    agent = Agent(chat, output_type=NativeOutput(Colour), tools=[get_weather],
                  model_settings=ModelSettings(temperature=0, max_tokens=60))
    try:
        result = agent.run_sync("Pick a colour.", usage_limits=UsageLimits(request_limit=3))
        assert isinstance(result.output, Colour)
    except UsageLimitExceeded:
        pass  # called the tool every request: each was served and valid
    # Without the tool the typed answer must come.
    plain = Agent(chat, output_type=NativeOutput(Colour),
                  model_settings=ModelSettings(temperature=0, max_tokens=60))
    assert isinstance(plain.run_sync("Pick a colour.").output, Colour)


# --- llm -------------------------------------------------------------------------------


def test_llm_cli_prompt_and_schema():
    with tempfile.TemporaryDirectory() as home:
        with open(os.path.join(home, "extra-openai-models.yaml"), "w") as f:
            f.write(f"- model_id: ferrox\n  model_name: {model()}\n  api_base: {BASE_URL}\n"
                    "  supports_schema: true\n")
        env = dict(os.environ, LLM_USER_PATH=home, OPENAI_API_KEY="unused")

        def llm(*args):
            r = subprocess.run([sys.executable, "-m", "llm", "-m", "ferrox", "-o",
                                "max_tokens", "40", *args],
                               env=env, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            return r.stdout

        assert llm("Say hi").strip()
        # A bounded answer: an open string could run past the budget and be cut.
        schema = json.dumps(Colour.model_json_schema())
        picked = json.loads(llm("--schema", schema, "Pick a colour."))
        Colour.model_validate(picked)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
