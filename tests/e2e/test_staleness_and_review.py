"""Staleness and the review queue through the public SDK and over HTTP: an insight served without
ever helping is archived (and a revert brings it back), a pinned one never; a namespace under review
holds high-impact edits until an operator approves (applied once) or rejects them, and another
tenant can do neither."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import anyio
import pytest
import redis
from mcp import Client as McpClient

from evomem import Memory, NotFoundError, Settings
from evomem.core.staleness import ServedCounts, stale_reason
from evomem.mcp.mcp_server import LocalToolBackend, build
from evomem.service.auth import OPEN
from evomem.service.server import EvomemHTTPServer, build_server
from schemas.models import utcnow
from tests.e2e import test_tenancy
from tests.e2e.test_lifecycle import GOOD, NS, TASKS, seed
from tests.e2e.test_service import TOKENS, Client, _secret, close_clients

cli = test_tenancy.cli  # ``evomem ...`` in this process, on the test's stores


@pytest.fixture
def stale_memory(settings: Settings, redis_client: redis.Redis) -> Iterator[Memory]:
    """Insights served to two reported tasks without helping either are stale; swept each time."""
    with Memory.open(settings.model_copy(update={"stale_served": 2, "stale_sweep_s": 0})) as mem:
        yield mem


def serve(mem: Memory, task: str, ns: str = NS, **fields: Any) -> str:
    return mem.report(mem.retrieve(task, ns), status=fields.pop("status", "failed"), **fields)


def test_an_insight_served_without_ever_helping_is_archived_and_a_revert_brings_it_back(
    stale_memory: Memory,
) -> None:
    mem = stale_memory
    a, b = seed(mem)
    for _ in range(2):
        serve(mem, TASKS[0])  # served, no verdict that it helped
        serve(mem, TASKS[1], status="resolved", insight_feedback={b: "helpful"})
        mem.consolidate()
    node = mem.insight(a)
    assert node.state == "archived" and mem.insight(b).state == "active"
    last = node.history[-1]
    assert (last.op, last.outcome, last.decided_by) == ("ARCHIVE", "stale", "staleness")
    assert last.note is not None and "never helping" in last.note
    assert a not in [i.id for i in mem.retrieve(TASKS[0], NS).insights]
    # found stale again by later sweeps, it is archived once
    mem.consolidate()
    assert sum(h.outcome == "stale" for h in mem.insight(a).history) == 1
    # reversible like any archive, and its serves are counted afresh
    mem.revert(last.event_id, namespace=NS, by="ops", reason="still right")
    mem.consolidate()
    node = mem.insight(a)
    assert node.state == "active" and node.history[-1].op == "REVERT"
    mem.consolidate()  # swept again: not stale until served twice more
    assert mem.insight(a).state == "active"


def test_a_pinned_insight_is_never_stale(stale_memory: Memory) -> None:
    mem = stale_memory
    a, _ = seed(mem)
    mem.pin(a, by="ops")
    mem.consolidate()
    for _ in range(3):
        serve(mem, TASKS[0])
        mem.consolidate()
    assert mem.insight(a).state == "active"


def test_staleness_is_off_by_default(memory: Memory) -> None:
    a, _ = seed(memory)
    for _ in range(3):
        serve(memory, TASKS[0])
        memory.consolidate()
    assert memory.insight(a).state == "active"


def test_an_insight_not_served_for_the_idle_time_is_stale() -> None:
    now = utcnow()
    record = ServedCounts("i", "active", False, 3, served=4, helped=1, last_served=now - timedelta(hours=2))
    assert stale_reason(record, now, after_s=3600, served=0) is not None
    assert stale_reason(record, now, after_s=3 * 3600, served=0) is None
    assert stale_reason(record, now, after_s=0, served=4) is None  # it helped once
    pinned = ServedCounts("i", "active", True, 3, served=9, helped=0, last_served=now - timedelta(days=9))
    assert stale_reason(pinned, now, after_s=60, served=1) is None


def test_the_idle_rule_through_the_sdk(settings: Settings, redis_client: redis.Redis) -> None:
    """An insight never served again is archived once the idle time has passed since it was
    created (the test waits for the condition: one second is the idle time)."""
    with Memory.open(settings.model_copy(update={"stale_idle_s": 1, "stale_sweep_s": 0})) as mem:
        mem.report(None, status="resolved", namespace=NS, query=TASKS[0], proposed_insight=GOOD[0])
        mem.consolidate()
        (node,) = mem.insights(NS)
        deadline = utcnow() + timedelta(seconds=30)
        while mem.insight(node.id).state == "active" and utcnow() < deadline:
            mem.consolidate()
        assert mem.insight(node.id).state == "archived"
        assert "not served for" in (mem.insight(node.id).history[-1].note or "")


# -- the review queue ------------------------------------------------------------------------------


def under_review(mem: Memory, ns: str = NS, support: int = 2) -> None:
    mem.namespace_settings.set(ns, {"review": True, "review_support": support})


def well_supported(mem: Memory, ns: str = NS) -> str:
    """An insight with two supporting queries: its REVISE or ARCHIVE is held under review_support 2."""
    a, _ = seed(mem, ns)
    serve(mem, TASKS[0], ns, status="resolved", insight_feedback={a: "helpful"})
    mem.consolidate()
    assert len(mem.insight(a).positive) == 2
    return a


def test_a_high_impact_revise_is_held_and_applied_once_when_approved(memory: Memory) -> None:
    a = well_supported(memory)
    under_review(memory)
    event = serve(
        memory, TASKS[0], insight_feedback={a: {"verdict": "partial", "revised_text": "Trust the press."}}
    )
    report = memory.consolidate()
    assert report.outcomes["held"] == 1
    # the pending edit's insight keeps serving as it was
    assert memory.insight(a).state == "active"
    assert memory.retrieve(TASKS[0], NS).insights[0].text == GOOD[0]
    (pending,) = memory.reviews(NS)
    assert (pending.op, pending.insight_id, pending.event_id, pending.state) == (
        "REVISE",
        a,
        event,
        "pending",
    )
    assert pending.text == "Trust the press." and "2 supporting queries" in pending.reason
    rid = str(uuid.uuid4())
    for _ in range(2):  # the same request twice is one edit; another approval applies nothing more
        memory.approve(pending.review_id, namespace=NS, by="ops", request_id=rid)
    memory.approve(pending.review_id, namespace=NS, by="ops")
    memory.consolidate()
    node = memory.insight(a)
    assert node.state == "archived" and len(node.lineage) == 2
    revised = [h for h in node.history if h.op == "REVISE"]
    assert len(revised) == 1 and revised[0].decided_by.endswith("approved by ops")
    assert memory.retrieve(TASKS[0], NS).insights[0].text == "Trust the press."
    (done,) = memory.reviews(NS, state=None)
    assert done.state == "approved" and done.decided_by == "ops" and done.applied_event_id
    assert memory.reviews(NS) == []
    # a rejection after the approval changes nothing; the approved edit reverts like any other
    memory.reject(done.review_id, namespace=NS)
    memory.consolidate()
    assert memory.reviews(NS, state="approved")[0].state == "approved"
    memory.revert(done.applied_event_id, namespace=NS, by="ops")
    memory.consolidate()
    assert memory.retrieve(TASKS[0], NS).insights[0].text == GOOD[0]


def test_a_rejected_edit_is_never_applied(memory: Memory) -> None:
    a = well_supported(memory)
    under_review(memory)
    serve(memory, TASKS[0], insight_feedback={a: "harmful"})
    serve(memory, TASKS[0], insight_feedback={a: "harmful"})
    memory.consolidate()
    node = memory.insight(a)
    assert node.state == "active" and not node.negative  # held: no evidence recorded either
    held = memory.reviews(NS)
    assert [h.op for h in held] == ["ARCHIVE", "ARCHIVE"]
    for h in held:
        memory.reject(h.review_id, namespace=NS, by="ops", reason="the judge was wrong")
        memory.approve(h.review_id, namespace=NS)  # too late: the first decision stands
    memory.consolidate()
    assert memory.insight(a).state == "active" and not memory.insight(a).negative
    assert {h.state for h in memory.reviews(NS, state=None)} == {"rejected"}
    assert memory.reviews(NS, state=None)[0].note == "the judge was wrong"


def test_low_impact_edits_and_namespaces_not_under_review_apply_at_once(memory: Memory) -> None:
    a, _ = seed(memory)
    under_review(memory, support=5)
    serve(memory, TASKS[0], insight_feedback={a: "harmful"})
    memory.consolidate()
    assert memory.reviews(NS) == [] and len(memory.insight(a).negative) == 1
    with pytest.raises(NotFoundError):
        memory.approve(str(uuid.uuid4()), namespace=NS)


def test_review_over_http_and_the_remote_sdk(server: EvomemHTTPServer, settings: Settings) -> None:
    local = Memory(server.service.runtime)
    a = well_supported(local, "alpha")
    under_review(local, "alpha")
    serve(local, TASKS[0], "alpha", insight_feedback={a: "harmful"})
    local.consolidate()
    alpha = Client(server, "tok-alpha")
    status, body = alpha.call("GET", "/v1/reviews?namespace=alpha")
    assert status == 200 and [r["insight_id"] for r in body["reviews"]] == [a]
    review_id = body["reviews"][0]["review_id"]
    rid = str(uuid.uuid4())
    for _ in range(2):
        status, body = alpha.call(
            "POST", f"/v1/reviews/{review_id}/approve", {"namespace": "alpha", "request_id": rid}
        )
        assert status == 202 and body["request_id"] == rid
    local.consolidate()
    node = local.insight(a)
    assert len(node.negative) == 1
    assert [h.decided_by for h in node.history if h.op == "ARCHIVE"] == ["feedback, approved by token-1"]
    status, body = alpha.call("GET", "/v1/reviews?namespace=alpha&state=approved")
    assert status == 200 and body["reviews"][0]["decided_by"] == "token-1"
    remote = Memory.open(settings.model_copy(update={"url": server.url, "token": _secret("tok-alpha")}))
    with remote:
        assert remote.reviews("alpha") == []
        assert [r.review_id for r in remote.reviews("alpha", state=None)] == [review_id]
        with pytest.raises(NotFoundError):
            remote.reject(str(uuid.uuid4()), namespace="alpha")


def test_another_tenant_can_neither_list_nor_approve_nor_reject(server: EvomemHTTPServer) -> None:
    local = Memory(server.service.runtime)
    a = well_supported(local, "alpha")
    under_review(local, "alpha")
    serve(local, TASKS[0], "alpha", insight_feedback={a: "harmful"})
    local.consolidate()
    (held,) = local.reviews("alpha")
    before = local.stream.info()["length"]
    beta = Client(server, "tok-beta")
    decision = {"namespace": "alpha"}
    assert beta.call("GET", "/v1/reviews?namespace=alpha")[0] == 403
    assert beta.call("POST", f"/v1/reviews/{held.review_id}/approve", decision)[0] == 403
    assert beta.call("POST", f"/v1/reviews/{held.review_id}/reject", decision)[0] == 403
    # in its own namespace, another namespace's review id is not found
    assert beta.call("POST", f"/v1/reviews/{held.review_id}/approve", {"namespace": "beta"})[0] == 404
    for token in (None, "not-a-token"):
        assert Client(server, token).call("GET", "/v1/reviews?namespace=alpha")[0] == 401
        assert Client(server, token).call("POST", f"/v1/reviews/{held.review_id}/reject", decision)[0] == 401
    assert local.stream.info()["length"] == before  # nothing was published
    local.consolidate()
    assert local.reviews("alpha")[0].state == "pending"


def test_review_from_the_command_line(memory: Memory, cli: Any) -> None:
    a = well_supported(memory)
    under_review(memory)
    serve(memory, TASKS[0], insight_feedback={a: "harmful"})
    memory.consolidate()
    code, out = cli("review", "list", "-n", NS)
    (held,) = memory.reviews(NS)
    assert code == 0 and held.review_id in out and "ARCHIVE" in out
    code, out = cli("review", "reject", held.review_id, "-n", NS, "--reason", "wrong judge")
    assert code == 0 and uuid.UUID(out.strip())
    assert cli("consolidate")[0] == 0
    assert memory.reviews(NS, state="rejected")[0].note == "wrong judge"


def test_review_through_the_mcp_tools(settings: Settings, redis_client: redis.Redis) -> None:
    backend = LocalToolBackend(Memory.open_local(settings), NS, consolidate=False)
    mem = Memory(backend.local.runtime)
    a = well_supported(mem)
    under_review(mem)
    serve(mem, TASKS[0], insight_feedback={a: "harmful"})
    mem.consolidate()

    async def run() -> None:
        async with McpClient(build(backend, OPEN)) as client:
            listed = await client.call_tool("list_reviews", {})
            assert not listed.is_error and listed.structured_content is not None
            (held,) = listed.structured_content["reviews"]
            assert held["insight_id"] == a and held["op"] == "ARCHIVE"
            for _ in range(2):
                done = await client.call_tool(
                    "review_edit", {"review_id": held["review_id"], "approve": True}
                )
                assert not done.is_error
            missing = await client.call_tool("review_edit", {"review_id": "no-such-review", "approve": False})
            assert missing.is_error

    try:
        anyio.run(run)
        mem.consolidate()
        assert [h.op for h in mem.insight(a).history].count("ARCHIVE") == 1
        assert (mem.reviews(NS, state="approved")[0].decided_by or "").startswith("mcp:")
    finally:
        backend.close()


@pytest.fixture
def server(settings: Settings, redis_client: redis.Redis) -> Iterator[EvomemHTTPServer]:
    srv = build_server(settings.model_copy(update={"tokens": _secret(TOKENS), "http_port": 0}))
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    close_clients()
    srv.shutdown()
    srv.server_close()
    srv.service.runtime.close()
