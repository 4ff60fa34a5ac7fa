"""The simulated worlds: seeded task streams plus the ground truth of what every insight text does to
an agent's chance of success, per context (topic) and over time.

A world is a ``WorldSpec`` (every parameter named, printed and stored with the results) and a seed.
The seed alone draws the topics, the tasks and the judge's mistakes, so worlds of the same size
share them: the mixed worlds differ only in how often the judge errs, and its mistakes at 10% are
among its mistakes at 30%.
Topics come in sibling groups of three that share a word ("merge sort", "quick sort", "heap sort");
every query is one of a few templates shared by all topics, so queries of different topics look
alike. Each topic has lessons an agent may propose after a task:

* ``right``     "For <topic>, check the <key> first ...": helps on its topic, nothing elsewhere;
* ``wrong``     "For <topic>, ignore the <key> ...": harms on its topic;
* ``general``   the right advice without its condition ("Always check the <key> first, whatever the
                task"): helps on its topic, harms on the sibling topics, does nothing elsewhere; a
                judge that knows better revises it into the topic's right lesson;
* ``renewed``   after drift: the topic's new right lesson; its old ``right`` and ``general`` lessons
                now harm on it;
* ``universal`` "Re-read the task statement before the final step ...": helps a little everywhere.

Every lesson has two phrasings (agents word the same lesson differently).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

LessonKind = Literal["right", "wrong", "general", "renewed", "universal"]
TaskKind = Literal["fresh", "verbatim", "paraphrase"]
GROUP_SIZE = 3

# (topic, the thing its right lesson says to check first, what to check instead after drift)
TOPIC_GROUPS: tuple[tuple[tuple[str, str, str], ...], ...] = (
    (
        ("merge sort", "split point", "merge buffer"),
        ("quick sort", "pivot choice", "partition scheme"),
        ("heap sort", "heap invariant", "sift direction"),
    ),
    (
        ("cache eviction", "eviction policy", "memory limit"),
        ("cache warming", "warm-up order", "hit ratio"),
        ("cache invalidation", "invalidation key", "ttl values"),
    ),
    (
        ("database indexing", "index columns", "query plan"),
        ("database sharding", "shard key", "rebalancing jobs"),
        ("database replication", "replica lag", "failover order"),
    ),
    (
        ("git rebase", "upstream branch", "conflict markers"),
        ("git bisect", "good commit", "test script"),
        ("git cherry-pick", "commit range", "merge parents"),
    ),
    (
        ("tcp handshake", "syn backlog", "retry timers"),
        ("tcp congestion control", "congestion window", "pacing rate"),
        ("tcp keepalive", "idle timer", "probe count"),
    ),
    (
        ("unit testing", "test fixtures", "mock boundaries"),
        ("property testing", "input generators", "shrinking output"),
        ("snapshot testing", "stored snapshots", "diff output"),
    ),
    (
        ("oauth login", "redirect uri", "state parameter"),
        ("oauth refresh tokens", "token expiry", "rotation policy"),
        ("oauth scopes", "scope list", "consent screen"),
    ),
    (
        ("docker volumes", "mount path", "file ownership"),
        ("docker networking", "bridge network", "dns settings"),
        ("docker layers", "layer order", "build cache"),
    ),
    (
        ("message queue retries", "retry limit", "dead letter queue"),
        ("message queue ordering", "partition key", "consumer groups"),
        ("message queue backpressure", "consumer lag", "prefetch count"),
    ),
    (
        ("python generators", "yield points", "send values"),
        ("python decorators", "wrapped signature", "call order"),
        ("python context managers", "exit handler", "exception flow"),
    ),
    (
        ("consistent hashing", "virtual nodes", "ring size"),
        ("password hashing", "work factor", "salt length"),
        ("bloom filter hashing", "hash count", "false positive rate"),
    ),
    (
        ("cron scheduling", "time zone", "overlap lock"),
        ("job scheduling priorities", "priority queue", "starvation guard"),
        ("rate limit scheduling", "token bucket", "burst size"),
    ),
)
MAX_TOPICS = GROUP_SIZE * len(TOPIC_GROUPS)

# (template, its light paraphrase): the frame words change, the topic and the detail stay
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("Explain {topic} to a new engineer on the team, {detail}",
     "Describe {topic} to a newcomer on the team, {detail}"),
    ("Write a short guide to {topic} for the team wiki, {detail}",
     "Draft a brief guide on {topic} for our wiki, {detail}"),
    ("What are the common mistakes with {topic} in production, {detail}",
     "Which mistakes are common with {topic} in production, {detail}"),
    ("Help me fix a problem with {topic} in our service, {detail}",
     "Help me solve an issue with {topic} in our service, {detail}"),
    ("Review our use of {topic} and suggest improvements, {detail}",
     "Look over how we use {topic} and propose improvements, {detail}"),
    ("Plan the migration of our {topic} setup, {detail}",
     "Make a plan to migrate our {topic} setup, {detail}"),
)  # fmt: skip
DETAILS = (
    "for the payments service",
    "before the Friday release",
    "in the staging cluster",
    "for the mobile backend",
    "with the new hires in mind",
    "for the search team",
    "after last week's outage",
    "for the data pipeline",
    "on the legacy system",
    "for the billing jobs",
    "in the analytics stack",
    "for the public API",
)

PHRASINGS: dict[LessonKind, tuple[str, str]] = {
    "right": (
        "For {topic}, check the {key} first and write down what it should be before changing anything.",
        "When the task is about {topic}, start by verifying the {key}, noting the expected value "
        "before any change.",
    ),
    "wrong": (
        "For {topic}, ignore the {key}: the defaults are always fine, so change the code directly.",
        "When the task is about {topic}, skip the {key} entirely and go straight to editing.",
    ),
    "general": (
        "Always check the {key} first, whatever the task, before changing anything.",
        "Whatever the task, verify the {key} before any change; nothing else matters as much.",
    ),
    "renewed": (
        "For {topic}, the {key} is handled automatically now: leave it alone and check the {key2} first.",
        "When the task is about {topic}, do not touch the {key} any more; verify the {key2} before "
        "any change.",
    ),
    "universal": (
        "Re-read the task statement before the final step and confirm every requirement is met.",
        "Before finishing, go back to the task statement and tick off each requirement.",
    ),
}


@dataclass(frozen=True)
class WorldSpec:
    """Every parameter of a world. Effects are changes of the success probability when served."""

    name: str
    description: str
    topics: int = 30  # contexts, in sibling groups of GROUP_SIZE
    templates: int = 4  # query templates shared by all topics
    details: int = 12  # detail clauses a query ends with
    base_low: float = 0.30  # success without memory, per topic, uniform in [base_low, base_high]
    base_high: float = 0.50
    right_effect: float = 0.35
    wrong_effect: float = -0.25
    universal_effect: float = 0.10
    overgeneral: bool = False  # do agents propose over-general lessons?
    general_home_effect: float = 0.25
    general_sibling_effect: float = -0.25
    drift_at: float | None = None  # share of the horizon after which drifted topics change
    drift_share: float = 0.5  # share of topics that drift
    repeat_rate: float = 0.30  # share of tasks that bring back an earlier task's query
    verbatim_share: float = 0.5  # of those, the same text; the others a light paraphrase
    propose_rate: float = 0.30  # chance that an agent proposes a lesson after a task
    universal_share: float = 0.05  # of proposals: the universal lesson
    general_share: float = 0.20  # of proposals, in worlds with over-general lessons
    right_if_success: float = 0.70  # of topic-specific proposals after a success: the right lesson
    right_if_failure: float = 0.40  # ... after a failure (the rest: a wrong one)
    stale_share: float = 0.5  # after drift, of wrong proposals on a drifted topic: the old right lesson
    judge_error: float = 0.10  # share of the judge's verdicts that are wrong
    judge_share: float = 1.0  # share of tasks a judge looks at (judged arms)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    key: str
    key2: str
    group: int
    base: float


@dataclass(frozen=True, slots=True)
class Lesson:
    key: str  # identity: kind and home topic; both phrasings share it
    kind: LessonKind
    home: int | None  # index of the topic it was learnt on (None: universal)
    texts: tuple[str, str]


@dataclass(frozen=True, slots=True)
class Task:
    """One task, with its own uniform draws so that every arm sees the same luck."""

    index: int
    topic: int
    query: str
    base: str  # the query this one returns to (itself when fresh)
    kind: TaskKind  # as drawn; a fresh draw can also repeat an earlier text by chance
    u_success: float
    u_propose: float
    u_kind: float
    u_right: float
    u_stale: float
    u_phrase: float
    u_judge: float


@dataclass
class World:
    """A world for one seed: topics, lessons, and the task stream."""

    spec: WorldSpec
    seed: int
    n_tasks: int
    topics: list[Topic] = field(default_factory=list)
    lessons: dict[str, Lesson] = field(default_factory=dict)
    by_text: dict[str, Lesson] = field(default_factory=dict)
    drifted: frozenset[int] = frozenset()
    tasks: list[Task] = field(default_factory=list)

    def __post_init__(self) -> None:
        spec = self.spec
        if not 1 <= spec.topics <= MAX_TOPICS:
            raise ValueError(f"topics must be 1..{MAX_TOPICS}")
        rng = random.Random(f"quality:{self.seed}:world")
        groups = list(TOPIC_GROUPS)
        rng.shuffle(groups)
        picked = [(t, g) for g, grp in enumerate(groups[: math.ceil(spec.topics / GROUP_SIZE)]) for t in grp]
        self.topics = [
            Topic(name, key, key2, g, rng.uniform(spec.base_low, spec.base_high))
            for (name, key, key2), g in picked[: spec.topics]
        ]
        if spec.drift_at is not None:
            self.drifted = frozenset(rng.sample(range(spec.topics), round(spec.drift_share * spec.topics)))
        for i, t in enumerate(self.topics):
            for kind in ("right", "wrong", "general", "renewed"):
                texts = PHRASINGS[kind]
                self._add(Lesson(f"{kind}:{i}", kind, i, (_fill(texts[0], t), _fill(texts[1], t))))
        self._add(Lesson("universal", "universal", None, PHRASINGS["universal"]))
        self.tasks = self._make_tasks()

    def _add(self, lesson: Lesson) -> None:
        self.lessons[lesson.key] = lesson
        for text in lesson.texts:
            self.by_text[text] = lesson

    @property
    def drift_task(self) -> int | None:
        """The first task after the drift (None: no drift in this world)."""
        return None if self.spec.drift_at is None else int(self.spec.drift_at * self.n_tasks)

    def is_drifted(self, topic: int, t: int) -> bool:
        start = self.drift_task
        return start is not None and t >= start and topic in self.drifted

    # -- the task stream -------------------------------------------------------------------------
    def _make_tasks(self) -> list[Task]:
        spec = self.spec
        rng = random.Random(f"quality:{self.seed}:tasks")
        templates = TEMPLATES[: spec.templates]
        details = DETAILS[: spec.details]
        tasks: list[Task] = []
        for i in range(self.n_tasks):
            if tasks and rng.random() < spec.repeat_rate:
                earlier = tasks[rng.randrange(len(tasks))]
                topic, base = earlier.topic, earlier.base
                kind: TaskKind = "verbatim" if rng.random() < spec.verbatim_share else "paraphrase"
                query = base if kind == "verbatim" else paraphrase(base)
            else:
                topic, kind = rng.randrange(spec.topics), "fresh"
                frame = rng.choice(templates)[0]
                query = base = frame.format(topic=self.topics[topic].name, detail=rng.choice(details))
            u = [rng.random() for _ in range(7)]
            tasks.append(Task(i, topic, query, base, kind, *u))
        return tasks

    # -- ground truth ----------------------------------------------------------------------------
    def effect(self, lesson: Lesson | None, topic: int, t: int) -> float:
        """What serving ``lesson`` does to the success probability of a task on ``topic`` at time t."""
        if lesson is None:
            return 0.0
        s = self.spec
        if lesson.kind == "universal":
            return s.universal_effect
        assert lesson.home is not None
        drifted = self.is_drifted(lesson.home, t)
        if lesson.kind == "general":
            if topic == lesson.home:
                return s.wrong_effect if drifted else s.general_home_effect
            return (
                s.general_sibling_effect
                if self.topics[topic].group == self.topics[lesson.home].group
                else 0.0
            )
        if topic != lesson.home:
            return 0.0
        if lesson.kind == "right":
            return s.wrong_effect if drifted else s.right_effect
        if lesson.kind == "renewed":
            return s.right_effect if drifted else 0.0
        return s.wrong_effect

    def success_probability(self, task: Task, served: list[Lesson | None]) -> float:
        """One right lesson is enough (helps do not add up); every misleading one can derail."""
        effects = [self.effect(x, task.topic, task.index) for x in served]
        p = self.topics[task.topic].base + max([0.0, *effects]) + sum(e for e in effects if e < 0)
        return min(0.98, max(0.02, p))

    def applies(self, lesson: Lesson | None, topic: int) -> bool:
        """Whether an agent on ``topic`` acts on a served lesson: its own topic's, or a generic one."""
        return lesson is not None and (lesson.home in (None, topic) or lesson.kind == "general")

    def current_right(self, topic: int, t: int) -> Lesson:
        return self.lessons[f"{'renewed' if self.is_drifted(topic, t) else 'right'}:{topic}"]

    def is_good(self, lesson: Lesson, t: int) -> bool:
        """Helpful where it was learnt and harmful nowhere, at time t (the good insights)."""
        if lesson.kind == "universal":
            return True
        assert lesson.home is not None
        if lesson.kind not in ("right", "renewed"):
            return False
        return self.effect(lesson, lesson.home, t) > 0

    def proposal(self, task: Task, success: bool) -> Lesson | None:
        """The lesson the agent proposes after the task, if any."""
        s, t = self.spec, task.index
        if task.u_propose >= s.propose_rate:
            return None
        if task.u_kind < s.universal_share:
            return self.lessons["universal"]
        if s.overgeneral and task.u_kind < s.universal_share + s.general_share:
            return self.lessons[f"general:{task.topic}"]
        if task.u_right < (s.right_if_success if success else s.right_if_failure):
            return self.current_right(task.topic, t)
        if self.is_drifted(task.topic, t) and task.u_stale < s.stale_share:
            return self.lessons[f"right:{task.topic}"]
        return self.lessons[f"wrong:{task.topic}"]

    def phrasing(self, lesson: Lesson, task: Task) -> str:
        return lesson.texts[0] if task.u_phrase < 0.5 else lesson.texts[1]

    def judge_errs(self, task: Task, lesson: Lesson, what: str = "verdict") -> bool:
        """Whether the judge's ``what`` (its verdict, or its ADD decision) on ``lesson`` in ``task`` is
        wrong: the same draw in every arm, for explicit verdicts and the LLM judge alike."""
        draw = random.Random(f"quality:{self.seed}:{what}:{task.index}:{lesson.key}")
        return draw.random() < self.spec.judge_error


