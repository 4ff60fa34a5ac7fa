"""The fleet the growth benchmark simulates: tenants, their tasks, their lessons and their agents.

Deterministic for a seed. Each tenant (a namespace) works in one of four domains; a domain's
templates are its topics, and a tenant fills them with its own entities, so tenants of one domain
look alike without sharing tasks. Tasks repeat (the same text again) and nearly repeat (one slot
changed), and popular topics and entities recur, so the queries an insight is served on resemble
each other and its evidence keeps growing: a lesson of a popular topic gathers thousands of
supporting queries over 100k tasks. Every lesson is helpful or harmful to its topic; served lessons
move the agent's chance of success, which is all the rule controller and the evidence policy see.
"""

from __future__ import annotations

import random
import string
from collections import deque
from dataclasses import dataclass, field

# --------------------------------------------------------------------------------------------------
# Vocabulary. A domain: templates (one topic each, with a label lessons start with), slot pools
# shared by every tenant of the domain, slots whose values each tenant invents, and the advice its
# lessons are made of.

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ra",
    "ven",
    "dor",
    "sa",
    "tel",
    "qu",
    "is",
    "ber",
    "ny",
    "mo",
    "hra",
    "el",
    "var",
    "an",
    "to",
    "ri",
    "zu",
    "pe",
    "gal",
    "fen",
    "ost",
    "ur",
    "ly",
]


def _pool(words: str) -> tuple[str, ...]:
    return tuple(w.strip() for w in words.split("|"))


@dataclass(frozen=True)
class Domain:
    name: str
    base_success: float
    topics: tuple[tuple[str, str], ...]  # (label, template)
    shared: dict[str, tuple[str, ...]]
    invented: dict[str, int]  # slot -> how many values each tenant invents for it
    helpful: tuple[str, ...]
    harmful: tuple[str, ...]


