"""The judges of the benchmark: explicit verdicts carried by the events of judged arms, and the judge
behind the LLM test server for the LLM arm. Both know the world's ground truth and are wrong on the
same draws (``World.judge_errs``), so the two channels can be compared."""

from __future__ import annotations

import re
from typing import Any

from bench.quality.worlds import Lesson, Task, World
from evomem.testing.llm_server import JudgeFn

Verdict = str | dict[str, str]
#: How a task names itself in its trajectory; the LLM judge reads it to find the task's ground truth.
TASK_MARK = re.compile(r"\btask #(\d+)\b")


def refinement(world: World, lesson: Lesson, t: int) -> str | None:
    """The narrower text an over-general lesson should become, while it still helps where it was
    learnt: the right lesson of that topic."""
    if lesson.kind != "general" or lesson.home is None:
        return None
    if world.effect(lesson, lesson.home, t) <= 0:
        return None
    return world.current_right(lesson.home, t).texts[0]


def explicit_verdict(world: World, task: Task, lesson: Lesson | None) -> Verdict | None:
    """helpful / harmful / partial for a served insight that made a difference on this task; None
    for one that made none (a judge has nothing to say about it, so the controller decides it)."""
    effect = world.effect(lesson, task.topic, task.index)
    if lesson is None or effect == 0:
        return None
    if world.judge_errs(task, lesson):
        return "harmful" if effect > 0 else "helpful"
    better = refinement(world, lesson, task.index)
    if better is not None:
        return {"verdict": "partial", "revised_text": better}
    return "helpful" if effect > 0 else "harmful"


def llm_operation(world: World, task: Task | None, lesson: Lesson | None) -> tuple[str, str | None]:
    """KEEP / ARCHIVE / REVISE as a model that follows the controller's prompt and knows the truth
    would answer: an insight that made no difference is kept ("be conservative: keep an insight the
    task did not contradict"); wrong on the same draws as the explicit verdicts."""
    if task is None or lesson is None:
        return "KEEP", None
    effect = world.effect(lesson, task.topic, task.index)
    if world.judge_errs(task, lesson):
        return ("KEEP" if effect < 0 else "ARCHIVE"), None
    better = refinement(world, lesson, task.index)
    if better is not None and effect != 0:
        return "REVISE", better
    return ("ARCHIVE" if effect < 0 else "KEEP"), None


def llm_adds(world: World, task: Task | None, proposed: Lesson | None, served: list[Lesson | None]) -> bool:
    """Whether the model adds the agent's proposal: a lesson that helps where it was learnt and that
    none of the served insights already states; wrong on its own draw."""
    if task is None or proposed is None:
        return False
    home = task.topic if proposed.home is None else proposed.home
    right = world.effect(proposed, home, task.index) > 0 and proposed not in served
    return right != world.judge_errs(task, proposed, "add")


def llm_judge(world: World) -> JudgeFn:
    """The LLM test server's judge for this world (``LLMTestServer(judge=...)``)."""

    def decide(doc: dict[str, Any], insights: dict[int, str]) -> dict[str, Any]:
        mark = TASK_MARK.search(str(doc.get("trajectory", "")))
        task = world.tasks[int(mark.group(1))] if mark and int(mark.group(1)) < len(world.tasks) else None
        served, edits = [], []
        for n in doc.get("insights", []):
            lesson = world.by_text.get(insights.get(n, ""))
            served.append(lesson)
            op, text = llm_operation(world, task, lesson)
            edits.append({"insight": n, "operation": op, "revised_insight_text": text})
        proposed = doc.get("proposed_insight")
        add = bool(proposed) and llm_adds(world, task, world.by_text.get(str(proposed)), served)
        return {
            "event": doc["event"],
            "insight_edits": edits,
            "add_new_insight": {"decision": add, "new_insight_text": proposed if add else None},
        }

    return decide


__all__ = ["TASK_MARK", "Verdict", "explicit_verdict", "llm_adds", "llm_judge", "llm_operation", "refinement"]
