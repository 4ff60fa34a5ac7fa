"""The MCP server through the SDK's own client: in process, over stdio (a real ``evomem mcp``
process) and over streamable HTTP; tokens and namespaces as in the HTTP service."""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import redis
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from pydantic import SecretStr

from evomem import Memory, Settings
from evomem.mcp.mcp_server import LocalToolBackend, MCPHTTPServer, build
from evomem.service.auth import OPEN

TOOLS = {
    "retrieve_insights",
    "report_outcome",
    "inspect_insight",
    "event_state",
    "revert_edits",
    "pin_insight",
    "list_reviews",
    "review_edit",
}
TOKENS = "tok-alpha=alpha;tok-beta=beta"
WAIT_S = 60.0


async def call(client: Client, tool: str, **args: Any) -> CallToolResult:
    return await client.call_tool(tool, args)


async def ok(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await call(client, tool, **args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, **args: Any) -> str:
    result = await call(client, tool, **args)
    assert result.is_error, result.structured_content
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


async def eventually(check: Any, what: str) -> Any:
    """Poll an async check until it returns something truthy (the background consolidation)."""
    with anyio.fail_after(WAIT_S):
        while True:
            value = await check()
            if value:
                return value
            await anyio.sleep(0.05)
    raise AssertionError(what)  # pragma: no cover


async def learn_and_revise(client: Client, namespace: str, settle: Any, *, query_texts: bool = True) -> str:
    """The whole loop an agent runs: report a lesson, retrieve it, judge it partial, inspect, ask
    whether the report was applied; the id of that report's event.
    (Through a remote service the evidence is shown as query ids: the HTTP API has no query texts.)"""
    task = f"Verify: Mohra is a car ({namespace})"
    tools = await client.list_tools()
    assert {t.name for t in tools.tools} == TOOLS
    assert all(t.output_schema is not None for t in tools.tools)

    await ok(
        client, "report_outcome", status="resolved", query=task, proposed_insight="Check the vehicle class."
    )
    await settle()

    async def served() -> dict[str, Any] | None:
        r = await ok(client, "retrieve_insights", query=task)
        return r if r["insights"] else None

    r = await eventually(served, "the proposed insight to be served")
    assert r["namespace"] == namespace
    (insight,) = r["insights"]
    assert insight["text"] == "Check the vehicle class." and insight["support"] == 1
    assert f"[{insight['id']}] Check the vehicle class." in r["prompt"]  # rendered with its id

    # a report may name only the retrieval: its query, namespace and served ids are known
    reported = await ok(
        client,
        "report_outcome",
        status="failed",
        retrieval_id=r["retrieval_id"],
        verdicts=[
            {"insight_id": insight["id"], "verdict": "partial", "revised_text": "Check class and make."}
        ],
    )
    assert reported["namespace"] == namespace
    await settle()

    async def revised() -> dict[str, Any] | None:
        view = await ok(client, "inspect_insight", insight_id=insight["id"])
        return view if view["state"] == "archived" else None

    view = await eventually(revised, "the partial verdict to revise the insight")
    assert [s["state"] for s in view["lineage"]] == ["archived", "active"]
    assert view["lineage"][1]["text"] == "Check class and make."
    assert [h["op"] for h in view["history"]] == ["ADD", "REVISE"]
    assert view["helped"] == 1 and view["harmed"] == 1
    assert len(view["harmed_queries"]) == 1 and (view["harmed_queries"] == [task] or not query_texts)

    text = await refused(
        client,
        "report_outcome",
        status="failed",
        query=task,
        verdicts=[{"insight_id": insight["id"], "verdict": "partial"}],
    )
    assert "revised_text" in text

    async def applied() -> dict[str, Any] | None:
        state = await ok(client, "event_state", event_id=reported["event_id"])
        return state if state["state"] == "applied" else None

    state = await eventually(applied, "the partial verdict's event to be applied")
    assert [(e["op"], e["outcome"]) for e in state["edits"]] == [("REVISE", "revised")]
    assert "no event" in await refused(client, "event_state", event_id="not-an-event")

    # the operator's tools: the revision undone, the insight pinned
    undone = await ok(client, "revert_edits", event_id=reported["event_id"], reason="a wrong revision")
    assert undone["namespace"] == namespace and undone["action"] == "revert"
    await settle()

    async def restored() -> dict[str, Any] | None:
        view = await ok(client, "inspect_insight", insight_id=insight["id"])
        return view if view["state"] == "active" else None

    view = await eventually(restored, "the revert to restore the insight")
    assert view["history"][-1]["op"] == "REVERT" and "a wrong revision" in view["history"][-1]["note"]
    await ok(client, "pin_insight", insight_id=insight["id"], reason="checked by hand")
    await settle()

    async def pinned() -> dict[str, Any] | None:
        view = await ok(client, "inspect_insight", insight_id=insight["id"])
        return view if view["history"][-1]["op"] == "PIN" else None

    await eventually(pinned, "the pin to be applied")
    return str(reported["event_id"])


# -- in process ------------------------------------------------------------------------------------
def test_in_process_client_lists_retrieves_reports_and_inspects(
    settings: Settings, redis_client: redis.Redis
) -> None:
    backend = LocalToolBackend(Memory.open_local(settings), "fever", consolidate=False)

    async def run() -> None:
        async def settle() -> None:
            await anyio.to_thread.run_sync(backend.local.consolidate)

        async with Client(build(backend, OPEN)) as client:
            await learn_and_revise(client, "fever", settle)
            assert "no insight" in await refused(client, "inspect_insight", insight_id="no-such-insight")
            assert "namespace" in await refused(client, "retrieve_insights", query="x", namespace="{bad}")

    try:
        anyio.run(run)
    finally:
        backend.close()


# -- over stdio --------------------------------------------------------------------------------------
def _stdio(tmp_path: Path, redis_url: str, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "evomem.cli", "mcp"],
        env={
            "EVOMEM_DATA_DIR": str(tmp_path / "data"),
            "EVOMEM_REDIS_URL": redis_url,
            "EVOMEM_EMBEDDER": "hashing",
            **env,
        },
        cwd=str(tmp_path),
    )


