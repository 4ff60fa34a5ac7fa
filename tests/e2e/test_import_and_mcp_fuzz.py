"""Generated hostile input through two more doors: export records mutated field by field and
imported (confined to the attacker's namespace), and the MCP tools called with arbitrary arguments
through the SDK's in-process client. Whatever comes in: an import is written whole or refused as one
line naming its line, the projector keeps following, a full export still reads, the victim's memory
is what it was, and every MCP call is answered (a result or a tool error), never a crash."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from evomem import InvalidEventError, Memory, Settings
from evomem.adapters.redis.importer import import_jsonl
from evomem.mcp.mcp_server import LocalToolBackend, build
from evomem.pipeline.export import export, write_jsonl
from evomem.service.auth import OPEN
from tests.e2e.test_properties import _nested

FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
_value = st.one_of(
    _nested,
    st.integers(min_value=-(2**90), max_value=2**90),
    st.sampled_from([2**80, -1, 0, 1.5, "1e24", float("inf"), [], {}, "evil", "victim"]),
)


@pytest.fixture
def arena(memory: Memory) -> Iterator[tuple[Memory, list[dict[str, Any]], str]]:
    for ns in ("victim", "evil"):
        memory.report(
            None,
            namespace=ns,
            query=f"Verify claim about {ns}",
            status="resolved",
            proposed_insight=f"{ns} lesson.",
        )
    memory.consolidate()
    buf = io.StringIO()
    write_jsonl(export(memory.graph, ["evil"]), buf)
    records = [json.loads(line) for line in buf.getvalue().splitlines()]
    victim = json.dumps(list(export(memory.graph, ["victim"])), sort_keys=True, default=str)
    yield memory, records, victim


@FUZZ
@given(data=st.data())
def test_mutated_import_records_are_written_whole_or_refused_in_one_line(
    arena: tuple[Memory, list[dict[str, Any]], str], data: st.DataObject
) -> None:
    memory, records, victim = arena
    rows = [dict(r) for r in records]
    n = data.draw(st.integers(min_value=1, max_value=len(rows) - 1))  # not the header
    row = rows[n]
    field = data.draw(st.sampled_from(sorted(row)))
    row[field] = data.draw(_value)
    if data.draw(st.booleans()):
        row["version"] = data.draw(_value)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    try:
        import_jsonl(memory.redis, io.StringIO(text), namespaces={"evil"})
    except InvalidEventError as exc:
        assert exc.field == f"line {n + 1}" and "\n" not in str(exc)
    assert memory.runtime.projector is not None
    memory.runtime.projector.run_once()
    list(export(memory.graph, sorted(memory.graph.namespaces())))  # a full export still reads
    assert json.dumps(list(export(memory.graph, ["victim"])), sort_keys=True, default=str) == victim
    assert [i.text for i in memory.retrieve("Verify claim about victim", "victim").insights] == [
        "victim lesson."
    ]


_TOOLS = {
    "retrieve_insights": {"query": _value, "namespace": _value, "budget": _value},
    "report_outcome": {
        "status": st.one_of(st.sampled_from(["resolved", "failed"]), _value),
        "retrieval_id": _value,
        "query": _value,
        "namespace": _value,
        "verdicts": st.one_of(
            _value,
            st.lists(
                st.fixed_dictionaries(
                    {
                        "insight_id": _value,
                        "verdict": st.one_of(st.sampled_from(["helpful", "partial"]), _value),
                    },
                    optional={"revised_text": _value},
                ),
                max_size=3,
            ),
        ),
        "proposed_insight": _value,
        "trajectory": _value,
    },
    "inspect_insight": {"insight_id": _value},
}


@FUZZ
@given(data=st.data())
def test_the_mcp_tools_answer_any_arguments(
    settings: Settings, redis_client: redis.Redis, data: st.DataObject
) -> None:
    calls = []
    for _ in range(3):
        tool = data.draw(st.sampled_from(sorted(_TOOLS)))
        args = {k: data.draw(v) for k, v in _TOOLS[tool].items() if data.draw(st.booleans())}
        calls.append((tool, args))
    backend = LocalToolBackend(Memory.open_local(settings), "victim", consolidate=False)

    async def run() -> None:
        async with Client(build(backend, OPEN)) as client:
            for tool, args in calls:
                result = await client.call_tool(tool, args)
                assert result.content, (tool, args)
                if result.is_error:
                    text = result.content[0].text  # type: ignore[union-attr]
                    assert text and "Traceback" not in text
            assert not (await client.call_tool("retrieve_insights", {"query": "anything"})).is_error

    try:
        anyio.run(run)
        backend.local.consolidate()  # whatever was accepted consolidates
    finally:
        backend.close()