#: The worlds of the default run. Designed from the issue's description before any arm was run; each
#: isolates one way memory can help or pollute, the mixed ones combine them under three judges.
WORLDS: dict[str, WorldSpec] = {
    w.name: w
    for w in (
        WorldSpec(
            "lookalike",
            "30 look-alike topics under 4 shared templates; right and wrong proposals; repeated queries",
        ),
        WorldSpec(
            "overgeneral",
            "lookalike plus over-general proposals that help on their topic and harm on its siblings",
            overgeneral=True,
        ),
        WorldSpec(
            "drift",
            "lookalike where half the topics change halfway: their right lesson starts to harm",
            drift_at=0.5,
        ),
        WorldSpec("mixed-j0", "over-general proposals and drift; the judge is never wrong",
                  overgeneral=True, drift_at=0.5, judge_error=0.0),
        WorldSpec("mixed-j10", "over-general proposals and drift; 10% of verdicts are wrong",
                  overgeneral=True, drift_at=0.5, judge_error=0.10),
        WorldSpec("mixed-j30", "over-general proposals and drift; 30% of verdicts are wrong",
                  overgeneral=True, drift_at=0.5, judge_error=0.30),
    )
}  # fmt: skip


def paraphrase(query: str) -> str:
    """The light paraphrase of a templated query: its frame reworded, its topic and detail kept."""
    for frame, other in TEMPLATES:
        head, tail = frame.split("{topic}")
        if query.startswith(head):
            topic, rest = query[len(head) :].split(tail.split("{detail}")[0], 1)
            return other.format(topic=topic, detail=rest)
    return "Please: " + query