async def _nothing() -> None:
    return None


def test_stdio_process_serves_its_token_namespace_only(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    """``evomem mcp`` as a desktop client launches it: tools over stdin/stdout, consolidation in the
    process, and the process bound to the namespaces of its own token."""
    params = _stdio(tmp_path, redis_url, EVOMEM_TOKENS=TOKENS, EVOMEM_TOKEN="tok-alpha")

    async def run() -> None:
        async with Client(params) as client:
            await learn_and_revise(client, "alpha", _nothing)
            text = await refused(
                client, "retrieve_insights", query="Verify: Mohra is a car", namespace="beta"
            )
            assert "may not use namespace 'beta'" in text
            text = await refused(client, "report_outcome", status="resolved", query="x", namespace="beta")
            assert "may not use namespace 'beta'" in text
            text = await refused(client, "revert_edits", since="2020-01-01T00:00:00+00:00", namespace="beta")
            assert "may not use namespace 'beta'" in text
            text = await refused(client, "list_reviews", namespace="beta")
            assert "may not use namespace 'beta'" in text
            text = await refused(client, "review_edit", review_id="r-1", approve=True, namespace="beta")
            assert "may not use namespace 'beta'" in text

    anyio.run(run)


def test_stdio_process_refuses_to_start_with_a_token_it_does_not_know(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    import subprocess

    params = _stdio(tmp_path, redis_url, EVOMEM_TOKENS=TOKENS, EVOMEM_TOKEN="tok-gamma")
    done = subprocess.run(
        [params.command, *params.args],
        env={**params.env, "PATH": "/usr/bin:/bin"} if params.env else None,
        cwd=params.cwd,
        input=b"",
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert b"EVOMEM_TOKEN is not one of EVOMEM_TOKENS" in done.stderr
    assert b"tok-gamma" not in done.stderr and b"tok-alpha" not in done.stderr


# -- over streamable HTTP ------------------------------------------------------------------------
@pytest.fixture
def mcp_http(settings: Settings, redis_client: redis.Redis) -> Iterator[MCPHTTPServer]:
    server = MCPHTTPServer(settings.model_copy(update={"tokens": SecretStr(TOKENS)}), 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join(timeout=15)
    server.close()


@asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def test_streamable_http_tools_and_tenancy(mcp_http: MCPHTTPServer) -> None:
    async def run() -> None:
        async with http_client(mcp_http.url, "tok-alpha") as alpha:
            event_id = await learn_and_revise(alpha, "alpha", _nothing)
            r = await ok(alpha, "retrieve_insights", query="Verify: Mohra is a car (alpha)")
            insight_id = r["insights"][0]["id"]
            before = await ok(alpha, "inspect_insight", insight_id=insight_id)
        async with http_client(mcp_http.url, "tok-beta") as beta:
            # beta's own namespace works; alpha's cannot be read, written or inspected
            assert (await ok(beta, "retrieve_insights", query="anything"))["namespace"] == "beta"
            text = await refused(beta, "retrieve_insights", query="Verify: Mohra is a car", namespace="alpha")
            assert "may not use namespace 'alpha'" in text
            assert "no insight" in await refused(beta, "inspect_insight", insight_id=insight_id)
            assert "no event" in await refused(beta, "event_state", event_id=event_id)
            text = await refused(beta, "report_outcome", status="failed", retrieval_id=r["retrieval_id"])
            assert "may not use namespace 'alpha'" in text
            text = await refused(
                beta,
                "report_outcome",
                status="failed",
                query="x",
                namespace="alpha",
                verdicts=[{"insight_id": insight_id, "verdict": "harmful"}],
            )
            assert "may not use namespace 'alpha'" in text
        mcp_http.backend.memory.consolidate()
        assert (
            mcp_http.backend.inspect(OPEN, insight_id).model_dump(mode="json") == before
        )  # beta changed nothing

    anyio.run(run)


def test_streamable_http_refuses_missing_unknown_and_borrowed_tokens(mcp_http: MCPHTTPServer) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(timeout=30) as http:
        for auth in ({}, {"Authorization": "Bearer tok-gamma"}, {"Authorization": "Basic tok-alpha"}):
            response = http.post(mcp_http.url, json=init, headers={**headers, **auth})
            assert response.status_code == 401, response.text
            assert response.headers["www-authenticate"].startswith("Bearer")
        opened = http.post(mcp_http.url, json=init, headers={**headers, "Authorization": "Bearer tok-alpha"})
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        borrowed = http.post(
            mcp_http.url,
            json=listing,
            headers={**headers, "Authorization": "Bearer tok-beta", "Mcp-Session-Id": session},
        )
        assert borrowed.status_code == 404  # a session answers only the token that opened it


def test_a_run_time_token_reaches_its_namespace_through_mcp(mcp_http: MCPHTTPServer) -> None:
    from evomem.adapters.redis.api_tokens import TokenStore

    token, _ = TokenStore(mcp_http.backend.memory.redis).create(["gamma"])  # type: ignore[union-attr]

    async def run() -> None:
        async with http_client(mcp_http.url, token) as gamma:
            assert (await ok(gamma, "retrieve_insights", query="anything"))["namespace"] == "gamma"
            text = await refused(gamma, "retrieve_insights", query="anything", namespace="alpha")
            assert "may not use namespace 'alpha'" in text

    anyio.run(run)


def test_stdio_process_against_a_remote_service(
    tmp_path: Path, settings: Settings, redis_client: redis.Redis
) -> None:
    """``EVOMEM_URL`` set: the MCP server is a client of the retrieval service, which checks the
    process's ``EVOMEM_TOKEN``; the namespace is bound by ``EVOMEM_MCP_NAMESPACE``."""
    from evomem.service.server import build_server

    srv = build_server(settings.model_copy(update={"tokens": SecretStr(TOKENS), "http_port": 0}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "evomem.cli", "mcp"],
        env={
            "EVOMEM_URL": srv.url,
            "EVOMEM_TOKEN": "tok-alpha",
            "EVOMEM_MCP_NAMESPACE": "alpha",
            "EVOMEM_DATA_DIR": str(tmp_path / "elsewhere"),
            "EVOMEM_EMBEDDER": "hashing",
        },
        cwd=str(tmp_path),
    )

    async def settle() -> None:
        await anyio.to_thread.run_sync(Memory(srv.service.runtime).consolidate)

    async def run() -> None:
        async with Client(params) as client:
            await learn_and_revise(client, "alpha", settle, query_texts=False)
            text = await refused(client, "retrieve_insights", query="anything", namespace="beta")
            assert "may not use namespace 'beta'" in text  # bound to alpha (the service checks the token too)

    try:
        anyio.run(run)
    finally:
        srv.shutdown()
        srv.server_close()
        srv.service.runtime.close()
