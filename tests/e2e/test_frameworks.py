"""Each framework adapter in its framework's own agent loop, twice, against the project's
OpenAI-compatible test endpoint (``evomem.testing``), with the memory in the loop (a real Redis and
the embedded Qdrant): run 1 fails and proposes a lesson, consolidation learns it, run 2's request to
the model carries it, and run 2's harmful verdict on it is recorded as negative evidence. A run that
raises is reported as failed. Each test is skipped, with the reason, when its extra is missing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from evomem import AsyncMemory, Memory
from evomem.integrations.outcomes import Outcome
from evomem.testing.llm_server import LLMTestServer

NS = "fever"
TASK = "Verify: Mohra is a truck. Answer SUPPORTS or REFUTES."
LESSON = "Check which kind of entity a claim names before answering."
WRONG = "SUPPORTS"  # what the scripted agent answers; the claim is refuted


@pytest.fixture
def agent_llm() -> Iterator[LLMTestServer]:
    """The test endpoint answering every agent turn with the wrong label."""
    with LLMTestServer(reply=lambda _messages: WRONG) as server:
        yield server


def first_run(output: Any) -> Outcome:
    """The judge of run 1: wrong, with the lesson the agent's reviewer wrote down."""
    return Outcome("failed", feedback="wrong label: Mohra is a car", proposed_insight=LESSON)


def second_run(output: Any) -> Outcome:
    """The judge of run 2: wrong again, and the served lesson (number 1) misled it."""
    return Outcome("failed", feedback="the lesson did not help", verdicts={1: "harmful"})


def lesson_id(memory: Memory) -> str:
    found = [i.id for i in memory.insights(NS) if i.text == LESSON]
    assert found, "run 1's lesson was not learnt"
    return found[0]


def assert_learnt_and_blamed(memory: Memory, server: LLMTestServer, before_run_2: int) -> None:
    """Run 2's requests carried the lesson; its harmful verdict is negative evidence on it."""
    run_2 = server.calls[before_run_2:]
    assert run_2, "run 2 made no request to the model"
    assert any(LESSON in c.prompt for c in run_2), [c.prompt for c in run_2]
    assert not any(LESSON in c.prompt for c in server.calls[:before_run_2])
    memory.consolidate()
    view = memory.insight(lesson_id(memory), NS)
    assert view.negative, "the harmful verdict left no negative evidence"
    # a failed outcome alone is inferred evidence; the verdict is an edit decided by the feedback
    assert [(h.op, h.decided_by) for h in view.history if h.decided_by == "feedback"] == [
        ("ARCHIVE", "feedback")
    ]


def reported(memory: Memory, event_id: str) -> dict[str, Any]:
    """The task event as it is on the stream."""
    for _id, fields in memory.redis.xrange("em:events"):
        doc = json.loads(fields[b"event"])
        if doc["event_id"] == event_id:
            return dict(doc)
    raise AssertionError(f"event {event_id} is not on the stream")


