"""pydantic-ai: the insights as the run's instructions, the run's end reported as a task event
(``pip install 'evograph-mem[pydantic-ai]'``).

``MemoryRunner(memory, namespace).run(agent, prompt)`` retrieves the insights for the task, runs
``agent.run(prompt, instructions=<rendered insights>)`` — pydantic-ai adds a run's instructions to
the agent's own — and reports the outcome with that retrieval before it returns or raises: the
judge's verdict on ``result.output`` (resolved without a judge), or failed when the run raised
(``UnexpectedModelBehavior`` once output validation is out of retries, ``UsageLimitExceeded``, a
model error; raised again). An output validator that raises ``ModelRetry`` is pydantic-ai's own
retry and reports nothing until the run ends.

pydantic-ai has no memory interface of its own (dependencies and instructions are how context gets
in), so nothing here is left out; a run's verdicts come from the judge, which sees the output.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.run import AgentRunResult

from evomem.integrations.outcomes import (
    Judge,
    MemoryLike,
    Outcome,
    failed,
    judged,
    report_async,
    retrieve_async,
)
from evomem.results import Retrieval
from evomem.sdk.aio import AsyncMemory


class MemoryRunner:
    """Runs pydantic-ai agents with the memory in the loop (see the module's docstring)."""

    def __init__(
        self,
        memory: MemoryLike | AsyncMemory,
        namespace: str = "default",
        *,
        judge: Judge | None = None,
        agent_id: str | None = None,
    ) -> None:
        self.memory = memory
        self.namespace = namespace
        self.judge = judge
        self.agent_id = agent_id
        self.last_retrieval: Retrieval | None = None
        self.last_event_id: str | None = None

    async def run(
        self,
        agent: Agent[Any, Any],
        prompt: str,
        *,
        task: str | None = None,
        judge: Judge | None = None,
        **kwargs: Any,
    ) -> AgentRunResult[Any]:
        """``agent.run(prompt, instructions=...)`` with the insights for ``task`` (default:
        ``prompt``), and the outcome reported; ``judge`` overrides the runner's for this run."""
        retrieval = await retrieve_async(self.memory, task or prompt, self.namespace)
        self.last_retrieval = retrieval
        try:
            result = await agent.run(prompt, instructions=retrieval.render() or None, **kwargs)
        except Exception as exc:
            await self._report(retrieval, failed(exc).with_trajectory([prompt]))
            raise
        outcome = judged(result.output, judge or self.judge)
        await self._report(retrieval, outcome.with_trajectory([prompt, str(result.output)]))
        return result

    def run_sync(self, agent: Agent[Any, Any], prompt: str, **kwargs: Any) -> AgentRunResult[Any]:
        """``run`` from synchronous code (no event loop running in this thread)."""
        return asyncio.run(self.run(agent, prompt, **kwargs))

    async def _report(self, retrieval: Retrieval, outcome: Outcome) -> None:
        self.last_event_id = await report_async(self.memory, retrieval, outcome, self.agent_id)


__all__ = ["MemoryRunner"]
