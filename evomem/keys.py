"""Every Redis key and Qdrant collection name evomem uses, in one place.

Layout 2. Everything of one namespace lives under ``em:{<namespace>}:<kind>:<id>``:

* the namespace sits between braces, which a namespace may not contain (``schemas.Namespace``), and
  is Redis Cluster's hash tag, so one namespace's keys share a slot;
* ``<kind>`` is one of a fixed set of words without ``:``, and the node id always comes last.

So a key names exactly one (namespace, kind, id) whatever characters the id holds: the query
``qq:nbr`` is the query ``qq:nbr``, never the neighbour set of the query ``qq``. Node ids are
scoped to their namespace: the same query id in two namespaces is two queries. The keys that are not
a namespace's own (the streams, the id directory) start with ``em:`` and a letter, never a brace.
The Lua scripts receive the namespace prefix (``ns_prefix``) and add ``:<kind>:<id>`` themselves,
with the kind words spelled here (``LUA_KINDS`` is the list they rely on).
"""

from __future__ import annotations

PREFIX = "em"
LAYOUT = 2
LAYOUT_KEY = f"{PREFIX}:layout"  # the layout version of the data in this Redis

EVENTS_STREAM = f"{PREFIX}:events"  # task events, field "event" = JSON document
CHANGES_STREAM = f"{PREFIX}:changes"  # (kind, ns, id, version) of every changed node, for projectors
HISTORY_STREAM = f"{PREFIX}:history"  # append-only edit history, one entry per applied edit
DLQ_STREAM = f"{PREFIX}:dlq"  # dead letters, with the reason
CHANGES_DEAD = f"{PREFIX}:changes:dead"  # changes the projector could never apply, with the reason
CONSUMER_GROUP = "consolidators"
NAMESPACES = f"{PREFIX}:namespaces"  # set of namespaces ever written
INSIGHT_DIRECTORY = f"{PREFIX}:ids"  # hash: insight id -> its namespace (insight ids are unique)

QUERY_COLLECTION = "evomem_queries_v3"  # the layout is in the name: a new layout, a new read model
INSIGHT_COLLECTION = "evomem_insights_v3"

#: The kind words of a namespace's keys, as the Lua scripts spell them after ``ns_prefix``.
LUA_KINDS = (
    "ins",
    "ins.pos",
    "ins.neg",
    "ins.edges",
    "ins.hist",
    "ins.inh",
    "q",
    "q.nbr",
    "q.pos",
    "q.neg",
    "applied",
    "decision",
    "retrieval",
    "insights",
    "queries",
    "texts",
    "dup",
    "words",
    "quota",
    "recent",
    "outbox",
    "control",
    "reverted",
)


def ns_prefix(namespace: str) -> str:
    """``em:{namespace}``: the start of every key of the namespace, and its Cluster hash tag."""
    return f"{PREFIX}:{{{namespace}}}"


def _key(namespace: str, kind: str, node_id: str = "") -> str:
    return f"{PREFIX}:{{{namespace}}}:{kind}:{node_id}" if node_id else f"{PREFIX}:{{{namespace}}}:{kind}"


def insight(namespace: str, insight_id: str) -> str:
    """Hash: text, state, version, revised_from/to, created_by_event, times."""
    return _key(namespace, "ins", insight_id)


def insight_positive(namespace: str, insight_id: str) -> str:
    """Set Ω⁺: the queries the insight helped."""
    return _key(namespace, "ins.pos", insight_id)


def insight_negative(namespace: str, insight_id: str) -> str:
    """Set Ω⁻: the queries the insight harmed."""
    return _key(namespace, "ins.neg", insight_id)


def insight_edges(namespace: str, insight_id: str) -> str:
    """Hyperedges (ι_a, ι_b, q) into this insight, stored as "a|q" members (Eq. 18)."""
    return _key(namespace, "ins.edges", insight_id)


def insight_history(namespace: str, insight_id: str) -> str:
    """List of this insight's edit records (JSON)."""
    return _key(namespace, "ins.hist", insight_id)


def insight_inherits(namespace: str, insight_id: str) -> str:
    """Set: the insights whose Ω⁺ this one took over when it revised or absorbed them (transitively).

    Retrieval reads Ω⁺ from the query side, so a query that supports one of these supports this one."""
    return _key(namespace, "ins.inh", insight_id)


def query(namespace: str, query_id: str) -> str:
    return _key(namespace, "q", query_id)


def query_neighbours(namespace: str, query_id: str) -> str:
    """Sorted set: the query's neighbours in the query graph, scored by cosine similarity."""
    return _key(namespace, "q.nbr", query_id)


def query_supports(namespace: str, query_id: str) -> str:
    """Set: the insights this query is positive evidence of (Ω⁺ seen from the query side)."""
    return _key(namespace, "q.pos", query_id)


def query_harms(namespace: str, query_id: str) -> str:
    """Set: the insights this query is negative evidence of (Ω⁻ seen from the query side)."""
    return _key(namespace, "q.neg", query_id)


def namespace_insights(namespace: str) -> str:
    return _key(namespace, "insights")


def namespace_queries(namespace: str) -> str:
    return _key(namespace, "queries")