DOMAINS = (
    Domain(
        "shop",
        0.62,
        (
            ("Buying under a price cap", "Buy a {adj} {product} in {color} under ${price}"),
            (
                "Shopping for a feature",
                "Find a {brand} {product} with {feature}, price lower than {price} dollars",
            ),
            ("Buying for someone", "I need a {size} {product} for {role}, {color}, under ${price}"),
            ("Searching by rating", "Search for a {product} rated at least {rating} stars with {feature}"),
            ("Ordering an exact item", "Order the {color} {brand} {product}, {size}, below ${price}"),
        ),
        {
            "adj": _pool("lightweight|compact|premium|vintage|ergonomic|foldable|durable|modern|classic"),
            "product": _pool(
                "office chair|desk lamp|running shoes|backpack|water bottle|wireless earbuds|coffee maker|"
                "yoga mat|phone case|winter jacket|rain boots|bookshelf|laptop stand|hair dryer|dog bed|"
                "area rug|sunglasses|wall clock|tea kettle|gaming mouse|travel mug|hiking socks"
            ),
            "color": _pool("red|blue|black|white|green|grey|navy|beige|pink|brown|silver|gold|olive|teal"),
            "price": tuple(str(p) for p in range(10, 400, 5)),
            "feature": _pool(
                "lumbar support|free shipping|machine washable|bpa free|noise cancelling|long battery life|"
                "memory foam|non slip bottom|adjustable height|waterproof|usb charging|quick dry"
            ),
            "size": _pool("small|medium|large|x-large|queen|king|twin|8 inch|12 ounce"),
            "role": _pool("my daughter|a teenager|my office|a small kitchen|my grandfather|a college dorm"),
            "rating": _pool("3|3.5|4|4.5"),
        },
        {"brand": 120},
        _pool(
            "check the price filter before clicking buy|confirm every required attribute on the item page|"
            "prefer the result whose title matches the most words of the task|"
            "pick size and colour from the options, not from the title|"
            "stop at the first item that satisfies every constraint|"
            "read the price on the item page, not in the result list|"
            "search with the brand and the product name together|"
            "go back to the results when an attribute is missing"
        ),
        _pool(
            "buy the first search result to save steps|ignore the colour when the price fits|"
            "sponsored results are the best match|skip the item page and buy from the result list|"
            "assume every item ships free"
        ),
    ),
    Domain(
        "household",
        0.55,
        (
            ("Placing an object", "Put a {obj} in {recept}"),
            ("Cleaning then placing", "Put a clean {obj} in {recept}"),
            ("Heating food", "Heat some {food} and put it in {recept}"),
            ("Cooling food", "Cool a {food} and put it on {recept}"),
            ("Finding two objects", "Find two {obj}s and put them in {recept}"),
            ("Examining under light", "Examine the {obj} under the desklamp in the {room}"),
        ),
        {
            "obj": _pool(
                "apple|mug|knife|spoon|book|pencil|cd|cellphone|keychain|towel|soapbar|vase|plate|bowl|"
                "remotecontrol|creditcard|pillow|statue|candle|laptop|watch|newspaper"
            ),
            "food": _pool("apple|potato|egg|tomato|lettuce|bread|mug of water|cup of coffee|slice of pizza"),
            "recept": _pool(
                "countertop 1|countertop 2|fridge 1|microwave 1|sinkbasin 1|cabinet 3|drawer 2|shelf 1|"
                "diningtable 1|sidetable 1|garbagecan 1|sofa 1|desk 1|dresser 1|coffeetable 1"
            ),
        },
        {"room": 40},
        _pool(
            "open a closed receptacle before looking inside it|"
            "look in drawers and cabinets before countertops|"
            "go to the target receptacle only once the object is in hand|use the microwave to heat food|"
            "use the fridge to cool items|clean objects at the sinkbasin first|"
            "check every countertop before opening cabinets|turn on the desklamp before examining"
        ),
        _pool(
            "the object is always on countertop 1|skip opening receptacles and look from afar|"
            "put the object down anywhere once it is found|heat items in the fridge|"
            "give up after checking two places"
        ),
    ),
    Domain(
        "factcheck",
        0.58,
        (
            ("Checking a category claim", "Verify: {name} is a {category}"),
            ("Checking a birthplace", "Verify: {name} was born in {city}"),
            ("Checking authorship", "Verify: {work} was directed by {name}"),
            ("Checking a career fact", "Verify: {name} played for {team} in {year}"),
        ),
        {
            "category": _pool(
                "film|novel|band|footballer|politician|city|river|painter|album|video game|university|actor"
            ),
            "year": tuple(str(y) for y in range(1950, 2024)),
        },
        {"name": 1500, "city": 250, "work": 800, "team": 300},
        _pool(
            "search the exact entity name before any related entity|"
            "cross-check the claim against the first paragraph of the page|"
            "verify dates against the infobox rather than the prose|"
            "answer NOT ENOUGH INFO only after two failed searches|"
            "compare every detail of the claim before choosing SUPPORTS|"
            "quote the sentence that decides the claim|"
            "look up the disambiguation page when the name is common"
        ),
        _pool(
            "a plausible claim is usually true, answer SUPPORTS|"
            "if the first search fails the claim is false|trust the page title alone|"
            "answer from memory without searching"
        ),
    ),
    Domain(
        "multihop",
        0.5,
        (
            ("Comparing two entities", "Which {category} is older, {name} or {name2}?"),
            ("Chaining a director to an award", "What year did {name}, director of {work}, win the {award}?"),
            ("Chaining an organisation to a place", "In which city was the founder of {org} born?"),
            ("Checking a shared origin", "Are {name} and {name2} both from {city}?"),
        ),
        {
            "category": _pool("film|novel|band|album|university|newspaper|magazine|stadium"),
            "award": _pool("Oscar|Grammy|Pulitzer Prize|Booker Prize|Emmy|Nobel Prize"),
        },
        {"name": 1500, "name2": 1500, "city": 250, "work": 800, "org": 300},
        _pool(
            "decompose the question into two hops|answer each hop with its own search|"
            "keep the answer to the span asked for|check both entities before comparing them|"
            "verify dates against the infobox|resolve the bridge entity before the final hop|"
            "search the full name, not a nickname"
        ),
        _pool(
            "answer from the first paragraph of the first page|guess the more famous entity|"
            "skip the second hop when the first page mentions a year|assume both share the same city"
        ),
    ),
)

LESSONS_HELPFUL, LESSONS_HARMFUL = 5, 3  # per topic
HELP, HARM = 0.08, -0.22  # change of the success probability per served lesson of the task's topic
REPEAT, NEAR_REPEAT = 0.15, 0.25  # share of tasks that repeat / nearly repeat a recent one
RECENT = 2_000  # tasks per tenant a repeat is drawn from
VERDICT_RATE, VERDICT_ERROR = 0.15, 0.10  # tasks with explicit verdicts; how often one is wrong
PROPOSE_UNHELPED, PROPOSE_HELPED, PROPOSE_HARMFUL = 0.30, 0.04, 0.30


@dataclass(frozen=True, slots=True)
class Lesson:
    text: str
    topic: int
    helpful: bool


@dataclass(frozen=True, slots=True)
class Task:
    tenant: int
    namespace: str
    topic: int
    text: str


@dataclass
class Tenant:
    index: int
    namespace: str
    domain: Domain
    pools: dict[str, tuple[str, ...]]
    topic_weights: tuple[float, ...]
    lessons: dict[str, Lesson]  # by text
    by_topic: tuple[tuple[Lesson, ...], ...]
    recent: deque[tuple[int, tuple[tuple[str, str], ...]]] = field(
        default_factory=lambda: deque(maxlen=RECENT)
    )


