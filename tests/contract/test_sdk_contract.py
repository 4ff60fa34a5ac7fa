"""The SDK contract: the same calls, results and errors whatever the client — ``Memory`` and
``AsyncMemory``, each on the stores in this process and on a retrieval service over HTTP. One suite,
run on the four (the async clients awaited on an event loop of their own), on a real Redis and the
embedded Qdrant."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from evomem import (
    AsyncMemory,
    EventState,
    InsightView,
    InvalidEventError,
    LineageStep,
    Memory,
    NotFoundError,
    Retrieval,
    ScoredInsight,
    Settings,
)
from evomem.sdk import AsyncRemoteBackend, RemoteMemory
from evomem.service.server import EvomemHTTPServer, build_server

NS = "fever"
TASK = "Verify: Mohra is a truck"
LESSON = "Check which kind of entity a claim names first."
CLIENTS = ["local", "remote", "async-local", "async-remote"]
WAIT_S = 20.0


class Awaited:
    """An ``AsyncMemory`` called from this suite: each call awaited on the client's own loop."""

    def __init__(self, memory: AsyncMemory) -> None:
        self.memory = memory
        self.loop = asyncio.new_event_loop()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        call = getattr(self.memory, name)
        assert asyncio.iscoroutinefunction(call), f"AsyncMemory.{name} is not async"
        return lambda *args, **kwargs: self.loop.run_until_complete(call(*args, **kwargs))

    def close(self) -> None:
        self.loop.run_until_complete(self.memory.close())
        self.loop.close()


@pytest.fixture
def service(settings: Settings, redis_client: redis.Redis) -> Iterator[EvomemHTTPServer]:
    srv = build_server(settings.model_copy(update={"http_port": 0, "data_dir": settings.data_dir / "svc"}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()
    srv.service.runtime.close()


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest, settings: Settings, redis_client: redis.Redis) -> Iterator[Any]:
    """(the client, settle): ``settle()`` applies what was reported, as the workers would, and
    waits until the client's retrievals see it."""
    kind = request.param
    if kind.endswith("local"):
        local = Memory.open_local(settings)
        mem: Any = local if kind == "local" else Awaited(AsyncMemory(local))
        yield mem, lambda: local.consolidate()
        mem.close()
        return
    srv: EvomemHTTPServer = request.getfixturevalue("service")
    remote: Any = (
        RemoteMemory(srv.url) if kind == "remote" else Awaited(AsyncMemory(AsyncRemoteBackend(srv.url)))
    )

    def settle() -> None:
        with Memory.open_local(settings, index=False) as worker:  # a worker beside the service
            worker.consolidate()
        deadline = time.monotonic() + WAIT_S
        while not srv.service.runtime.projected_to_newest():  # the service's index follows the feed
            assert time.monotonic() < deadline, "the service's projector did not catch up"
            time.sleep(0.01)

    yield remote, settle
    remote.close()


def test_an_empty_namespace_serves_nothing(client: Any) -> None:
    mem, _ = client
    r = mem.retrieve(TASK, NS)
    assert isinstance(r, Retrieval) and r.insights == () and r.namespace == NS and r.id
    assert r.render() == ""


def test_a_reported_lesson_is_applied_then_served_with_the_same_types(client: Any) -> None:
    mem, settle = client
    event_id = mem.report(status="failed", namespace=NS, query=TASK, proposed_insight=LESSON)
    assert isinstance(event_id, str) and str(uuid.UUID(event_id)) == event_id
    queued = mem.event(event_id)
    assert isinstance(queued, EventState) and (queued.state, queued.namespace) == ("queued", NS)
    settle()
    applied = mem.event(event_id, NS)
    assert applied.state == "applied" and [(e.op, e.outcome) for e in applied.edits] == [("ADD", "added")]

    r = mem.retrieve(TASK, NS)
    (served,) = r.insights
    assert isinstance(served, ScoredInsight) and served.text == LESSON and served.id == applied.created[0]
    assert LESSON in r.render()
    view = mem.insight(served.id, NS)
    assert isinstance(view, InsightView) and view.text == LESSON and view.state == "active"
    assert [h.op for h in view.history] == ["ADD"]
    (step,) = mem.lineage(served.id)
    assert isinstance(step, LineageStep) and step.id == served.id


def test_a_verdict_reported_with_its_retrieval_is_negative_evidence(client: Any) -> None:
    mem, settle = client
    mem.report(status="failed", namespace=NS, query=TASK, proposed_insight=LESSON)
    settle()
    r = mem.retrieve(TASK, NS)
    lesson = r.insights[0].id
    event_id = mem.report(r, status="failed", insight_feedback={lesson: "harmful"})
    settle()
    assert mem.event(event_id).state == "applied"
    view = mem.insight(lesson)
    assert view.negative
    assert ("ARCHIVE", "feedback") in [(h.op, h.decided_by) for h in view.history]


#: (call, args, kwargs, the field the error names)
BAD_ARGUMENTS: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("retrieve", ("", NS), {}, "query"),
    ("retrieve", (TASK, "not a namespace!"), {}, "namespace"),
    ("retrieve", (TASK, NS), {"top_k": 0}, "top_k"),
    ("retrieve", (TASK, NS), {"budget": True}, "budget"),
    ("report", (), {"status": "maybe", "namespace": NS, "query": TASK}, "status"),
    ("report", (), {"status": "failed", "namespace": NS}, "query"),
    (
        "report",
        (),
        {"status": "failed", "namespace": NS, "query": TASK, "retrieved_insight_ids": ["nope"]},
        "retrieved_insight_ids[0]",
    ),
]


