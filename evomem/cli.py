"""The ``evomem`` command line: run the demo, query and feed a memory, look inside it."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import textwrap
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from evomem.errors import EvomemError, InvalidEventError, StoreLockedError
from evomem.logs import configure_logging
from evomem.ops import progress
from evomem.results import InsightView
from evomem.sdk import Memory
from evomem.settings import Settings
from schemas import TaskEvent

Handler = Callable[[argparse.Namespace], int]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class CommandError(EvomemError):
    """A command cannot do what it was asked (a file it cannot read, ...): said in one line."""


def _out(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def _open(index: bool = False) -> Memory:
    """Most commands need the system of record only, so they work beside a running retrieval side
    (which holds the embedded Qdrant store)."""
    return Memory.open_local(Settings(), index=index)


def _client(index: bool) -> Memory:
    """The agent-facing commands go through the service when EVOMEM_URL is set."""
    return Memory.open(Settings(), index=index)


# -- retrieve / report / consolidate ------------------------------------------------------------
def cmd_retrieve(args: argparse.Namespace) -> int:
    with _client(index=True) as mem:
        r = mem.retrieve(args.query, args.namespace, top_k=args.top_k, budget=args.budget)
    if args.json:
        _out(
            {
                "retrieval_id": r.id,
                "namespace": r.namespace,
                "similar_queries": list(r.similar),
                "insights": [vars_of(i) for i in r.insights],
            }
        )
        return 0
    print(f"retrieval {r.id}  ({len(r.similar)} similar queries)")
    if not r.insights:
        print("no insight to serve yet")
    for n, i in enumerate(r.insights, 1):
        print(f"{n}. [{i.score:+.1f} = {i.support} support − λ·{i.conflict} conflict] {i.text}")
        print(f"   {i.id}")
    return 0


def vars_of(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__slots__}


def _feedback(pairs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        insight_id, sep, verdict = pair.partition("=")
        if not sep:
            raise InvalidEventError(
                "insight_feedback", f"expected ID=helpful|harmful|partial:TEXT, got {pair!r}"
            )
        if verdict.startswith("partial:"):
            out[insight_id] = {"verdict": "partial", "revised_text": verdict[len("partial:") :]}
        else:
            out[insight_id] = verdict
    return out


def cmd_report(args: argparse.Namespace) -> int:
    with _client(index=False) as mem:
        if args.file:
            raw = _read_text(args.file)
            try:
                event = TaskEvent.model_validate_json(raw)
            except ValueError as exc:
                from evomem.errors import reason_of

                reason, fld = reason_of(exc)
                raise InvalidEventError(fld or "event", reason) from None
            event_id = mem.report(event)
        else:
            event_id = mem.report(
                None,
                status=args.status,
                namespace=args.namespace,
                query=args.query,
                retrieval_id=args.retrieval_id,
                retrieved_insight_ids=args.insight or None,
                feedback=args.feedback,
                final_answer=args.final_answer,
                insight_feedback=_feedback(args.verdict) or None,
                proposed_insight=args.propose,
                trajectory=args.step or None,
            )
    print(event_id)
    return 0


def _read_text(name: str) -> str:
    """A file's text (``-``: standard input); unreadable or not UTF-8 is the user's error, said plainly."""
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(f"{name} is not UTF-8 text (byte {exc.start})") from None


def cmd_consolidate(args: argparse.Namespace) -> int:
    try:
        mem = _open(index=True)
    except StoreLockedError:  # the retrieval side holds the index and projects for us
        mem = _open()
    with mem:
        report = mem.consolidate(args.max)
    if args.json:
        _out(report.as_dict())
        return 0
    print(
        f"{report.events} events: {report.applied} applied, {report.replayed} already applied, "
        f"{report.dead_lettered} dead-lettered, {report.deferred} deferred"
    )
    for op in ("ADD", "KEEP", "ARCHIVE", "REVISE"):
        if report.operations.get(op):
            print(f"  {op:<8}{report.operations[op]}")
    if report.outcomes:
        print("  outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items())))
    return 0


# -- revert / pin / unpin ---------------------------------------------------------------------------
def cmd_revert(args: argparse.Namespace) -> int:
    since = None
    if args.since:
        try:
            since = datetime.fromisoformat(args.since)
        except ValueError:
            raise InvalidEventError(
                "since", "an ISO 8601 time with its zone, e.g. 2026-01-02T03:04:05+00:00"
            ) from None
    with _client(index=False) as mem:
        request_id = mem.revert(
            args.event_id,
            namespace=args.namespace,
            insight_id=args.insight,
            since=since,
            by=args.by,
            reason=args.reason,
            request_id=args.request_id,
        )
    print(request_id)
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    with _client(index=False) as mem:
        call = mem.pin if args.command == "pin" else mem.unpin
        print(
            call(
                args.insight_id,
                namespace=args.namespace,
                by=args.by,
                reason=args.reason,
                request_id=args.request_id,
            )
        )
    return 0


# -- review list / approve / reject ------------------------------------------------------------------
def cmd_review(args: argparse.Namespace) -> int:
    with _client(index=False) as mem:
        if args.action == "list":
            state = None if args.state == "all" else args.state
            items = mem.reviews(args.namespace, state=state)
            if args.json:
                _out([i.as_dict() for i in items])
                return 0
            for i in items:
                target = i.insight_id or i.new_id
                print(f"{i.review_id}  {i.state:8}  {i.op} {target}  (event {i.event_id}, held {i.held_at})")
                print(f"    why: {i.reason}")
                if i.text:
                    print(f"    text: {i.text}")
                if i.decided_by:
                    print(
                        f"    {i.state} by {i.decided_by} at {i.decided_at}"
                        + (f": {i.note}" if i.note else "")
                    )
            if not items:
                state = "" if args.state == "all" else f"{args.state} "
                print(f"no {state}edits held for review in {args.namespace}")
            return 0
        if not args.review_id:
            raise InvalidEventError("review_id", f"review {args.action} needs the id `review list` shows")
        call = mem.approve if args.action == "approve" else mem.reject
        print(
            call(
                args.review_id,
                namespace=args.namespace,
                by=args.by,
                reason=args.reason,
                request_id=args.request_id,
            )
        )
    return 0


# -- inspect / stats ------------------------------------------------------------------------------
def render_insight(view: InsightView, queries: dict[str, str]) -> str:
    n = view.node
    mark = "●" if n.active else "○"
    pinned = ", pinned" if n.pinned else ""
    lines = [f"{mark} {n.id}  [{n.state}{pinned}, v{n.version}, namespace {n.namespace}]"]
    lines += textwrap.wrap(n.text, 96, initial_indent="  “", subsequent_indent="   ")
    lines[-1] += "”"

    def evidence(label: str, ids: frozenset[str]) -> None:
        lines.append(f"  {label} ({len(ids)})")
        for q in sorted(ids)[:8]:
            lines.append(f"    · {queries.get(q, q)[:90]}")
        if len(ids) > 8:
            lines.append(f"    · … {len(ids) - 8} more")

    evidence("helped   Ω⁺", n.positive)
    evidence("harmed   Ω⁻", n.negative)
    if len(view.lineage) > 1:
        lines.append(
            "  lineage  " + " → ".join(("[" + i[:8] + "]") if i == n.id else i[:8] for i in view.lineage)
        )
    if view.edges:
        lines.append(
            f"  contextualised by {len(view.edges)} hyperedge(s): "
            + ", ".join(a[:8] for a, _ in view.edges[:6])
        )
    if view.history:
        lines.append("  history")
        for h in view.history[-12:]:
            extra = f" → {h.new_id[:8]}" if h.new_id and h.new_id != n.id else ""
            lines.append(f"    {h.at[:19]}  {h.op:<7} {h.outcome:<17} by {h.decided_by}{extra}")
            if h.note:
                lines.append(f"      {h.note[:110]}")
    return "\n".join(lines)


def cmd_event(args: argparse.Namespace) -> int:
    """The state of a reported event (through the service when EVOMEM_URL is set), as JSON."""
    with _client(index=False) as mem:
        _out(mem.event(args.event_id, args.namespace).model_dump(mode="json"))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    with _open() as mem:
        if args.insight_id:
            view = mem.insight(args.insight_id, args.namespace)
            if args.json:
                _out(
                    {
                        **view.node.model_dump(mode="json"),
                        "lineage": view.lineage,
                        "edges": view.edges,
                        "history": [vars_of(h) for h in view.history],
                    }
                )
                return 0
            ids = view.node.positive | view.node.negative
            queries = {q: node.text for q, node in mem.graph.queries(view.node.namespace, ids).items()}
            print(render_insight(view, queries))
            return 0
        nodes = mem.insights(args.namespace or "default", state=args.state)
    if args.json:
        _out([n.model_dump(mode="json") for n in nodes])
        return 0
    if not nodes:
        print(f"no insights in namespace {args.namespace or 'default'!r}")
    for n in sorted(nodes, key=lambda x: (not x.active, -len(x.positive), x.id)):
        mark = "●" if n.active else "○"
        print(f"{mark} {n.id}  +{len(n.positive):<4} −{len(n.negative):<4} v{n.version:<3} {n.text[:70]}")
    return 0


#: Newest dead letters ``evomem stats`` shows, and how much of each reason.
DEAD_LETTERS_SHOWN, DEAD_LETTER_CHARS = 3, 400


def cmd_stats(args: argparse.Namespace) -> int:
    with _open() as mem:
        stats = mem.stats()
        stats["llm"] = mem.runtime.llm_usage()
        # why events die, where an operator looks first: the newest reasons (with the model's answer)
        stats["recent_dead_letters"] = [
            {k: d[k] for k in ("id", "reason", "deliveries", "at")}
            for d in mem.stream.dlq(DEAD_LETTERS_SHOWN)
        ]
    if args.json:
        _out(stats)
        return 0
    e = stats["embedder"]
    print(
        f"embedder       {e['name']} (EMBEDDER={e['configured']}), cosine floor {e['floor']}"
        + (f", cache {e['cache']['hits']} hits / {e['cache']['misses']} misses" if e.get("cache") else "")
    )
    print(f"embedder why   {e['why']}")
    s = stats["stream"]
    print(f"events stream  length {s['length']}, pending {s['pending']}, dead letters {s['dead_letters']}")
    print(f"stream         lag {s['lag']} unread, {s['consumers']} consumer(s)")
    for name, lag in stats.get("projectors", {}).items():
        print(f"projector lag  {lag} change(s)  [{name}]")
    llm = stats.get("llm") or {}
    if llm.get("calls"):
        cost = llm.get("estimated_cost_usd")
        print(
            f"llm            {llm['calls']} calls, {llm['prompt_tokens']} prompt + "
            f"{llm['completion_tokens']} "
            f"completion tokens, {llm.get('prompt_tokens_per_event')} prompt tokens/event"
            + (f", ≈ ${cost:.4f} (estimate)" if cost is not None else "")
        )
        for model, m in (llm.get("models") or {}).items():
            print(f"  {model:<24} {m['prompt_tokens']} + {m['completion_tokens']} tokens")
        if llm.get("failures"):
            print("  failed tries   " + ", ".join(f"{k} {v}" for k, v in sorted(llm["failures"].items())))
    tiers = (stats.get("index") or {}).get("tiers")
    if tiers:
        print(
            f"index tiers    {tiers['shared_namespaces']} namespace(s) in {tiers['shared_shards']} shared "
            f"shard(s), {tiers['promoted_namespaces']} promoted to their own "
            f"({tiers['own_shards_open']} open; promoted at {tiers['promote_at']} queries)"
        )
    for d in stats["recent_dead_letters"]:
        print(f"dead letter    {d['id']}  {d['reason'][:DEAD_LETTER_CHARS]}")
    for ns, d in stats["namespaces"].items():
        print(
            f"namespace {ns:<16} {d['queries']} queries, {d['insights']} insights "
            f"({d['active']} active, {d['archived']} archived)"
        )
        recent = d.get("recent") or {}
        if recent.get("events"):
            share = recent["harmful_share"]
            print(
                f"  last {recent['events']} events: {recent['judged']} insights judged, "
                + (f"{100 * share:.1f}% found harmful where served" if share is not None else "none judged")
                + f", {recent['retired_per_100_events']:.1f} archived or revised per 100 events"
            )
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    """Rebuild the embedded Qdrant store with the embedder configured now, from Redis; resumable."""
    from evomem.runtime import reindex

    bar: progress.Progress | None = None

    def shown(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = progress.Progress(None, "re-embedding changes", total, progress.wanted(args.progress))
        bar.update(done)

    result = reindex(Settings(), shown, force=args.force)
    if bar is not None:
        bar.done()
    if args.json:
        _out(result)
    elif result["up_to_date"]:
        print(f"the store is built by {result['embedder']} already: nothing to do (--force rebuilds it)")
    else:
        print(
            f"reindexed with {result['embedder']}: {result['changes']} changes, {result['queries']} "
            f"queries and {result['insights']} insights in {result['seconds']} s"
            + (" (resumed)" if result["resumed"] else "")
        )
    return 0


# -- the pipeline: workers, the retrieval side, dead letters ------------------------------------
def cmd_worker(args: argparse.Namespace) -> int:
    """A Celery consolidation worker (``celery -A workers.app worker`` with the right options)."""
    settings = Settings()
    from evomem.runtime import broker_redis_url, hold_redis

    # the embedded Redis this worker may start is held until it stops, then stopped if nobody else
    # uses it (it was left running before)
    _, release = hold_redis(settings)
    try:
        return _run_worker(args, settings, broker_redis_url)
    finally:
        release()


def _run_worker(args: argparse.Namespace, settings: Settings, broker_redis_url: Any) -> int:
    import os

    broker_redis_url(settings)  # a cluster without a broker is refused here, not by Celery's fallback
    port = settings.worker_metrics_port if args.metrics_port is None else args.metrics_port
    if port is not None:
        _serve_worker_metrics(settings, port)  # first: it names the metric files' directory
    from workers.app import QUEUE, app

    argv = [
        "worker",
        "--concurrency",
        str(args.concurrency or settings.worker_concurrency),
        "--queues",
        QUEUE,
        "--without-mingle",
        "--without-gossip",
        "--hostname",
        f"evomem-{os.getpid()}@%h",
        "--loglevel",
        args.log_level,
    ]
    app.worker_main(argv)
    return 0


def _serve_worker_metrics(settings: Settings, port: int) -> None:
    import atexit
    import shutil

    from evomem.ops import consolidation_metrics
    from evomem.runtime import connect_redis, fleet_reader

    directory = consolidation_metrics.prepare_multiprocess(settings)
    atexit.register(shutil.rmtree, directory, True)
    registry = consolidation_metrics.scrape_registry(
        fleet_reader(connect_redis(settings), settings), directory
    )
    server, _ = consolidation_metrics.serve(registry, settings.http_host, port)
    print(f"worker metrics on http://{settings.http_host}:{server.server_port}/metrics", flush=True)


def cmd_project(args: argparse.Namespace) -> int:
    """Hold the Qdrant store and keep it in step with Redis until stopped (SIGTERM/SIGINT)."""
    import signal
    import threading

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with _open(index=True) as mem:
        assert mem.projector is not None
        print(f"projecting into {mem.index.identity if mem.index else '?'}", flush=True)
        mem.projector.follow(stop)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """The retrieval service: HTTP API, and the projector for the store it holds."""
    from evomem.service.processes import serve_any

    overrides: dict[str, Any] = {}
    if args.host:
        overrides["http_host"] = args.host
    if args.port is not None:
        overrides["http_port"] = args.port
    if args.workers is not None:
        overrides["http_workers"] = args.workers
    serve_any(Settings(**overrides))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """The Model Context Protocol server, over stdio (the default) or streamable HTTP."""
    try:
        from evomem.mcp import mcp_server as server
    except ImportError as exc:
        raise CommandError(
            f"evomem mcp needs the mcp extra: pip install 'evograph-mem[mcp]' ({exc.name} is missing)"
        ) from None
    overrides: dict[str, Any] = {}
    if args.host:
        overrides["http_host"] = args.host
    if args.namespace:
        overrides["mcp_namespace"] = args.namespace
    settings = Settings(**overrides)
    if args.http:
        server.serve_http(settings, settings.mcp_port if args.port is None else args.port)
    else:
        server.serve_stdio(settings)
    return 0


def cmd_tokens(args: argparse.Namespace) -> int:
    """API tokens made at run time; the service and the MCP server pick them up without a restart."""
    from dataclasses import asdict

    with _open() as mem:
        store = mem.runtime.tokens
        if args.action == "create":
            namespaces = ["*"] if args.all else args.namespace
            token, record = store.create(namespaces, args.name or "")
            if args.json:
                _out({"token": token, **asdict(record)})
            else:
                print(token)
                sys.stderr.write(
                    f"token {record.id} for {', '.join(record.namespaces)}: "
                    "shown once, only its hash is kept\n"
                )
        elif args.action == "list":
            records = store.list()
            if args.json:
                _out([asdict(r) for r in records])
            for r in records if not args.json else []:
                shown = f"{r.id}  {r.created_at}  {','.join(r.namespaces):<24} {r.name}"
                print(_printable(shown))
            if not records and not args.json:
                print("no run-time tokens (EVOMEM_TOKENS are not listed)")
        else:
            if not args.ids:
                raise CommandError("revoke which token? give its id (evomem tokens list)")
            for token_id in args.ids:
                print(f"revoked {store.revoke(token_id).id}")
    return 0


def cmd_settings(args: argparse.Namespace) -> int:
    """``show``: every setting's effective value and its source; ``set``/``unset``/``overrides``: the
    settings a namespace overrides (λ, budget, scoring, archive policy and ratio, k, hops)."""
    from evomem.settings import OVERRIDABLE

    if args.action == "show":
        return _show_settings(args)
    with _open() as mem:
        store = mem.namespace_settings
        if args.action == "set":
            values: dict[str, Any] = {}
            for pair in args.values:
                name, sep, value = pair.partition("=")
                if not sep:
                    raise InvalidEventError(
                        name, f"expected NAME=VALUE with NAME one of {', '.join(OVERRIDABLE)}"
                    )
                values[name.strip()] = value.strip()
            store.set(_required_namespace(args), values)
        elif args.action == "unset":
            store.unset(_required_namespace(args), args.values)
        shown = {args.namespace: store.get(args.namespace)} if args.namespace else store.all()
        if args.json:
            _out({ns: o.model_dump(exclude_none=True, by_alias=True) for ns, o in shown.items()})
            return 0
        if not shown:
            print("no namespace overrides a setting")
        for ns, overrides in shown.items():
            effective = store(ns)
            fields = overrides.model_dump(exclude_none=True, by_alias=True)
            print(
                f"namespace {ns}: " + (", ".join(f"{k}={v}" for k, v in fields.items()) or "global settings")
            )
            print(
                f"  effective: lambda={effective.lambda_} budget={effective.budget} "
                f"top_k={effective.top_k} hops={effective.hops} scoring={effective.scoring} "
                f"archive_policy={effective.archive_policy} archive_ratio={effective.archive_ratio}"
            )
    return 0


def _show_settings(args: argparse.Namespace) -> int:
    """The effective settings, by section; a namespace's overrides need the store, the rest not."""
    import os

    from evomem.settings import SECTION_TITLES, effective_values

    settings = Settings()
    overrides = None
    if args.namespace:
        with _open() as mem:
            overrides = mem.namespace_settings.get(args.namespace)
    values = effective_values(settings, os.environ, overrides, args.namespace)
    if args.json:
        sections: dict[str, dict[str, Any]] = {}
        for v in values:
            entry = {"env": v.env, "value": v.value, "source": v.source}
            sections.setdefault(v.section, {})[v.name] = entry
        _out({"namespace": args.namespace, "sections": sections})
        return 0
    width = max(len(v.env) for v in values)
    section = None
    for v in values:
        if v.section != section:
            section = v.section
            print(("" if v is values[0] else "\n") + SECTION_TITLES[section])
        shown = "(unset)" if v.value is None else str(v.value)
        print(f"  {v.env:<{width}}  {shown:<28} {v.source}")
    return 0