def _invent(rng: random.Random, n: int) -> tuple[str, ...]:
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize())
    return tuple(sorted(out))


def _slots(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def namespace_of(index: int) -> str:
    return f"tenant-{index:02d}"


def make_tenant(index: int, seed: int) -> Tenant:
    rng = random.Random(f"tenant:{seed}:{index}")
    domain = DOMAINS[index % len(DOMAINS)]
    pools = dict(domain.shared)
    for slot, n in domain.invented.items():
        pools[slot] = _invent(rng, n)
    by_topic = []
    for topic, (label, _) in enumerate(domain.topics):
        helpful = rng.sample(domain.helpful, LESSONS_HELPFUL)
        harmful = rng.sample(domain.harmful, LESSONS_HARMFUL)
        by_topic.append(
            tuple(
                [Lesson(f"{label}: {a}.", topic, True) for a in helpful]
                + [Lesson(f"{label}: {a}.", topic, False) for a in harmful]
            )
        )
    topics = len(domain.topics)
    return Tenant(
        index,
        namespace_of(index),
        domain,
        pools,
        tuple(1 / (t + 1) for t in range(topics)),  # a few popular topics, a tail of rarer ones
        {lesson.text: lesson for lessons in by_topic for lesson in lessons},
        tuple(by_topic),
    )


class World:
    """Tasks for the fleet, in order; the tenants are unequal (weight 1/(i+1)), as fleets are."""

    def __init__(self, tenants: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tenants = [make_tenant(i, seed) for i in range(tenants)]
        self.weights = [1 / (i + 1) for i in range(tenants)]

    def task(self) -> Task:
        tenant = self.rng.choices(self.tenants, self.weights)[0]
        roll = self.rng.random()
        if tenant.recent and roll < REPEAT + NEAR_REPEAT:
            topic, values = tenant.recent[int(self.rng.random() * len(tenant.recent))]
            if roll >= REPEAT:  # a near repeat: the same task with one slot changed
                slot = self.rng.randrange(len(values))
                changed = list(values)
                changed[slot] = (values[slot][0], self._value(tenant, values[slot][0]))
                values = tuple(changed)
        else:
            topic = self.rng.choices(range(len(tenant.topic_weights)), tenant.topic_weights)[0]
            template = tenant.domain.topics[topic][1]
            values = tuple((s, self._value(tenant, s)) for s in _slots(template))
        tenant.recent.append((topic, values))
        text = tenant.domain.topics[topic][1].format(**dict(values))
        return Task(tenant.index, tenant.namespace, topic, text)

    def _value(self, tenant: Tenant, slot: str) -> str:
        pool = tenant.pools[slot]
        return pool[int(len(pool) * self.rng.random() ** 1.5)]  # skewed: popular entities recur

    def distinct_tasks(self, n: int) -> list[Task]:
        """``n`` tasks with different texts (fewer if the generator runs dry), for timing samples."""
        seen: dict[str, Task] = {}
        for _ in range(n * 50):
            if len(seen) >= n:
                break
            t = self.task()
            seen.setdefault(t.text, t)
        return list(seen.values())


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the agent reports after a task."""

    resolved: bool
    verdicts: dict[str, str]  # insight id -> helpful | harmful
    proposal: str | None


class Agent:
    """Turns the served insights into an outcome: helpful lessons of the task's topic raise the
    chance of success, harmful ones lower it; lessons of other topics change nothing."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"agent:{seed}")

    def outcome(self, tenant: Tenant, task: Task, served: list[tuple[str, str]]) -> Outcome:
        """``served``: (insight id, text) of what the retrieval returned."""
        lessons = [(i, tenant.lessons.get(text)) for i, text in served]
        on_topic = [(i, lesson) for i, lesson in lessons if lesson is not None and lesson.topic == task.topic]
        p = tenant.domain.base_success + sum(HELP if lesson.helpful else HARM for _, lesson in on_topic)
        resolved = self.rng.random() < min(0.95, max(0.05, p))
        verdicts: dict[str, str] = {}
        if on_topic and self.rng.random() < VERDICT_RATE:
            for i, lesson in on_topic:
                right = self.rng.random() >= VERDICT_ERROR
                verdicts[i] = "helpful" if lesson.helpful == right else "harmful"
        helped = any(lesson.helpful for _, lesson in on_topic)
        chance = PROPOSE_HELPED if helped else PROPOSE_UNHELPED
        proposal = None
        if self.rng.random() < chance:
            pool = tenant.by_topic[task.topic]
            want_helpful = self.rng.random() >= PROPOSE_HARMFUL
            proposal = self.rng.choice([x for x in pool if x.helpful == want_helpful]).text
        return Outcome(resolved, verdicts, proposal)


__all__ = ["DOMAINS", "Agent", "Domain", "Lesson", "Outcome", "Task", "Tenant", "World", "namespace_of"]
