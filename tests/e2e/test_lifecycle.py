"""Undo and protect through the public SDK and over HTTP: revert an event, roll a namespace back to
a time, pin an insight; idempotent requests; another tenant can do none of it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from evomem import InvalidEventError, Memory, NotFoundError, Settings
from evomem.sdk.memory import RemoteMemory
from evomem.service.server import EvomemHTTPServer, build_server
from tests.e2e import test_tenancy
from tests.e2e.test_service import TOKENS, Client, _secret, close_clients

cli = test_tenancy.cli  # ``evomem ...`` in this process, on the test's stores

NS = "fleet"
GOOD = ["Check the vehicle class in the registry first.", "Read the claim twice before you answer."]
TASKS = ["Verify: the Mohra is a truck", "Verify: the claim about the Mohra"]


def seed(mem: Memory, ns: str = NS) -> list[str]:
    ids = []
    for task, text in zip(TASKS, GOOD, strict=True):
        mem.report(None, status="resolved", namespace=ns, query=task, proposed_insight=text)
        mem.consolidate()
        ids.append(next(i.id for i in mem.retrieve(task, ns).insights if i.text == text))
    return ids


def served(mem: Memory, ns: str = NS) -> list[list[tuple[str, str]]]:
    return [[(i.id, i.text) for i in mem.retrieve(task, ns).insights] for task in TASKS]


def revise(mem: Memory, insight_id: str, task: str, text: str) -> str:
    r = mem.retrieve(task, NS)
    return mem.report(
        r, status="failed", insight_feedback={insight_id: {"verdict": "partial", "revised_text": text}}
    )


def test_a_reverted_revise_serves_the_old_text_again_with_lineage_intact(memory: Memory) -> None:
    a, _ = seed(memory)
    bad = revise(memory, a, TASKS[0], "Trust the press release.")
    memory.consolidate()
    assert served(memory)[0][0][1] == "Trust the press release."
    request = memory.revert(bad, namespace=NS, by="ops", reason="bad model deployment")
    assert memory.consolidate().operations["REVERT"] == 1
    assert served(memory)[0][0][1] == GOOD[0]
    old = memory.insight(a)
    (new_id,) = old.lineage[1:]
    new = memory.insight(new_id)
    assert old.state == "active" and new.state == "archived"
    assert new.lineage == (a, new_id) and new.revised_from == a
    last = old.history[-1]
    assert (last.op, last.event_id, last.decided_by) == ("REVERT", request, "ops")
    assert last.note == f"reverted REVISE (revised) of event {bad} by ops: bad model deployment"
    # the same request again is one revert; another request finds nothing left to undo
    memory.revert(bad, namespace=NS, request_id=request)
    memory.revert(bad, namespace=NS)
    memory.consolidate()
    assert sum(h.op == "REVERT" for h in memory.insight(a).history) == 1


def test_a_namespace_rolled_back_to_t_serves_what_it_served_at_t(memory: Memory) -> None:
    a, b = seed(memory)
    at_t = served(memory)
    t = datetime.now(UTC)
    # a bad deployment: revisions into wrong texts, an archive, a made-up lesson
    revise(memory, a, TASKS[0], "Trust the press release.")
    r = memory.retrieve(TASKS[1], NS)
    memory.report(r, status="failed", insight_feedback={b: "harmful"}, proposed_insight="Guess quickly.")
    memory.consolidate()
    assert served(memory) != at_t
    memory.revert(namespace=NS, since=t, by="ops")
    report = memory.consolidate()
    assert report.operations["REVERT"] == 1 and report.outcomes["reverted"] >= 3
    assert served(memory) == at_t
    assert {n.id for n in memory.insights(NS, state="active")} == {a, b}


def test_a_pinned_insight_keeps_serving_under_harmful_verdicts(memory: Memory) -> None:
    a, _ = seed(memory)
    memory.pin(a, by="ops", reason="verified by hand")
    memory.consolidate()
    for _ in range(3):
        r = memory.retrieve(TASKS[0], NS)
        memory.report(r, status="failed", insight_feedback={a: "harmful"})
        memory.consolidate()
    node = memory.insight(a)
    assert node.state == "active" and node.pinned and len(node.negative) == 3
    assert [h.outcome for h in node.history].count("pinned") == 4  # the pin and three verdicts
    memory.unpin(a, by="ops")
    memory.consolidate()
    assert not memory.insight(a).pinned


def test_requests_naming_what_the_namespace_does_not_hold_are_refused(memory: Memory) -> None:
    a, _ = seed(memory)
    with pytest.raises(NotFoundError):
        memory.revert(str(uuid.uuid4()), namespace=NS)
    with pytest.raises(NotFoundError):
        memory.pin(a, namespace="elsewhere")
    with pytest.raises(InvalidEventError) as err:
        memory.revert(namespace=NS)  # neither an event nor a time
    assert err.value.field


# -- over HTTP -----------------------------------------------------------------------------------


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


def test_revert_and_pin_over_http_and_the_remote_sdk(server: EvomemHTTPServer, settings: Settings) -> None:
    local = Memory(server.service.runtime)
    a, _ = seed(local, "alpha")
    bad = local.report(
        local.retrieve(TASKS[0], "alpha"),
        status="failed",
        insight_feedback={a: {"verdict": "partial", "revised_text": "Trust the press release."}},
    )
    local.consolidate()
    client = Client(server, "tok-alpha")
    rid = str(uuid.uuid4())
    for _ in range(2):  # the same request twice is one revert
        status, body = client.call(
            "POST", "/v1/revert", {"namespace": "alpha", "event_id": bad, "request_id": rid}
        )
        assert status == 202 and body["request_id"] == rid
    local.consolidate()
    status, node = client.call("GET", f"/v1/insights/{a}")
    assert status == 200 and node["insight"]["state"] == "active"
    reverts = [h for h in node["history"] if h["op"] == "REVERT"]
    assert len(reverts) == 1 and reverts[0]["decided_by"] == "token-1"  # the token, not the client, says who
    assert reverts[0]["note"].startswith(f"reverted REVISE (revised) of event {bad} by ")
    remote = Memory.open(settings.model_copy(update={"url": server.url, "token": _secret("tok-alpha")}))
    assert isinstance(remote, RemoteMemory)
    with remote:
        remote.pin(a, reason="verified")
        local.consolidate()
        assert remote.insight(a).pinned
        remote.unpin(a)
        local.consolidate()
        assert not remote.insight(a).pinned
        with pytest.raises(NotFoundError):
            remote.revert(str(uuid.uuid4()), namespace="alpha")


def test_another_tenant_can_neither_revert_nor_pin(server: EvomemHTTPServer) -> None:
    local = Memory(server.service.runtime)
    a, _ = seed(local, "alpha")
    event = local.report(local.retrieve(TASKS[0], "alpha"), status="failed", insight_feedback={a: "harmful"})
    local.consolidate()
    before = local.stream.info()["length"]
    beta = Client(server, "tok-beta")
    revert: dict[str, Any] = {"namespace": "alpha", "event_id": event}
    assert beta.call("POST", "/v1/revert", revert)[0] == 403
    assert beta.call("POST", "/v1/revert", {"namespace": "alpha", "since": "2020-01-01T00:00:00Z"})[0] == 403
    assert beta.call("POST", f"/v1/insights/{a}/pin", {})[0] == 404
    assert beta.call("POST", f"/v1/insights/{a}/unpin", {})[0] == 404
    for token in (None, "not-a-token"):
        assert Client(server, token).call("POST", "/v1/revert", revert)[0] == 401
        assert Client(server, token).call("POST", f"/v1/insights/{a}/pin", {})[0] == 401
    assert local.stream.info()["length"] == before  # nothing was published
    assert Client(server, "tok-alpha").call("POST", f"/v1/insights/{a}/pin", {})[0] == 202


def test_revert_and_pin_from_the_command_line(memory: Memory, cli: Any) -> None:
    a, _ = seed(memory)
    bad = revise(memory, a, TASKS[0], "Trust the press release.")
    memory.consolidate()
    code, out = cli("revert", bad, "-n", NS, "--by", "ops", "--reason", "bad deployment")
    assert code == 0 and uuid.UUID(out.strip())
    assert cli("pin", a, "--reason", "verified")[0] == 0
    assert cli("consolidate")[0] == 0
    code, out = cli("inspect", a)
    assert code == 0 and "[active, pinned," in out
    assert f"reverted REVISE (revised) of event {bad} by ops: bad deployment" in out
    code, out = cli("revert", "-n", NS, "--since", "2026-01-01T00:00:00")  # no zone
    assert code != 0
