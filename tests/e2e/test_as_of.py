"""As-of reads through the public SDK and over HTTP: what the memory served and held at a time T,
read after the memory has moved on, matches a snapshot taken at T; on one Redis and on a Cluster."""

from __future__ import annotations

import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from evomem import InvalidEventError, Memory, NotFoundError, Settings
from evomem.adapters.redis.connection import connect
from evomem.adapters.redis.local_cluster import LocalCluster
from evomem.service.server import EvomemHTTPServer
from tests.e2e import test_lifecycle
from tests.e2e.test_lifecycle import GOOD, NS, TASKS, revise, seed
from tests.e2e.test_service import Client, _secret

server = test_lifecycle.server  # a service with the tokens of tests/e2e/test_service.py


def picture(mem: Memory, ids: list[str], at: datetime | None = None) -> dict[str, Any]:
    """What a reader sees: each task's served insights, and each insight's state, text and evidence."""
    served = [
        [
            (i.id, i.text, i.support, i.conflict, round(i.score, 6))
            for i in mem.retrieve(t, NS, as_of=at).insights
        ]
        for t in [*TASKS, "Verify: a claim nobody made before"]
    ]
    nodes = {}
    for i in ids:
        try:
            n = mem.insight(i, as_of=at)
        except NotFoundError:
            continue
        nodes[i] = (n.state, n.text, n.positive, n.negative, n.pinned, tuple(h.op for h in n.history))
    return {"served": served, "nodes": nodes}


def moves_on(mem: Memory, a: str, b: str) -> None:
    """After T: a revision, a harmful verdict, a new insight, a pin and a revert of an edit from before T."""
    revise(mem, a, TASKS[0], "Trust the press release.")
    r = mem.retrieve(TASKS[1], NS)
    mem.report(r, status="failed", insight_feedback={b: "harmful"}, proposed_insight="Guess quickly.")
    mem.report(
        None,
        status="resolved",
        namespace=NS,
        query="Verify: a claim nobody made before",
        proposed_insight="New claims need two sources.",
    )
    mem.consolidate()
    mem.pin(b, by="ops")
    mem.consolidate()


def check_as_of(mem: Memory) -> None:
    a, b = seed(mem)
    early = mem.report(mem.retrieve(TASKS[0], NS), status="resolved", insight_feedback={a: "helpful"})
    mem.consolidate()
    time.sleep(0.01)  # T falls strictly between the edits before it and those after
    t = datetime.now(UTC)
    time.sleep(0.01)
    ids = [i.id for i in mem.insights(NS)]
    at_t = picture(mem, ids)
    moves_on(mem, a, b)
    mem.revert(early, namespace=NS, by="ops")  # an edit from before T undone after T
    mem.consolidate()
    everything = [i.id for i in mem.insights(NS)]
    assert picture(mem, everything) != at_t
    assert picture(mem, everything, at=t) == at_t


def test_as_of_reads_match_a_snapshot_taken_at_t(memory: Memory) -> None:
    check_as_of(memory)
    with pytest.raises(InvalidEventError) as err:
        memory.retrieve(TASKS[0], NS, as_of=datetime.now(UTC) - timedelta(days=400))
    assert err.value.field == "as_of"
    with pytest.raises(InvalidEventError):
        memory.insight(memory.insights(NS)[0].id, as_of=datetime.now())  # no zone


def test_as_of_reads_match_a_snapshot_on_a_redis_cluster(redis_cluster: LocalCluster, tmp_path: Path) -> None:
    client = connect(redis_cluster.url)
    client.flushdb()
    client.close()
    with Memory.open(Settings(data_dir=tmp_path / "data", redis_url=redis_cluster.url)) as mem:
        check_as_of(mem)


def test_an_insight_that_did_not_exist_then_is_not_found(memory: Memory) -> None:
    t = datetime.now(UTC)
    time.sleep(0.01)
    a, _ = seed(memory)
    with pytest.raises(NotFoundError):
        memory.insight(a, as_of=t)
    assert memory.retrieve(TASKS[0], NS, as_of=t).insights == ()
    assert memory.insight(a).text == GOOD[0]


# -- over HTTP, and the audit of a retrieval ---------------------------------------------------------


def test_as_of_and_the_audit_of_a_retrieval_over_http(server: EvomemHTTPServer, settings: Settings) -> None:
    local = Memory(server.service.runtime)
    a, _ = seed(local, "alpha")
    client = Client(server, "tok-alpha")
    status, served = client.call("POST", "/v1/retrieve", {"query": TASKS[0], "namespace": "alpha"})
    assert status == 200 and served["insights"]
    t = datetime.now(UTC)
    time.sleep(0.01)
    revise_in(local, "alpha", a)
    local.consolidate()
    status, then = client.call(
        "POST", "/v1/retrieve", {"query": TASKS[0], "namespace": "alpha", "as_of": t.isoformat()}
    )
    assert status == 200
    assert [(i["id"], i["text"]) for i in then["insights"]] == [
        (i["id"], i["text"]) for i in served["insights"]
    ]
    status, node = client.call("GET", f"/v1/insights/{a}?" + urllib.parse.urlencode({"as_of": t.isoformat()}))
    assert status == 200 and node["insight"]["state"] == "active" and node["insight"]["revised_to"] is None
    assert [h["op"] for h in node["history"]] == ["ADD"]
    # what the first retrieval served, and why
    status, audit = client.call("GET", f"/v1/retrievals/{served['retrieval_id']}?namespace=alpha")
    assert status == 200 and audit["query"] == TASKS[0] and audit["at"]
    assert [(i["id"], i["score"], i["support"]) for i in audit["insights"]] == [
        (i["id"], i["score"], i["support"]) for i in served["insights"]
    ]
    assert [q["id"] for q in audit["similar"]] == served["similar_queries"]
    assert all(q["text"] for q in audit["similar"])
    remote = Memory.open(settings.model_copy(update={"url": server.url, "token": _secret("tok-alpha")}))
    with remote:
        assert remote.retrieval(served["retrieval_id"], "alpha").insights[0].id == served["insights"][0]["id"]
        assert remote.insight(a, as_of=t).state == "active"
        assert [i.id for i in remote.retrieve(TASKS[0], "alpha", as_of=t).insights] == [
            i["id"] for i in served["insights"]
        ]
    # another tenant reads nothing of it
    beta = Client(server, "tok-beta")
    asked = {"query": TASKS[0], "namespace": "alpha", "as_of": t.isoformat()}
    assert beta.call("POST", "/v1/retrieve", asked)[0] == 403
    assert beta.call("GET", f"/v1/insights/{a}?as_of={urllib.parse.quote(t.isoformat())}")[0] == 404
    assert beta.call("GET", f"/v1/retrievals/{served['retrieval_id']}?namespace=alpha")[0] == 403
    assert beta.call("GET", f"/v1/retrievals/{served['retrieval_id']}?namespace=beta")[0] == 404
    assert (
        Client(server, None).call("GET", f"/v1/retrievals/{served['retrieval_id']}?namespace=alpha")[0] == 401
    )
    assert client.call("GET", f"/v1/insights/{a}?as_of=yesterday")[0] == 422


def revise_in(mem: Memory, ns: str, insight_id: str) -> None:
    r = mem.retrieve(TASKS[0], ns)
    mem.report(
        r,
        status="failed",
        insight_feedback={insight_id: {"verdict": "partial", "revised_text": "Trust the press."}},
    )