def _required_namespace(args: argparse.Namespace) -> str:
    from evomem.sdk.calls import check_namespace

    if not args.namespace:
        raise CommandError(f"evomem settings {args.action} needs a namespace")
    return check_namespace(args.namespace)  # never `*`, `{x}` or a line break


def _printable(text: str) -> str:
    """``text`` with its control characters escaped: a name cannot move the cursor or forge a line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def cmd_dlq(args: argparse.Namespace) -> int:
    with _open() as mem:
        if args.action == "list":
            letters = mem.stream.dlq(args.count)
            if args.json:
                _out(letters)
            for d in letters if not args.json else []:
                print(f"{d['id']}  deliveries {d['deliveries']:<3} {d['reason'][:100]}")
            if not letters and not args.json:
                print("no dead letters")
        elif args.action == "show":
            entry = mem.stream.dead_letter_entry(args.ids[0]) if args.ids else None
            if entry is None:
                sys.stderr.write("evomem: no such dead letter\n")
                return 1
            with contextlib.suppress(ValueError):
                entry["event"] = json.loads(entry["event"])
            _out(entry)
        else:
            ids = [d["id"] for d in mem.stream.dlq(1_000_000)] if args.all else args.ids
            replayed = mem.stream.replay(ids)
            print(f"replayed {len(replayed)} event(s)")
    return 0


def cmd_changes(args: argparse.Namespace) -> int:
    """The changes the projector skipped (their data could never apply): list, replay, drop."""
    with _open() as mem:
        feed = mem.runtime.changes
        if args.action == "list":
            letters = feed.dead_changes(args.count)
            if args.json:
                _out(letters)
            for d in letters if not args.json else []:
                print(f"{d['dead_id']}  {d['kind']} {d['ns']}/{d['id']}  {d['reason'][:100]!r}")
            if not letters and not args.json:
                print("no skipped changes")
            return 0
        ids = [d["dead_id"] for d in feed.dead_changes(1_000_000)] if args.all else args.ids
        if args.action == "replay":
            print(f"replayed {feed.replay_dead(ids)} change(s)")
        else:
            print(f"dropped {feed.drop_dead(ids)} change(s)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from evomem.pipeline.export import export, write_jsonl

    with _open() as mem:
        namespaces = args.namespace or sorted(mem.graph.namespaces())
        records = export(mem.graph, namespaces)
        if progress.wanted(args.progress):
            total = 1 + sum(
                len(mem.graph.query_ids(ns)) + len(mem.graph.insight_ids(ns)) for ns in namespaces
            )
            records = progress.iterate(records, "export", total, True)
        if args.output in (None, "-"):
            n = write_jsonl(records, sys.stdout)
        else:  # written aside and renamed once whole: a failed export leaves no truncated file
            target = Path(args.output)
            partial = target.with_name(f".{target.name}.partial")
            try:
                with open(partial, "w") as out:
                    n = write_jsonl(records, out)
                partial.replace(target)
            finally:
                partial.unlink(missing_ok=True)
    sys.stderr.write(f"exported {n - 1} node(s) of {len(namespaces)} namespace(s)\n")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    text = _read_text(args.file)
    lines: Any = io.StringIO(text)
    if progress.wanted(args.progress):
        lines = progress.iterate(lines, "import", text.count("\n") + (not text.endswith("\n")), True)
    with _open() as mem:
        try:
            counts = mem.runtime.import_records(lines, set(args.namespace) if args.namespace else None)
        except InvalidEventError as exc:
            sys.stderr.write(f"evomem: import refused, nothing written: {exc}\n")
            return 2
    print(
        f"imported {counts['queries']} queries and {counts['insights']} insights; "
        f"{counts['skipped']} already present"
    )
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from evomem.launcher import up

    settings = Settings()
    for line in up(settings, args.workers, serve=not args.no_retrieval):
        print(line)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from evomem.launcher import down

    for line in down(Settings()):
        print(line)
    return 0


# -- wiring ---------------------------------------------------------------------------------------
def _delegate(module: str, prog: str) -> Handler:
    """Commands with options of their own parse them themselves, imported only when run."""

    def handler(args: argparse.Namespace) -> int:
        import importlib

        if module.startswith("bench."):
            _find_checkout()
        mod = importlib.import_module(module)
        parser = argparse.ArgumentParser(prog=prog, description=mod.__doc__)
        mod.add_arguments(parser)
        code: int = mod.run(parser.parse_args(args.rest))
        return code

    return handler


def _find_checkout() -> None:
    """The benchmarks are not in the package (they are a checkout's ``bench/``, beside their README and
    results): ``evomem bench`` runs the retrieval suite of the checkout it is started in (or under),
    the same as ``python -m bench.retrieval`` there, and says how to get one otherwise."""
    here = Path.cwd().resolve()
    for root in (here, *here.parents):
        if (root / "bench" / "retrieval.py").is_file() and (root / "bench" / "common.py").is_file():
            if str(root) not in sys.path:
                sys.path.insert(0, str(root))
            return
    raise CommandError(
        "the benchmarks are not part of the installed package: run `evomem bench` (or `make bench`, or "
        "`python -m bench.<suite>`) inside a checkout of the evomem repository"
    )


def _version() -> str:
    """The installed distribution's version (evograph-mem), as ``evomem.__version__`` has it."""
    from evomem import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="evomem",
        description=__doc__,
        epilog="Settings come from EVOMEM_* environment variables (see the README).",
    )
    p.add_argument("--log-level", default="WARNING", type=str.upper, choices=LOG_LEVELS)
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    p.add_argument("--version", action="version", version=f"evomem {_version()}", help="print the version")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name, module, help_ in (
        ("demo", "evomem.demo", "run a simulated agent fleet on an embedded memory"),
        ("bench", "bench.retrieval", "measure retrieval and report latency (in a checkout: bench/)"),
    ):
        sp = sub.add_parser(name, help=help_, add_help=False)
        sp.set_defaults(func=_delegate(module, f"evomem {name}"), delegated=True)

    sp = sub.add_parser("retrieve", help="insights for a query, ranked by support minus conflict")
    sp.add_argument("query")
    sp.add_argument("-n", "--namespace", default="default")
    sp.add_argument("--top-k", type=int)
    sp.add_argument("--budget", type=int)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_retrieve)

    sp = sub.add_parser("report", help="publish the outcome of a task (returns its event id)")
    sp.add_argument("--file", help="a task event JSON document; - reads standard input")
    sp.add_argument("-n", "--namespace", default="default")
    sp.add_argument("-q", "--query")
    sp.add_argument("-s", "--status", choices=["resolved", "failed"])
    sp.add_argument("--retrieval-id")
    sp.add_argument("--insight", action="append", default=[], help="a retrieved insight id (repeatable)")
    sp.add_argument(
        "--verdict",
        action="append",
        default=[],
        help="ID=helpful | ID=harmful | ID=partial:REVISED TEXT (repeatable)",
    )
    sp.add_argument("--propose", help="a new insight to add")
    sp.add_argument("--feedback")
    sp.add_argument("--final-answer")
    sp.add_argument("--step", action="append", default=[], help="a trajectory step (repeatable)")
    sp.set_defaults(func=cmd_report)

    sp = sub.add_parser("consolidate", help="apply pending events now, in this process")
    sp.add_argument("--max", type=int)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_consolidate)

    sp = sub.add_parser(
        "revert",
        help="undo an event's edits, or every edit of a namespace since a time, as new edits",
        description="Undo the edits of EVENT_ID (with --insight: only its edits of that insight), or with "
        "--since every edit of the namespace applied since then, newest first. Nothing is deleted: the "
        "inverse edits are applied by the workers, in order with the events, and kept in the history. "
        "Prints the request id; the same --request-id twice is one revert.",
    )
    sp.add_argument("event_id", nargs="?")
    sp.add_argument("-n", "--namespace", default="default")
    sp.add_argument("--insight", help="only the event's edits of this insight")
    sp.add_argument("--since", help="every edit applied at or after this ISO 8601 time (with its zone)")
    sp.add_argument("--by", help="who asks (default: the local user; the token's name over HTTP)")
    sp.add_argument("--reason")
    sp.add_argument("--request-id")
    sp.set_defaults(func=cmd_revert)

    for name, help_ in (
        ("pin", "keep an insight as it is: no verdict archives or revises it"),
        ("unpin", "let verdicts archive or revise a pinned insight again"),
    ):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("insight_id")
        sp.add_argument("-n", "--namespace")
        sp.add_argument("--by", help="who asks (default: the local user; the token's name over HTTP)")
        sp.add_argument("--reason")
        sp.add_argument("--request-id")
        sp.set_defaults(func=cmd_pin)

    sp = sub.add_parser(
        "review",
        help="the edits held for review in a namespace: list, approve ID, reject ID",
        description="A namespace with the setting review (evomem settings set NS review=true) holds its "
        "high-impact edits until an operator decides: approve applies the edit once (approved twice: "
        "once), reject drops it; the first decision stands. Approve and reject print the request id, "
        "applied by the workers in order with the events.",
    )
    sp.add_argument("action", choices=["list", "approve", "reject"])
    sp.add_argument("review_id", nargs="?")
    sp.add_argument("-n", "--namespace", default="default")
    sp.add_argument("--state", choices=["pending", "approved", "rejected", "all"], default="pending")
    sp.add_argument("--by", help="who decides (default: the local user; the token's name over HTTP)")
    sp.add_argument("--reason")
    sp.add_argument("--request-id")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_review)

    sp = sub.add_parser(
        "event", help="the state of a reported event: queued, applied (its edits) or dead-lettered (why)"
    )
    sp.add_argument("event_id")
    sp.add_argument("-n", "--namespace", help="its namespace (needed once its state marker has expired)")
    sp.set_defaults(func=cmd_event)

    sp = sub.add_parser("inspect", help="an insight's evidence, lineage and history; or list a namespace")
    sp.add_argument("insight_id", nargs="?")
    sp.add_argument("-n", "--namespace")
    sp.add_argument("--state", choices=["active", "archived"])
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_inspect)

    sp = sub.add_parser("worker", help="run a Celery consolidation worker")
    sp.add_argument("-c", "--concurrency", type=int)
    sp.add_argument(
        "--metrics-port", type=int, help="serve Prometheus /metrics here (EVOMEM_WORKER_METRICS_PORT; 0: any)"
    )
    sp.set_defaults(func=cmd_worker)

    sp = sub.add_parser("project", help="hold the Qdrant store and keep it in step (the retrieval side)")
    sp.set_defaults(func=cmd_project)

    sp = sub.add_parser("serve", help="run the retrieval service (HTTP) on the embedded store")
    sp.add_argument("--host")
    sp.add_argument("--port", type=int)
    sp.add_argument(
        "--workers",
        type=int,
        help="processes serving the port, each with its own index replica (EVOMEM_HTTP_WORKERS)",
    )
    sp.set_defaults(func=cmd_serve)

    sp = sub.add_parser("mcp", help="serve the memory to agents over the Model Context Protocol")
    sp.add_argument("--http", action="store_true", help="streamable HTTP at /mcp instead of stdio")
    sp.add_argument("--host", help="where --http listens (default EVOMEM_HTTP_HOST)")
    sp.add_argument("--port", type=int, help="the port of --http (default EVOMEM_MCP_PORT)")
    sp.add_argument("-n", "--namespace", help="the namespace tools use by default (EVOMEM_MCP_NAMESPACE)")
    sp.set_defaults(func=cmd_mcp)

    sp = sub.add_parser("tokens", help="API tokens made at run time: create, list, revoke")
    sp.add_argument("action", choices=["create", "list", "revoke"])
    sp.add_argument("ids", nargs="*", help="revoke: the token ids")
    sp.add_argument("-n", "--namespace", action="append", default=[], help="create: a namespace it may use")
    sp.add_argument("--all", action="store_true", help="create: a token for every namespace (*)")
    sp.add_argument("--name", help="create: a label to recognise it by")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_tokens)

    sp = sub.add_parser(
        "settings",
        help="show [NS]: every setting's value and source; set NS NAME=VALUE..., unset NS [NAME...], "
        "overrides [NS]: what namespaces override",
    )
    sp.add_argument("action", nargs="?", choices=["show", "set", "unset", "overrides"], default="show")
    sp.add_argument("namespace", nargs="?")
    sp.add_argument("values", nargs="*", help="set: lambda=2 budget=5 ...; unset: names (none: all)")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_settings)

    sp = sub.add_parser("dlq", help="dead letters: list, show, replay")
    sp.add_argument("action", choices=["list", "show", "replay"])
    sp.add_argument("ids", nargs="*")
    sp.add_argument("--all", action="store_true", help="replay every dead letter")
    sp.add_argument("--count", type=int, default=50)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_dlq)

    sp = sub.add_parser("changes", help="changes the projector skipped: list, replay, drop")
    sp.add_argument("action", choices=["list", "replay", "drop"])
    sp.add_argument("ids", nargs="*", help="their ids, as `list` shows them")
    sp.add_argument("--all", action="store_true", help="every skipped change")
    sp.add_argument("--count", type=int, default=50)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_changes)

    sp = sub.add_parser("export", help="write a memory's nodes as JSON lines")
    sp.add_argument("-n", "--namespace", action="append", help="only these namespaces (repeatable)")
    sp.add_argument("-o", "--output", help="a file; default standard output")
    progress.add_flag(sp)
    sp.set_defaults(func=cmd_export)

    sp = sub.add_parser("import", help="load an export (idempotent)")
    sp.add_argument("file", help="an export file; - reads standard input")
    sp.add_argument(
        "-n", "--namespace", action="append", help="refuse any record of another namespace (repeatable)"
    )
    progress.add_flag(sp)
    sp.set_defaults(func=cmd_import)

    sp = sub.add_parser("up", help="start Redis, workers and the retrieval side in the background")
    sp.add_argument("-w", "--workers", type=int, default=2)
    sp.add_argument("--no-retrieval", action="store_true")
    sp.set_defaults(func=cmd_up)

    sp = sub.add_parser("down", help="stop what `evomem up` started")
    sp.set_defaults(func=cmd_down)

    sp = sub.add_parser(
        "reindex", help="re-embed the embedded Qdrant store from Redis after a change of embedder (resumable)"
    )
    sp.add_argument("--force", action="store_true", help="rebuild a store built by this embedder too")
    sp.add_argument("--json", action="store_true")
    progress.add_flag(sp)
    sp.set_defaults(func=cmd_reindex)

    sp = sub.add_parser("stats", help="stream, projector and graph figures")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_stats)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "delegated", False):
        args.rest = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    configure_logging(args.log_level)
    debug = args.debug or args.log_level == "DEBUG"
    try:
        if args.command != "worker":  # a worker's pool children set up their own, after the fork
            from evomem.ops import tracing

            tracing.configure(Settings())
        code: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader left (`| head`): what it wanted was written; say nothing, like other tools
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except BaseException as exc:  # every error leaves as one line; --debug shows its traceback
        if isinstance(exc, SystemExit):
            raise
        if debug:
            traceback.print_exc()
        message, status = explain(exc)
        sys.stderr.write(f"evomem: {message}\n")
        if status == 1 and not debug and not isinstance(exc, EvomemError):
            sys.stderr.write("evomem: run with --debug for the traceback\n")
        return status
    return code


def explain(exc: BaseException) -> tuple[str, int]:
    """A one-line message and an exit status for an error that ends a command."""
    from pydantic import ValidationError

    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130
    if isinstance(exc, InvalidEventError):
        return f"invalid event: {exc}", 2
    if isinstance(exc, EvomemError):
        return str(exc), 1
    if isinstance(exc, ValidationError) and exc.title == "Settings":
        err = exc.errors()[0]
        name = "EVOMEM_" + "_".join(str(p) for p in err["loc"]).upper() if err["loc"] else "EVOMEM_*"
        return f"invalid setting {name}: {err['msg']}", 2
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}", 1
    return f"unexpected error: {type(exc).__name__}: {exc}", 1


if __name__ == "__main__":
    sys.exit(main())
