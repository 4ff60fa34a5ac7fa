"""The arms: which memory configuration an agent fleet runs with, and who judges its events.

* ``none``: no memory at all.
* ``<operations>[-<archive policy>]/<scoring>``: the paper's ablations (``add+keep`` append-only,
  ``add+keep+archive``, ``all``) with the world's judge, whose verdicts travel in the events
  (``insight_feedback``); the rule controller decides what the judge leaves unnamed and the ADD.
* ``nojudge/<scoring>``: every operation, the evidence policy, the rule controller alone: no verdict
  in any event.
* ``llm``: every operation, the evidence policy, the LLM controller against the local
  OpenAI-compatible test server, whose judge knows the world's ground truth and errs at its rate.
* ``no-pollution`` (a reference, only with ``--arms``): the default configuration, but the world's
  ground truth withholds every served insight that would harm the task before the agent sees it:
  how far an arm could get by polluting nothing while serving what it serves.

``scoring`` and the rule controller's credit (``EVOMEM_SCORING``, ``EVOMEM_RULES_CREDIT``) are passed
as settings; a version of evomem without them ignores them (``Settings`` ignores unknown fields), and
the arms of both scorings then run the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evomem.settings import Settings

SCORINGS = ("count", "weighted")
#: The LLM arm's model name: it has no price, so no cost is made up for the local judge.
LLM_MODEL = "evomem-quality-judge"


@dataclass(frozen=True)
class ArmSpec:
    name: str
    memory: bool = True
    judged: bool = False  # explicit verdicts from the world's judge in the events
    llm: bool = False  # the LLM controller against the test server with the world's judge
    settings: tuple[tuple[str, str], ...] = ()  # Settings fields of this arm
    withhold_harmful: bool = False  # the ground truth hides what would harm from the agent (a bound)
    # a review gate (EVOMEM_REVIEW): the held edits decided by the world's truth, wrong this often
    reviewer_error: float | None = None
    optional: bool = False  # run only when --arms names it

    def overrides(self) -> dict[str, str]:
        return dict(self.settings)


def default_scoring() -> str:
    """The scoring ``Settings()`` uses; ``count`` (the paper's Eq. 8-9) where there is no choice."""
    field = Settings.model_fields.get("scoring")
    return str(field.default) if field is not None and field.default is not None else "count"


def _ablations() -> list[ArmSpec]:
    configs = (
        ("add+keep", "add+keep", "evidence"),
        ("add+keep+archive", "add+keep+archive", "evidence"),
        ("all-immediate", "all", "immediate"),
        ("all-evidence", "all", "evidence"),
    )
    return [
        ArmSpec(
            f"{name}/{scoring}",
            judged=True,
            settings=(("operations", ops), ("archive_policy", policy), ("scoring", scoring)),
        )
        for name, ops, policy in configs
        for scoring in SCORINGS
    ]


#: Served this many times without a verdict that it helped: stale (EVOMEM_STALE_SERVED).
STALE_SERVED = (10, 30)
#: The review gates: (supporting queries from which a REVISE or ARCHIVE is held, the reviewer's error).
REVIEW_GATES = ((3, 0.0), (3, 0.1), (3, 0.3))
#: Gates of other thresholds, run when --arms names them (docs/lab/2026-12-07-staleness-and-review.md).
OPTIONAL_GATES = ((5, 0.0), (5, 0.1), (10, 0.0), (10, 0.1))


def _default_config() -> tuple[tuple[str, str], ...]:
    return (("operations", "all"), ("archive_policy", "evidence"), ("scoring", default_scoring()))


def _staleness() -> list[ArmSpec]:
    """The default configuration with the staleness sweep at every consolidation."""
    return [
        ArmSpec(
            f"stale-{n}",
            judged=True,
            settings=(*_default_config(), ("stale_served", str(n)), ("stale_sweep_s", "0")),
        )
        for n in STALE_SERVED
    ]


def _review_gates() -> list[ArmSpec]:
    """The default configuration under review: its high-impact edits decided by a reviewer who knows
    the world's truth and errs at the given rate (``bench.quality.run``)."""
    return [
        ArmSpec(
            f"review-k{k}-e{round(err * 100)}",
            judged=True,
            settings=(*_default_config(), ("review", "true"), ("review_support", str(k))),
            reviewer_error=err,
            optional=(k, err) in OPTIONAL_GATES,
        )
        for k, err in (*REVIEW_GATES, *OPTIONAL_GATES)
    ]


ARMS: dict[str, ArmSpec] = {
    a.name: a
    for a in (
        ArmSpec("none", memory=False),
        *_ablations(),
        *(
            ArmSpec(f"nojudge/{scoring}", settings=(("operations", "all"), ("scoring", scoring)))
            for scoring in SCORINGS
        ),
        ArmSpec("llm", llm=True, settings=(("operations", "all"), ("archive_policy", "evidence"))),
        *_staleness(),
        *_review_gates(),
        # a reference, not a memory: the default configuration with every served insight that would
        # harm the task withheld by the ground truth before the agent sees it (and so never judged)
        ArmSpec(
            "no-pollution",
            judged=True,
            withhold_harmful=True,
            settings=(("operations", "all"), ("archive_policy", "evidence")),
        ),
    )
}
#: The arms of a default run: every arm but the reference and the optional gates (``--arms`` takes them).
DEFAULT_ARMS = tuple(name for name, arm in ARMS.items() if not (arm.withhold_harmful or arm.optional))


def default_arm() -> str:
    """The arm that runs the default configuration (every operation, the evidence policy, the
    default scoring), which the issue's targets are about."""
    return f"all-evidence/{default_scoring()}"


def append_only_arm() -> str:
    return f"add+keep/{default_scoring()}"


def settings_for(
    arm: ArmSpec, data_dir: Path, llm_url: str | None = None, extra: dict[str, str] | None = None
) -> Settings:
    """An embedded memory under ``data_dir`` for this arm; ``extra`` applies to every arm."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "redis_url": None,
        "qdrant_url": None,
        "url": None,
        "embedder": "hashing",
        "controller": "rules",
        **arm.overrides(),
        **(extra or {}),
    }
    if arm.llm:
        if llm_url is None:
            raise ValueError(f"arm {arm.name} needs the LLM test server's URL")
        values.update(
            controller="llm",
            llm_base_url=llm_url,
            llm_api_key="local",
            llm_model=LLM_MODEL,
            llm_tokenizer="estimate",
        )
    return Settings(**values)


__all__ = [
    "ARMS",
    "DEFAULT_ARMS",
    "LLM_MODEL",
    "REVIEW_GATES",
    "SCORINGS",
    "STALE_SERVED",
    "ArmSpec",
    "append_only_arm",
    "default_arm",
    "default_scoring",
    "settings_for",
]
