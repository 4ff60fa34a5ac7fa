"""The state of a reported event through queued → applied, and dead-lettered with the reason, by
the SDK (local and remote), the HTTP API and the CLI; another tenant's token is told nothing (404)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from pydantic import SecretStr

from evomem import Memory, NotFoundError, Settings
from evomem.cli import main
from evomem.sdk import RemoteMemory
from evomem.service.server import EvomemHTTPServer, build_server

NS = "fever"
TASK = "Verify: Mohra is a truck"
LESSON = "Check which kind of entity a claim names first."


def bad_event(event_id: str, namespace: str = NS) -> str:
    """A stream document that names its event and namespace but has no valid status."""
    return json.dumps({"event_id": event_id, "namespace": namespace, "query": TASK, "status": "maybe"})


def test_an_event_is_queued_then_applied_with_its_edits(memory: Memory) -> None:
    event_id = memory.report(status="failed", namespace=NS, query=TASK, proposed_insight=LESSON)
    queued = memory.event(event_id)
    assert (queued.state, queued.namespace, queued.edits) == ("queued", NS, [])
    memory.consolidate()
    applied = memory.event(event_id)
    assert applied.state == "applied"
    assert [(e.op, e.outcome) for e in applied.edits] == [("ADD", "added")]
    assert applied.created and memory.insight(applied.created[0]).text == LESSON
    assert memory.event(event_id.upper(), NS).state == "applied"  # the id as any case of the UUID
    with pytest.raises(NotFoundError):
        memory.event(event_id, "another")
    for unknown in (str(uuid.uuid4()), "not-an-id", "em:{x}"):
        with pytest.raises(NotFoundError):
            memory.event(unknown)


def test_a_bad_event_is_dead_lettered_with_the_reason_and_queued_again_when_replayed(
    memory: Memory,
) -> None:
    event_id = str(uuid.uuid4())
    memory.stream.publish_raw(bad_event(event_id))
    memory.stream.publish_raw(b"\xff not json at all")  # names no event: dead-lettered, never asked for
    memory.consolidate()
    state = memory.event(event_id)
    assert state.state == "dead-lettered" and state.field == "status"
    assert state.reason and state.dead_letter_id
    assert memory.stream.dead_letter_entry(state.dead_letter_id)["reason"] == state.reason
    memory.stream.replay([state.dead_letter_id])
    assert memory.event(event_id).state == "queued"


def test_without_a_state_ttl_only_applied_events_are_found(
    settings: Settings, redis_client: redis.Redis
) -> None:
    with Memory.open(settings.model_copy(update={"event_state_ttl_s": 0})) as mem:
        event_id = mem.report(status="resolved", namespace=NS, query=TASK)
        with pytest.raises(NotFoundError):
            mem.event(event_id)
        mem.consolidate()
        with pytest.raises(NotFoundError):  # no marker names the namespace: it must be given
            mem.event(event_id)
        assert mem.event(event_id, NS).state == "applied"


# -- over HTTP ----------------------------------------------------------------------------------------
@pytest.fixture
def service(settings: Settings, redis_client: redis.Redis) -> Iterator[EvomemHTTPServer]:
    tokens = SecretStr("tok-fever=fever;tok-other=other;tok-admin=*")
    srv = build_server(settings.model_copy(update={"http_port": 0, "tokens": tokens}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()
    srv.service.runtime.close()


def get(srv: EvomemHTTPServer, token: str, event_id: str) -> httpx.Response:
    return httpx.get(
        f"{srv.url}/v1/events/{event_id}", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def test_the_route_answers_the_events_own_tenant_only(
    service: EvomemHTTPServer, settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    with RemoteMemory(service.url, "tok-fever") as remote:
        event_id = remote.report(status="failed", namespace=NS, query=TASK, proposed_insight=LESSON)
        assert remote.event(event_id).state == "queued"
    assert get(service, "tok-fever", event_id).json()["state"] == "queued"
    other = get(service, "tok-other", event_id)
    assert other.status_code == 404 and "no event" in other.json()["error"]
    assert get(service, "tok-admin", event_id).json()["namespace"] == NS
    assert get(service, "tok-fever", "nope").status_code == 404
    assert get(service, "nobody", event_id).status_code == 401

    with Memory.open(settings, index=False) as mem:  # a worker's consolidation, beside the service
        mem.consolidate()
    body = get(service, "tok-fever", event_id).json()
    assert body["state"] == "applied" and body["edits"][0]["op"] == "ADD"
    with RemoteMemory(service.url, "tok-other") as stranger, pytest.raises(NotFoundError):
        stranger.event(event_id)

    dead = str(uuid.uuid4())
    service.service.runtime.events.publish_raw(bad_event(dead))
    with Memory.open(settings, index=False) as mem:
        mem.consolidate()
    letter = get(service, "tok-fever", dead).json()
    assert letter["state"] == "dead-lettered" and letter["field"] == "status"
    assert get(service, "tok-other", dead).status_code == 404

    monkeypatch.setenv("EVOMEM_REDIS_URL", str(settings.redis_url))
    monkeypatch.setenv("EVOMEM_DATA_DIR", str(settings.data_dir))
    capsys.readouterr()
    assert main(["event", dead]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "dead-lettered" and shown["reason"] == letter["reason"]
    assert main(["event", str(uuid.uuid4())]) != 0