def test_bad_arguments_raise_the_same_error_naming_the_field(client: Any) -> None:
    mem, _ = client
    for call, args, kwargs, field in BAD_ARGUMENTS:
        with pytest.raises(InvalidEventError) as raised:
            getattr(mem, call)(*args, **kwargs)
        assert raised.value.field == field, (call, kwargs)


def test_what_does_not_exist_is_not_found(client: Any) -> None:
    mem, settle = client
    event_id = mem.report(status="failed", namespace=NS, query=TASK, proposed_insight=LESSON)
    settle()
    lesson = mem.retrieve(TASK, NS).insights[0].id
    for call, args in [
        ("insight", ("no-such-insight",)),
        ("insight", ("",)),
        ("insight", (lesson, "another")),
        ("lineage", ("no-such-insight",)),
        ("event", (str(uuid.uuid4()),)),
        ("event", ("not-an-event-id",)),
        ("event", (event_id, "another")),
    ]:
        with pytest.raises(NotFoundError):
            getattr(mem, call)(*args)


def test_pin_revert_and_the_review_queue_answer_alike(client: Any) -> None:
    mem, settle = client
    added = mem.report(status="failed", namespace=NS, query=TASK, proposed_insight=LESSON)
    settle()
    r = mem.retrieve(TASK, NS)
    lesson = r.insights[0].id
    audit = mem.retrieval(r.id, NS)
    assert [s.id for s in audit.insights] == [lesson] and audit.query == TASK

    request_id = mem.pin(lesson, namespace=NS, reason="verified by hand")
    assert str(uuid.UUID(request_id)) == request_id
    settle()
    assert mem.insight(lesson).pinned
    harmed = mem.report(mem.retrieve(TASK, NS), status="failed", insight_feedback={lesson: "harmful"})
    settle()
    assert mem.event(harmed).state == "applied"
    view = mem.insight(lesson)
    assert view.state == "active" and view.negative  # pinned: the verdict is evidence, not an archive
    mem.unpin(lesson, namespace=NS)
    settle()
    assert not mem.insight(lesson).pinned

    same = str(uuid.uuid4())
    assert mem.revert(added, namespace=NS, request_id=same) == same
    assert mem.revert(added, namespace=NS, request_id=same) == same  # the same request twice is one revert
    settle()
    view = mem.insight(lesson)
    assert view.state == "archived" and [h.op for h in view.history].count("REVERT") == 1
    assert mem.retrieve(TASK, NS).insights == ()

    assert mem.reviews(NS) == [] and mem.reviews(NS, state=None) == []
    for call in ("approve", "reject"):
        with pytest.raises(NotFoundError):
            getattr(mem, call)(str(uuid.uuid4()), namespace=NS)
    with pytest.raises(NotFoundError):
        mem.revert(str(uuid.uuid4()), namespace=NS)