def namespace_texts(namespace: str) -> str:
    """Hash: digest of normalised insight text -> insight id, to refuse exact duplicate ADDs."""
    return _key(namespace, "texts")


def duplicate_band(namespace: str, band: str) -> str:
    """Set: the insights whose text falls in one locality-sensitive bucket (near-duplicate search)."""
    return _key(namespace, "dup", band)


def insight_words(namespace: str) -> str:
    """Hash: word 1-2-gram feature -> how many of the namespace's insights (every node, archived ones
    too) hold it in their text; ``WORDS_TOTAL``: how many insights were counted; ``WORDS_COMPLETE``:
    present once every insight of the namespace is counted (what text relevance weighs words by)."""
    return _key(namespace, "words")


WORDS_TOTAL = "#n"  # fields of ``insight_words`` that are not features (a feature is a decimal number)
WORDS_COMPLETE = "#complete"


def recent_outcomes(namespace: str) -> str:
    """List, newest first, capped: per applied event "served:harmed:archived" — how many insights it
    judged, how many of those it found harmful (negative evidence), how many it archived or revised."""
    return _key(namespace, "recent")


def applied(namespace: str, event_id: str) -> str:
    """Marker that an event's edits are committed; its value is the result summary."""
    return _key(namespace, "applied", event_id)


def decision(namespace: str, event_id: str) -> str:
    return _key(namespace, "decision", event_id)


def published(namespace: str, event_id: str) -> str:
    """The digest of an event as it was published, for a day: a conflicting one is refused at once,
    before the first is consolidated (after, ``applied`` and ``decision`` say so)."""
    return _key(namespace, "published", event_id)


def event_state(event_id: str) -> str:
    """The state of a reported event for ``GET /v1/events/{id}`` (JSON: its namespace, queued or
    dead-lettered with the reason); with a TTL. Looked up by the event id alone, so not under a
    namespace: the namespace it names is checked against the caller's."""
    return f"{PREFIX}:event:{{{event_id}}}"


def retrieval(namespace: str, retrieval_id: str) -> str:
    return _key(namespace, "retrieval", retrieval_id)


def quota(namespace: str, window: int, kind: str) -> str:
    """Counter of a namespace's ``kind`` (events, bytes, retrievals, record_bytes) in one quota
    window; expires."""
    return _key(namespace, "quota", f"{window}:{kind}")


def namespace_settings(namespace: str) -> str:
    """Hash: the settings this namespace overrides (field -> JSON value); see
    ``evomem.adapters.redis.namespace_settings``."""
    return _key(namespace, "settings")


NAMESPACES_WITH_SETTINGS = f"{PREFIX}:settings:namespaces"  # set: namespaces that override a setting
TOKENS = f"{PREFIX}:tokens"  # hash: sha256 of an API token -> its record (JSON); the token is never kept


def hash_tag(key: str) -> str:
    """What Redis Cluster hashes of ``key``: the text between its first ``{`` and the next ``}``
    when that is not empty, else the whole key."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def barrier(key: str) -> str:
    """A key in ``key``'s hash slot that only a durability check writes (``connection.durable``)."""
    return f"{PREFIX}:barrier:{{{hash_tag(key)}}}"


def outbox(namespace: str, event_id: str) -> str:
    """On a Redis Cluster: what an applied event still has to write outside its namespace's slot
    (the change feed, the history stream, the id directory), until that is written (JSON)."""
    return _key(namespace, "outbox", event_id)


def control(namespace: str, request_id: str) -> str:
    """Marker that an operator's request (revert, pin, unpin) is applied; its value is the result."""
    return _key(namespace, "control", request_id)


def reverted(namespace: str) -> str:
    """Set: the key of every edit of the namespace a request reverted (``lifecycle.edit_key``)."""
    return _key(namespace, "reverted")


def reviews(namespace: str) -> str:
    """Hash: review id -> an edit held for review (JSON, ``evomem.core.review.HeldEdit``)."""
    return _key(namespace, "reviews")


def review_decisions(namespace: str) -> str:
    """Hash: review id -> the decision on it (JSON); set once (HSETNX): the first decision stands."""
    return _key(namespace, "reviewed")


STALE_SWEEP = f"{PREFIX}:sweep:stale"  # set for STALE_SWEEP_S by the process that sweeps (NX)


def projector_cursor(index_identity: str) -> str:
    return f"{PREFIX}:projector:{index_identity}"


def llm_limit(scope: str, kind: str) -> str:
    """The shared LLM rate limit of one endpoint and model: ``requests`` and ``tokens`` buckets
    (hashes of level and time) and ``blocked`` (until when a Retry-After holds every worker back).
    The scope is a hash tag: the three keys share a slot, as the script that reads them needs."""
    return f"{PREFIX}:llm:limit:{{{scope}}}:{kind}"


LLM_USAGE = f"{PREFIX}:llm:usage"  # hash of token counters per model, operation and failure kind


def llm_event_usage(event_id: str) -> str:
    """Tokens spent on one event (its share of each LLM call it was in); expires."""
    return f"{PREFIX}:llm:usage:event:{event_id}"
