"""Hostile input through every entry point, generated: ids, namespaces and payloads with ``:``, ``{``,
``}``, unicode, control characters, very long and deeply nested values, sent over HTTP, through the
SDK and as raw XADDs (then consolidated), and through the CLI for a few cheap cases. Whatever comes
in: no process crashes, nothing answers 5xx, every refusal names its field, and the victim
namespace's memory (its export and what it is served) is exactly what it was."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from evomem import EvomemError, InvalidEventError, Memory, Settings, keys
from evomem.pipeline.export import export
from evomem.service.server import EvomemHTTPServer, build_server

TOKENS = "tok-evil=evil,evil2;tok-victim=victim"
VICTIM_LESSON = "Check the vehicle class first."

_specials = st.sampled_from(
    [
        ":",
        "{",
        "}",
        "{x}:nbr",
        "a:pos",
        "ns:q:1",
        "\x00",
        "\x1b[2J",
        "\u202e",
        "é",
        "日本",
        "\ud7ff",
        "💥",
        " ",
        "",
    ]
)
_text = st.one_of(
    st.text(max_size=30),
    _specials,
    st.builds(lambda a, b: a + b, _specials, st.text(max_size=10)),
    st.text(alphabet="{}:ab", min_size=1, max_size=12),
    st.integers(min_value=2_000, max_value=20_000).map(lambda n: "x" * n),  # very long
)
_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), _text
)
_nested = st.recursive(
    _leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(_text, c, max_size=3), max_leaves=12
)


def _deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"step": value}
    return value


# as deep as json.dumps can write (far past the 32 levels an event may hold); deeper ones go as raw text
_deeply_nested = st.integers(min_value=1, max_value=900).map(_deep)


def _deep_text(depth: int) -> str:
    nested = '{"s":' * depth + "1" + "}" * depth
    return '{"namespace":"evil","query":"q","status":"failed","trajectory":[' + nested + "]}"


@st.composite
def hostile_event(draw: st.DrawFn, victim_ids: list[str]) -> dict[str, Any]:
    """An event document an attacker (or a careless client) might send, fields possibly missing,
    mistyped or aimed at the victim's nodes."""
    # the victim's own ids, and ids shaped like the keys of the victim's nodes (``<id>:nbr``, ...)
    aimed = st.builds(
        lambda i, suffix: i + suffix,
        st.sampled_from(victim_ids),
        st.sampled_from([":nbr", ":pos", ":neg", ":hist", ":edges", ":q.nbr", ":ins"]),
    )
    ids = st.one_of(_text, st.sampled_from(victim_ids), aimed)
    doc: dict[str, Any] = {
        "namespace": draw(st.one_of(st.sampled_from(["evil", "evil2", "victim"]), _text)),
        "query": draw(_text),
        "status": draw(st.one_of(st.sampled_from(["resolved", "failed"]), _text)),
    }
    optional: dict[str, st.SearchStrategy[Any]] = {
        "query_id": ids,
        "retrieval_id": _text,
        "retrieved_insight_ids": st.lists(ids, max_size=3),
        "insight_feedback": st.dictionaries(
            ids, st.one_of(st.sampled_from(["helpful", "harmful"]), _nested), max_size=2
        ),
        "trajectory": st.lists(st.one_of(_text, _nested, _deeply_nested), max_size=3),
        "proposed_insight": _text,
        "final_answer": _nested,
        "agent_id": _text,
        "event_id": _text,
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            doc[name] = draw(strategy)
    return doc


@pytest.fixture
def arena(settings: Settings, redis_client: redis.Redis) -> Iterator[tuple[EvomemHTTPServer, httpx.Client]]:
    srv = build_server(settings.model_copy(update={"http_port": 0, "tokens": SecretStr(TOKENS)}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    mem = Memory(srv.service.runtime)
    mem.report(
        None,
        namespace="victim",
        query="Verify claim 0 about victim",
        status="resolved",
        proposed_insight=VICTIM_LESSON,
    )
    mem.consolidate()
    client = httpx.Client(base_url=srv.url, timeout=30)
    yield srv, client
    client.close()
    srv.shutdown()
    srv.server_close()
    mem.close()


def _victim_view(srv: EvomemHTTPServer, client: httpx.Client) -> tuple[str, list[str]]:
    exported = json.dumps(list(export(srv.service.runtime.graph, ["victim"])), sort_keys=True, default=str)
    answer = client.post(
        "/v1/retrieve",
        json={"query": "Verify claim 0 about victim", "namespace": "victim"},
        headers={"Authorization": "Bearer tok-victim"},
    )
    assert answer.status_code == 200
    return exported, [i["text"] for i in answer.json()["insights"]]


def _refused_well(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        body = response.json()
        assert body["error"]
        if response.status_code == 422:
            assert isinstance(body["field"], str) and body["field"], body


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(data=st.data())
def test_hostile_input_through_every_entry_point_breaks_nothing_and_touches_no_other_namespace(
    arena: tuple[EvomemHTTPServer, httpx.Client], data: st.DataObject
) -> None:
    srv, client = arena
    mem = Memory(srv.service.runtime)
    victim_ids = sorted(mem.graph.insight_ids("victim") | mem.graph.query_ids("victim"))
    before = _victim_view(srv, client)
    event = data.draw(hostile_event(victim_ids))
    evil = {"Authorization": "Bearer tok-evil"}

    # HTTP: the event, a retrieval with hostile arguments, an insight by a hostile id
    body = json.dumps(event)  # NaN and Infinity as the literals a careless client sends
    _refused_well(
        client.post("/v1/events", content=body, headers={**evil, "Content-Type": "application/json"})
    )
    deep_body = _deep_text(data.draw(st.integers(min_value=1, max_value=20_000)))
    _refused_well(client.post("/v1/events", content=deep_body, headers=evil))
    retrieve = {
        "query": event["query"],
        "namespace": event["namespace"],
        "top_k": data.draw(st.one_of(st.none(), st.integers())),
        "budget": data.draw(st.one_of(st.none(), st.integers())),
    }
    _refused_well(client.post("/v1/retrieve", content=json.dumps(retrieve), headers=evil))
    some_id = data.draw(st.one_of(_text, st.sampled_from(victim_ids)))
    if some_id:
        _refused_well(client.get("/v1/insights/" + urllib.parse.quote(some_id, safe=""), headers=evil))

    # the SDK: the same event and arguments, every refusal an InvalidEventError naming its field
    fields = {k: v for k, v in event.items() if k not in ("namespace", "query", "status")}
    for call in (
        lambda: mem.report(
            None, namespace=event["namespace"], query=event["query"], status=event["status"], **fields
        ),
        lambda: mem.retrieve(
            retrieve["query"], retrieve["namespace"], top_k=retrieve["top_k"], budget=retrieve["budget"]
        ),
        lambda: mem.insight(some_id),
    ):
        try:
            call()
        except InvalidEventError as exc:
            assert exc.field
        except EvomemError:
            pass

    # raw XADDs, as any publisher with Redis access can do, then consolidation takes them all
    mem.stream.publish_raw(body)
    mem.stream.publish_raw(deep_body)
    mem.stream.publish_raw(body.encode("utf-8", "surrogatepass")[:5000] + b"\xff")
    mem.redis.xadd(keys.EVENTS_STREAM, {"not-event": body[:100]})
    mem.consolidate()

    assert client.get("/healthz").status_code == 200
    assert _victim_view(srv, client) == before


def test_hostile_input_through_the_cli_is_answered_in_one_line(tmp_path: Path, redis_url: str) -> None:
    doc = {
        "namespace": "a{b}:c",
        "query": "\x00" + "q" * 10_000,
        "status": "failed",
        "trajectory": [_deep(400)],
    }
    path = tmp_path / "event.json"
    path.write_text(json.dumps(doc))
    env = {
        "EVOMEM_REDIS_URL": redis_url,
        "EVOMEM_DATA_DIR": str(tmp_path / "data"),
        "EVOMEM_EMBEDDER": "hashing",
        "PATH": "/usr/bin:/bin",
    }
    for args in (
        ["report", "--file", str(path)],
        ["retrieve", "q", "-n", "{victim}"],
        ["retrieve", "q" * 9000],
        ["inspect", "x:pos"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "evomem.cli", *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode in (1, 2), (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.startswith("evomem: "), (
            args,
            result.stderr,
        )