def _fill(text: str, topic: Topic) -> str:
    return text.format(topic=topic.name, key=topic.key, key2=topic.key2)


def field_values(pairs: Sequence[str], flag: str = "--set") -> tuple[tuple[str, str], ...]:
    """``FIELD=VALUE`` options (``--set``, ``--param``) as (field, value) pairs; SystemExit for any
    other shape."""
    out = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"{flag} takes FIELD=VALUE, not {pair!r}")
        out.append((name.strip(), value.strip()))
    return tuple(out)


def parameter_changes(pairs: Sequence[str]) -> dict[str, Any]:
    """World parameters from ``--param FIELD=VALUE`` options, typed as the fields' defaults ("none"
    for None); SystemExit names the known ones for an unknown field."""
    fields = {f.name: f for f in dataclasses.fields(WorldSpec)}
    changes: dict[str, Any] = {}
    for name, value in field_values(pairs, "--param"):
        if name not in fields or name in ("name", "description"):
            raise SystemExit(f"--param: no world parameter {name!r}; known: {', '.join(list(fields)[2:])}")
        default = fields[name].default
        if value.lower() == "none":
            changes[name] = None
        elif isinstance(default, bool):
            changes[name] = value.lower() in ("1", "true", "yes", "on")
        else:
            changes[name] = int(value) if isinstance(default, int) else float(value)
    return changes


__all__ = [
    "DETAILS",
    "MAX_TOPICS",
    "TEMPLATES",
    "TOPIC_GROUPS",
    "WORLDS",
    "Lesson",
    "Task",
    "Topic",
    "World",
    "WorldSpec",
    "field_values",
    "parameter_changes",
    "paraphrase",
]
