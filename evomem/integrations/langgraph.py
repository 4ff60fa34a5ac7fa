"""LangGraph: a ``BaseStore`` whose ``search`` serves evomem's ranked insights, and the run's end
reported as a task event (``pip install 'evograph-mem[langgraph]'``).

``EvomemStore(memory)`` is given to ``graph.compile(store=...)``; a node reads it as ``runtime.store``
(or the ``store`` argument) and calls ``store.search(("fever",), query=task)``: each ``SearchItem``
is one insight, ranked, its key the insight id, its value the text, support, conflict, its number in
the rendered block and the ``retrieval_id``. ``EvomemStore.render(items)`` is the block for a prompt.

The outcome has no place in ``BaseStore`` (it stores items; nothing in it knows that a run ended, or
how), so it is reported beside it, in one of two ways:

- ``store.invoke(graph, input, judge=...)`` runs the graph and reports every retrieval the run made
  with the outcome: the judge's verdict on the final state, or *failed* when the graph raised (the
  exception is raised again);
- ``store.outcome_node(judge)`` is a node to put at the graph's end, for a graph served where no
  wrapper can stand around ``invoke`` (LangGraph's server): it reports the retrieval whose id the
  state holds under ``retrieval_key``. A graph that raises never reaches it.

What the interface cannot carry: ``put`` and ``delete`` (evomem learns lessons from judged outcomes
— ``Outcome.proposed_insight`` — and deletes nothing; a harmful verdict retires an insight) and
``list_namespaces`` raise ``NotImplementedError``; ``search`` without ``query`` finds nothing
(insights are served for a task); ``filter`` matches the values' fields. Namespace tuples are
joined with ``.`` (LangGraph forbids it inside a label), so ``("fever", "team1")`` is evomem's
namespace ``fever.team1``.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from evomem.errors import NotFoundError
from evomem.integrations.outcomes import Judge, MemoryLike, Outcome, failed, judged, report
from evomem.results import Retrieval

KEPT_RETRIEVALS = 4096
_RUN: contextvars.ContextVar[list[Retrieval] | None] = contextvars.ContextVar(
    "evomem_langgraph_run", default=None
)


def namespace_of(labels: tuple[str, ...]) -> str:
    """evomem's namespace for a LangGraph namespace tuple."""
    return ".".join(labels) if labels else "default"


