"""The OpenAI Agents SDK: the insights in the agent's instructions, the run's end reported as a
task event (``pip install 'evograph-mem[openai-agents]'``).

``MemoryRunner(memory, namespace).run(agent, input)`` retrieves the insights for the task, runs a
clone of the agent whose dynamic instructions are the agent's own followed by the rendered insights
(``Runner.run``, the SDK's own loop, with every keyword given), and reports the outcome with that
retrieval before it returns or raises:

- a final output → ``judge(final_output)`` (an ``Outcome`` or a bool), or resolved without a judge;
- ``InputGuardrailTripwireTriggered`` / ``OutputGuardrailTripwireTriggered`` → failed, the
  guardrail named in the feedback; any other exception (``MaxTurnsExceeded``, a model error) →
  failed; the exception is raised again.

Why a runner and not ``RunHooks`` alone: ``on_agent_end`` is called with a final output only — a
run that raises (a tripped guardrail, the turn limit) calls no hook, so a hook could never report a
failure. Sessions (``Session``) hold a conversation's items, not a task's outcome, and are left to
the application. Agents reached by a handoff keep their own instructions.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from agents import Agent, RunContextWrapper, Runner, RunResult
from agents.exceptions import InputGuardrailTripwireTriggered, OutputGuardrailTripwireTriggered

from evomem.integrations.outcomes import (
    Judge,
    MemoryLike,
    Outcome,
    failed,
    instructions_with,
    judged,
    report_async,
    retrieve_async,
)
from evomem.results import Retrieval
from evomem.sdk.aio import AsyncMemory


def with_insights(agent: Agent[Any], retrieval: Retrieval) -> Agent[Any]:
    """A clone of ``agent`` whose instructions (a string or the agent's own dynamic function) are
    followed by the rendered insights of ``retrieval``."""
    own = agent.instructions

    async def instructions(context: RunContextWrapper[Any], current: Agent[Any]) -> str:
        base = own(context, current) if callable(own) else own
        if inspect.isawaitable(base):
            base = await base
        return instructions_with(base, retrieval)

    return agent.clone(instructions=instructions)


def outcome_of_error(exc: BaseException) -> Outcome:
    """A run that raised: failed, a tripped guardrail named as such."""
    if isinstance(exc, InputGuardrailTripwireTriggered | OutputGuardrailTripwireTriggered):
        side = "input" if isinstance(exc, InputGuardrailTripwireTriggered) else "output"
        name = exc.guardrail_result.guardrail.get_name()
        return failed(exc, f"the {side} guardrail {name!r} tripped:")
    return failed(exc)


class MemoryRunner:
    """Runs agents with the memory in the loop (see the module's docstring)."""

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
        agent: Agent[Any],
        input: str,
        *,
        task: str | None = None,
        judge: Judge | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run`` with the insights for ``task`` (default: ``input``) in the instructions,
        and the outcome reported; ``judge`` overrides the runner's for this run."""
        retrieval = await retrieve_async(self.memory, task or input, self.namespace)
        self.last_retrieval = retrieval
        try:
            result = await Runner.run(with_insights(agent, retrieval), input, **kwargs)
        except Exception as exc:
            await self._report(retrieval, outcome_of_error(exc).with_trajectory([input]))
            raise
        outcome = judged(result.final_output, judge or self.judge)
        await self._report(retrieval, outcome.with_trajectory([input, str(result.final_output)]))
        return result

    def run_sync(self, agent: Agent[Any], input: str, **kwargs: Any) -> RunResult:
        """``run`` from synchronous code (no event loop running in this thread)."""
        return asyncio.run(self.run(agent, input, **kwargs))

    async def _report(self, retrieval: Retrieval, outcome: Outcome) -> None:
        self.last_event_id = await report_async(self.memory, retrieval, outcome, self.agent_id)


__all__ = ["MemoryRunner", "outcome_of_error", "with_insights"]