# -- LangGraph ------------------------------------------------------------------------------------
def test_langgraph_graph_learns_from_run_1_and_blames_the_lesson_in_run_2(
    memory: Memory, agent_llm: LLMTestServer
) -> None:
    pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
    langchain_openai = pytest.importorskip("langchain_openai", reason="langchain-openai is not installed")
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime

    from evomem.integrations.langgraph import EvomemStore

    class State(TypedDict, total=False):
        task: str
        retrieval_id: str
        answer: str

    model = langchain_openai.ChatOpenAI(model="evomem-test", base_url=agent_llm.url, api_key="test")

    def answer(state: State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        items = runtime.store.search((NS,), query=state["task"])
        system = "\n\n".join(p for p in ("Answer the claim.", EvomemStore.render(items)) if p)
        reply = model.invoke([("system", system), ("user", state["task"])])
        update: dict[str, Any] = {"answer": str(reply.content)}
        if items:
            update["retrieval_id"] = items[0].value["retrieval_id"]
        return update

    store = EvomemStore(memory)
    builder = StateGraph(State)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    graph = builder.compile(store=store)

    state = store.invoke(graph, {"task": TASK}, judge=first_run)
    assert state["answer"] == WRONG
    memory.consolidate()
    lesson_id(memory)

    before = len(agent_llm.calls)
    store.invoke(graph, {"task": TASK}, judge=second_run)
    assert_learnt_and_blamed(memory, agent_llm, before)


def test_langgraph_outcome_node_and_a_graph_that_raises(memory: Memory, agent_llm: LLMTestServer) -> None:
    pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime

    from evomem.integrations.langgraph import EvomemStore

    class State(TypedDict, total=False):
        task: str
        retrieval_id: str

    memory.report(status="failed", namespace=NS, query=TASK, proposed_insight=LESSON)
    memory.consolidate()

    def recall(state: State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        items = runtime.store.search((NS,), query=state["task"])
        return {"retrieval_id": items[0].value["retrieval_id"]}

    store = EvomemStore(memory)
    builder = StateGraph(State)
    builder.add_node("recall", recall)
    builder.add_node("report", store.outcome_node(lambda _s: Outcome("failed", verdicts={1: "harmful"})))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "report")
    builder.add_edge("report", END)
    builder.compile(store=store).invoke({"task": TASK})
    memory.consolidate()
    view = memory.insight(lesson_id(memory), NS)
    assert view.negative and any(h.decided_by == "feedback" for h in view.history)

    def broken(state: State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        runtime.store.search((NS,), query=state["task"])
        raise RuntimeError("the tool is down")

    raising = StateGraph(State)
    raising.add_node("broken", broken)
    raising.add_edge(START, "broken")
    raising.add_edge("broken", END)
    length = memory.redis.xlen("em:events")
    with pytest.raises(RuntimeError, match="the tool is down"):
        store.invoke(raising.compile(store=store), {"task": TASK})
    last = memory.redis.xrevrange("em:events", count=1)[0][1]
    assert memory.redis.xlen("em:events") == length + 1
    doc = json.loads(last[b"event"])
    assert doc["status"] == "failed" and "the tool is down" in doc["feedback"]


# -- the OpenAI Agents SDK --------------------------------------------------------------------------
def _agents_model(server: LLMTestServer) -> Any:
    """A chat-completions model on the test endpoint. Its client's connections belong to the event
    loop that first used them: each test runs its runs in one loop (``asyncio.run`` once)."""
    agents = pytest.importorskip("agents", reason="the openai-agents extra is not installed")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)  # offline: no trace leaves the process
    client = AsyncOpenAI(base_url=server.url, api_key="test")
    return agents.OpenAIChatCompletionsModel(model="evomem-test", openai_client=client)


def test_openai_agents_runner_learns_from_run_1_and_blames_the_lesson_in_run_2(
    memory: Memory, agent_llm: LLMTestServer
) -> None:
    model = _agents_model(agent_llm)
    from agents import Agent

    from evomem.integrations.openai_agents import MemoryRunner

    agent = Agent(name="fact-checker", instructions="Answer the claim.", model=model)
    runner = MemoryRunner(memory, NS, judge=first_run)

    async def runs() -> int:
        result = await runner.run(agent, TASK)
        assert result.final_output == WRONG
        memory.consolidate()
        lesson_id(memory)
        before = len(agent_llm.calls)
        await runner.run(agent, TASK, judge=second_run)
        await model._client.close()
        return before

    assert_learnt_and_blamed(memory, agent_llm, asyncio.run(runs()))


def test_openai_agents_a_tripped_guardrail_is_a_failed_run(memory: Memory, agent_llm: LLMTestServer) -> None:
    model = _agents_model(agent_llm)
    from agents import Agent, GuardrailFunctionOutput, InputGuardrailTripwireTriggered, input_guardrail

    from evomem.integrations.openai_agents import MemoryRunner

    @input_guardrail
    async def no_trucks(ctx: Any, agent: Any, text: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered="truck" in str(text))

    agent = Agent(name="fact-checker", instructions="Answer.", model=model, input_guardrails=[no_trucks])
    runner = MemoryRunner(memory, NS)

    async def runs() -> None:
        with pytest.raises(InputGuardrailTripwireTriggered):
            await runner.run(agent, TASK)
        assert runner.last_event_id is not None
        doc = reported(memory, runner.last_event_id)
        assert doc["status"] == "failed"
        assert "guardrail 'no_trucks' tripped" in doc["feedback"]
        resolved = await runner.run(agent.clone(input_guardrails=[]), TASK)
        assert resolved.final_output == WRONG
        assert reported(memory, runner.last_event_id)["status"] == "resolved"  # no judge: resolved
        await model._client.close()

    asyncio.run(runs())


# -- pydantic-ai ----------------------------------------------------------------------------------
def _pydantic_agent(server: LLMTestServer, **kwargs: Any) -> tuple[Any, Any]:
    """An agent on the test endpoint, and its client (closed by the test in the loop that used it)."""
    pydantic_ai = pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=server.url, api_key="test")
    model = OpenAIChatModel("evomem-test", provider=OpenAIProvider(openai_client=client))
    return pydantic_ai.Agent(model, instructions="Answer the claim.", **kwargs), client


@pytest.mark.parametrize("sdk", ["Memory", "AsyncMemory"])
def test_pydantic_ai_runner_learns_from_run_1_and_blames_the_lesson_in_run_2(
    memory: Memory, agent_llm: LLMTestServer, sdk: str
) -> None:
    agent, client = _pydantic_agent(agent_llm)
    from evomem.integrations.pydantic_ai import MemoryRunner

    # the runner takes the async client too, and awaits it rather than using worker threads
    runner = MemoryRunner(memory if sdk == "Memory" else AsyncMemory(memory), NS, judge=first_run)

    async def runs() -> int:
        assert (await runner.run(agent, TASK)).output == WRONG
        memory.consolidate()
        lesson_id(memory)
        before = len(agent_llm.calls)
        await runner.run(agent, TASK, judge=second_run)
        await client.close()
        return before

    assert_learnt_and_blamed(memory, agent_llm, asyncio.run(runs()))


def test_pydantic_ai_a_run_out_of_output_retries_is_a_failed_run(
    memory: Memory, agent_llm: LLMTestServer
) -> None:
    agent, client = _pydantic_agent(agent_llm, retries=1)
    from pydantic_ai import ModelRetry, UnexpectedModelBehavior

    from evomem.integrations.pydantic_ai import MemoryRunner

    @agent.output_validator
    def refuted_only(output: str) -> str:
        if output != "REFUTES":
            raise ModelRetry("the claim is refuted")
        return output

    runner = MemoryRunner(memory, NS)

    async def run() -> None:
        try:
            with pytest.raises(UnexpectedModelBehavior):
                await runner.run(agent, TASK)
        finally:
            await client.close()

    asyncio.run(run())
    assert runner.last_event_id is not None
    doc = reported(memory, runner.last_event_id)
    assert doc["status"] == "failed" and "UnexpectedModelBehavior" in doc["feedback"]