class EvomemStore(BaseStore):
    """A LangGraph store that serves insights (see the module's docstring)."""

    supports_ttl = False

    def __init__(self, memory: MemoryLike, *, agent_id: str | None = None) -> None:
        self.memory = memory
        self.agent_id = agent_id
        self._retrievals: OrderedDict[str, Retrieval] = OrderedDict()
        self._lock = threading.Lock()

    # -- BaseStore -------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._one(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        context = contextvars.copy_context()  # the run being recorded, in the worker thread too
        return await asyncio.to_thread(context.run, self.batch, ops)

    def _one(self, op: Op) -> Result:
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            raise NotImplementedError(
                "evomem learns from judged outcomes and deletes nothing: report the run "
                "(EvomemStore.invoke or outcome_node) with Outcome.proposed_insight instead of put/delete"
            )
        if isinstance(op, ListNamespacesOp):
            raise NotImplementedError("evomem serves insights per namespace; it does not list them here")
        raise TypeError(f"unknown store operation {type(op).__name__}")

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if not op.query:
            return []
        retrieval = self.memory.retrieve(
            op.query, namespace_of(op.namespace_prefix), top_k=max(1, op.offset + op.limit)
        )
        self._remember(retrieval)
        now = datetime.now(UTC)
        items = [
            SearchItem(
                op.namespace_prefix,
                i.id,
                {
                    "text": i.text,
                    "number": n,
                    "support": i.support,
                    "conflict": i.conflict,
                    "retrieval_id": retrieval.id,
                },
                now,
                now,
                score=i.score,
            )
            for n, i in enumerate(retrieval.insights, 1)
        ]
        if op.filter:
            items = [it for it in items if all(it.value.get(k) == v for k, v in op.filter.items())]
        return items[op.offset : op.offset + op.limit]

    def _get(self, op: GetOp) -> Item | None:
        namespace = namespace_of(op.namespace)
        try:
            view = self.memory.insight(op.key, namespace)
        except NotFoundError:
            return None
        node = view.node
        value = {
            "text": node.text,
            "state": node.state,
            "positive": list(node.positive),
            "negative": list(node.negative),
            "version": node.version,
        }
        return Item(
            value=value,
            key=op.key,
            namespace=op.namespace,
            created_at=node.created_at,
            updated_at=node.updated_at,
        )

    # -- retrievals and outcomes -----------------------------------------------------------------
    def _remember(self, retrieval: Retrieval) -> None:
        with self._lock:
            self._retrievals[retrieval.id] = retrieval
            while len(self._retrievals) > KEPT_RETRIEVALS:
                self._retrievals.popitem(last=False)
        run = _RUN.get()
        if run is not None:
            run.append(retrieval)

    def retrieval(self, retrieval_id: str) -> Retrieval:
        """A retrieval this store served (the newest ``KEPT_RETRIEVALS``); ``NotFoundError`` else."""
        with self._lock:
            found = self._retrievals.get(retrieval_id)
        if found is None:
            raise NotFoundError(f"no retrieval {retrieval_id!r} served by this store")
        return found

    @staticmethod
    def render(items: Iterable[SearchItem], header: str | None = None) -> str:
        """The insights of ``search`` as ``Retrieval.render`` writes them, for a prompt."""
        texts = [str(it.value["text"]) for it in items]
        if not texts:
            return ""
        head = header or "Insights from similar past tasks (most reliable first):"
        return "\n".join([head, *(f"{n}. {t}" for n, t in enumerate(texts, 1))])

    def report(self, retrieval: Retrieval | str, outcome: Outcome) -> str:
        """Report ``outcome`` for a retrieval (or its id); the event id."""
        found = self.retrieval(retrieval) if isinstance(retrieval, str) else retrieval
        return report(self.memory, found, outcome, self.agent_id)

    @contextmanager
    def _recording(self) -> Iterator[list[Retrieval]]:
        made: list[Retrieval] = []
        token = _RUN.set(made)
        try:
            yield made
        finally:
            _RUN.reset(token)

    def invoke(
        self, graph: Any, input: Any, *, judge: Judge | None = None, config: Any = None, **kwargs: Any
    ) -> Any:
        """``graph.invoke(input, config)``, then every retrieval of the run reported with the
        outcome: ``judge(final state)``, or failed when the graph raised (raised again)."""
        with self._recording() as made:
            try:
                state = graph.invoke(input, config, **kwargs)
            except Exception as exc:
                self._report_all(made, failed(exc))
                raise
        self._report_all(made, judged(state, judge))
        return state

    async def ainvoke(
        self, graph: Any, input: Any, *, judge: Judge | None = None, config: Any = None, **kwargs: Any
    ) -> Any:
        """``invoke`` for ``graph.ainvoke``."""
        with self._recording() as made:
            try:
                state = await graph.ainvoke(input, config, **kwargs)
            except Exception as exc:
                await asyncio.to_thread(self._report_all, made, failed(exc))
                raise
        await asyncio.to_thread(self._report_all, made, judged(state, judge))
        return state

    def _report_all(self, made: list[Retrieval], outcome: Outcome) -> None:
        for retrieval in dict((r.id, r) for r in made).values():
            report(self.memory, retrieval, outcome, self.agent_id)

    def outcome_node(
        self,
        judge: Callable[[Mapping[str, Any]], Outcome | bool],
        *,
        retrieval_key: str = "retrieval_id",
    ) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
        """A node that reports the run's outcome, ``judge(state)``, for the retrieval whose id the
        state holds under ``retrieval_key`` (a state without one reports nothing)."""

        def report_outcome(state: Mapping[str, Any]) -> dict[str, Any]:
            retrieval_id = state.get(retrieval_key)
            if retrieval_id:
                self.report(str(retrieval_id), judged(state, judge))
            return {}

        return report_outcome


__all__ = ["EvomemStore", "namespace_of"]
