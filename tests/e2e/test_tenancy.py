"""Per-namespace settings and run-time tokens: managed with the CLI, taken up by the HTTP service,
the workers' consolidation and the retrieval path without a restart."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from evomem import InvalidEventError, Memory, Settings
from evomem.adapters.redis.api_tokens import TokenStore
from evomem.adapters.redis.namespace_settings import NamespaceSettings
from evomem.cli import main
from evomem.service.server import EvomemHTTPServer, build_server
from evomem.settings import SECTIONS
from tests.support.pipeline_helpers import wait_for

WAIT_S = 20.0


@pytest.fixture
def cli(settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """``evomem ...`` in this process, on the test's stores; returns (status, stdout)."""
    monkeypatch.setenv("EVOMEM_REDIS_URL", str(settings.redis_url))
    monkeypatch.setenv("EVOMEM_DATA_DIR", str(settings.data_dir))

    def run(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(list(argv))
        return code, capsys.readouterr().out

    return run


@pytest.fixture
def make_service(settings: Settings, redis_client: redis.Redis) -> Iterator[Any]:
    started: list[EvomemHTTPServer] = []

    def make(**overrides: Any) -> EvomemHTTPServer:
        srv = build_server(settings.model_copy(update={"http_port": 0, **overrides}))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.shutdown()
        srv.server_close()
        srv.service.runtime.close()


def call(
    srv: EvomemHTTPServer, token: str | None, method: str, path: str, body: Any = None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, srv.url + path, json=body, headers=headers, timeout=10)


def retrieve(srv: EvomemHTTPServer, token: str | None, namespace: str, query: str) -> httpx.Response:
    return call(srv, token, "POST", "/v1/retrieve", {"query": query, "namespace": namespace})


# -- tokens ------------------------------------------------------------------------------------------
def test_tokens_are_stored_as_hashes_only(redis_client: redis.Redis) -> None:
    store = TokenStore(redis_client)
    token, record = store.create(["alpha", "beta"], "ci")
    assert record.namespaces == ("alpha", "beta") and record.name == "ci"
    everything = b"".join(
        k + b"".join(redis_client.hgetall(k).keys()) + b"".join(redis_client.hgetall(k).values())
        for k in redis_client.scan_iter()
        if redis_client.type(k) == b"hash"
    )
    assert token.encode() not in everything and record.id.encode() in everything
    assert store.lookup(token) == record and store.lookup(token + "x") is None
    assert [r.id for r in store.list()] == [record.id]
    with pytest.raises(InvalidEventError):
        store.create(["{bad}"])
    with pytest.raises(InvalidEventError):
        store.create([])


def test_run_time_tokens_through_the_cli_and_the_service(cli: Any, make_service: Any) -> None:
    code, out = cli("tokens", "create", "-n", "alpha", "--name", "agent-a", "--json")
    assert code == 0
    created = json.loads(out)
    alpha = created["token"]
    srv = make_service(tenancy_cache_s=0.2)  # no EVOMEM_TOKENS: a run-time token closes the service
    assert retrieve(srv, None, "alpha", "q").status_code == 401
    assert retrieve(srv, alpha, "alpha", "q").status_code == 200
    assert retrieve(srv, alpha, "beta", "q").status_code == 403

    # made while the service runs: taken up without a restart
    code, out = cli("tokens", "create", "-n", "beta")
    beta = out.strip()
    assert code == 0 and beta.startswith("emk_")
    wait_for(lambda: retrieve(srv, beta, "beta", "q").status_code == 200, WAIT_S, "the new token to work")
    assert retrieve(srv, beta, "alpha", "q").status_code == 403

    code, out = cli("tokens", "list")
    assert created["id"] in out and "agent-a" in out and alpha not in out
    assert cli("tokens", "revoke", created["id"]) == (0, f"revoked {created['id']}\n")
    wait_for(
        lambda: retrieve(srv, alpha, "alpha", "q").status_code == 401, WAIT_S, "the revoked token to fail"
    )
    assert retrieve(srv, beta, "beta", "q").status_code == 200


def test_a_service_started_open_closes_when_a_token_is_made_and_stays_closed(
    cli: Any, make_service: Any
) -> None:
    srv = make_service(tenancy_cache_s=0.2)
    assert retrieve(srv, None, "alpha", "q").status_code == 200  # open, loopback only
    _, out = cli("tokens", "create", "--all")
    token = out.strip()
    wait_for(lambda: retrieve(srv, None, "alpha", "q").status_code == 401, WAIT_S, "the service to close")
    assert retrieve(srv, token, "alpha", "q").status_code == 200
    token_id = json.loads(cli("tokens", "list", "--json")[1])[0]["id"]
    cli("tokens", "revoke", token_id)
    wait_for(lambda: retrieve(srv, token, "alpha", "q").status_code == 401, WAIT_S, "the token to be revoked")
    assert retrieve(srv, None, "alpha", "q").status_code == 401  # never open again


def test_a_run_time_token_lets_the_service_listen_beyond_loopback(
    cli: Any, settings: Settings, redis_client: redis.Redis
) -> None:
    from evomem.errors import ConfigError

    with pytest.raises(ConfigError, match="only listens on loopback"):
        build_server(settings.model_copy(update={"http_port": 0, "http_host": "0.0.0.0"}))
    cli("tokens", "create", "-n", "alpha")
    srv = build_server(settings.model_copy(update={"http_port": 0, "http_host": "0.0.0.0"}))
    srv.server_close()
    srv.service.runtime.close()


# -- per-namespace settings ------------------------------------------------------------------------
def _learn(mem: Memory, namespace: str, texts: list[str], query: str) -> list[str]:
    for text in texts:
        mem.report(None, status="resolved", namespace=namespace, query=query, proposed_insight=text)
    mem.consolidate()
    return sorted(mem.graph.insight_ids(namespace))


def test_namespace_settings_take_effect_in_retrieval_over_http(cli: Any, make_service: Any) -> None:
    srv = make_service(tokens=_secret("tok=*"), tenancy_cache_s=0.2)
    mem = Memory(srv.service.runtime)
    query = "Verify: Mohra is a car"
    lessons = ["Check the vehicle class.", "Read the whole claim.", "Look up the make."]
    assert cli("settings", "set", "beta", "archive_ratio=10")[0] == 0  # a harm keeps beta's insights active
    for ns in ("alpha", "beta"):
        _learn(mem, ns, lessons, query)

    def served(ns: str) -> list[dict[str, Any]]:
        response = retrieve(srv, "tok", ns, query)
        assert response.status_code == 200, response.text
        insights: list[dict[str, Any]] = response.json()["insights"]
        return insights

    assert len(served("alpha")) == len(served("beta")) == 3
    code, out = cli("settings", "set", "alpha", "budget=1", "lambda=0")
    assert code == 0 and "budget=1" in out and "lambda=0.0" in out
    wait_for(lambda: len(served("alpha")) == 1, WAIT_S, "alpha's budget to apply")
    assert len(served("beta")) == 3  # another namespace keeps the global settings

    # λ: one harm equal to its one help holds beta's top insight back (r = s − λc = 0) until λ is 0 there
    top = served("beta")[0]
    mem.report(None, status="failed", namespace="beta", query=query, insight_feedback={top["id"]: "harmful"})
    mem.consolidate()
    assert mem.insight(top["id"]).state == "active"  # archive_ratio=10 in beta: not archived for one harm
    assert top["id"] not in [i["id"] for i in served("beta")]
    cli("settings", "set", "beta", "lambda=0")

    def back() -> dict[str, Any] | None:
        return next((i for i in served("beta") if i["id"] == top["id"]), None)

    wait_for(lambda: back() is not None, WAIT_S, "λ=0 to drop the conflict penalty")
    again = back()
    assert again is not None and again["conflict"] == 1 and again["score"] == pytest.approx(top["score"])

    assert cli("settings", "unset", "alpha", "budget")[0] == 0
    wait_for(lambda: len(served("alpha")) == 3, WAIT_S, "alpha back to the global budget")
    code, out = cli("settings", "overrides", "--json")
    assert json.loads(out) == {"alpha": {"lambda": 0.0}, "beta": {"lambda": 0.0, "archive_ratio": 10.0}}
    assert cli("settings", "set", "alpha", "budget=0")[0] == 2  # bounds as the global setting's
    assert cli("settings", "set", "alpha", "operations=add+keep")[0] == 2  # not per namespace


def test_settings_show_gives_each_value_its_source_by_section(
    cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default, environment (a secret masked) and, for a namespace, what it overrides."""
    monkeypatch.setenv("EVOMEM_TOP_K", "7")
    monkeypatch.setenv("EVOMEM_TOKEN", "s3cret-value")
    assert cli("settings", "set", "fever", "budget=4")[0] == 0
    code, out = cli("settings", "show", "fever", "--json")
    assert code == 0 and "s3cret-value" not in out
    shown = json.loads(out)
    retrieval = shown["sections"]["retrieval"]
    assert retrieval["top_k"] == {"env": "EVOMEM_TOP_K", "value": 7, "source": "environment (EVOMEM_TOP_K)"}
    assert retrieval["budget"] == {"env": "EVOMEM_BUDGET", "value": 4, "source": "namespace fever"}
    assert retrieval["hops"]["source"] == "default"
    assert shown["sections"]["service"]["token"]["value"] == "********"
    assert list(shown["sections"]) == list(SECTIONS)
    code, text = cli("settings", "show")
    assert code == 0 and "s3cret-value" not in text
    retrieval_block = text.split("\nRetrieval\n")[1].split("\n\n")[0]
    assert "EVOMEM_TOP_K" in retrieval_block and "environment (EVOMEM_TOP_K)" in retrieval_block
    assert "namespace fever" not in text  # the global view: no namespace's overrides


def test_namespace_archive_policy_takes_effect_in_worker_consolidation(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """The workers' consolidation reads each event's namespace's archive policy and ratio."""
    from evomem.runtime import open_worker

    query = "Verify: Mohra is a car"
    NamespaceSettings(redis_client, settings).set("strict", {"archive_policy": "immediate"})
    NamespaceSettings(redis_client, settings).set("lenient", {"archive_ratio": 10})
    with Memory.open(settings) as mem:
        ids = {ns: _learn(mem, ns, ["Check the vehicle class."], query)[0] for ns in ("strict", "lenient")}
        for ns in ("strict", "lenient"):
            mem.report(
                None, status="failed", namespace=ns, query=query, insight_feedback={ids[ns]: "harmful"}
            )
    worker = open_worker(settings)
    try:
        assert worker.drain(budget_s=30, block_ms=0).applied == 2
    finally:
        worker.close()
    with Memory.open(settings, index=False) as mem:
        assert mem.insight(ids["strict"]).state == "archived"
        lenient = mem.insight(ids["lenient"])
        assert lenient.state == "active" and len(lenient.negative) == 1  # ρ=10: one harm is not enough


def test_the_resolver_caches_and_survives_redis_errors(settings: Settings, redis_client: redis.Redis) -> None:
    store = NamespaceSettings(redis_client, settings, ttl_s=3600)
    assert store("alpha") is settings  # no override: the global object itself
    other = NamespaceSettings(redis_client, settings, ttl_s=3600)
    other.set("alpha", {"budget": 7})
    assert store("alpha").budget == settings.budget  # cached until its TTL (another process's view)
    assert other("alpha").budget == 7  # the writer's own cache is dropped at once
    store.forget()
    assert store("alpha").budget == 7

    class Broken:
        def hgetall(self, key: str) -> Any:
            raise redis.ConnectionError("down")

    down = NamespaceSettings(Broken(), settings, ttl_s=0)
    assert down("alpha") is settings


def _secret(value: str) -> Any:
    from pydantic import SecretStr

    return SecretStr(value)


def test_the_caches_hold_at_most_their_setting_and_keep_the_most_recently_used(
    settings: Settings, redis_client: redis.Redis
) -> None:
    bounded = settings.model_copy(update={"tenancy_cache_entries": 3})
    resolver = NamespaceSettings(redis_client, bounded, ttl_s=3600)
    tokens = TokenStore(redis_client, ttl_s=3600, max_entries=3)
    made = [tokens.create([f"ns{i}"])[0] for i in range(10)]
    for i in range(10):
        resolver(f"ns{i}")
        tokens.lookup(made[i])
        resolver("ns0")  # used all along: never the one to go
        tokens.lookup(made[0])
    assert len(resolver._cache) == 3 and len(tokens._cache) == 3
    misses = (resolver.misses, tokens.misses)
    resolver("ns0"), resolver("ns9")
    tokens.lookup(made[0]), tokens.lookup(made[9])
    assert (resolver.misses, tokens.misses) == misses  # both still held
    resolver("ns1")
    tokens.lookup(made[1])
    assert (resolver.misses, tokens.misses) == (misses[0] + 1, misses[1] + 1)  # evicted long ago
