"""One typed settings object, read from ``EVOMEM_*`` environment variables when asked for."""

from __future__ import annotations

from pathlib import Path
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


class Settings(BaseSettings):
    """Every knob of evomem. ``Settings()`` reads the environment at the moment it is built."""

    model_config = SettingsConfigDict(env_prefix="EVOMEM_", extra="ignore", frozen=True)

    data_dir: Path = Path("./.evomem")
    redis_url: str | None = None
    redis_wait_replicas: int = Field(
        0,
        ge=0,
        description="replicas that must hold a reported event, and an event's edits, before either is acked",
    )
    redis_wait_timeout_ms: int = Field(1000, ge=1, description="how long to wait for those replicas")
    broker_url: str | None = None
    qdrant_url: str | None = None
    index_dir: Path | None = Field(
        None,
        description="this process's embedded Qdrant store (its index replica); unset: DATA_DIR/qdrant",
    )
    qdrant_api_key: SecretStr | None = None
    index_memory: Literal["pinned", "cached", "cold"] = Field(
        "pinned",
        description="where the embedded store keeps its vectors' index: pinned in RAM, cached (mapped, "
        "paged in on use), cold (read from disk); the payload is always on disk",
    )
    index_flush_s: float = Field(
        5.0,
        ge=0,
        le=3600,
        description="seconds between flushes of the embedded store's namespace shards; the projector "
        "saves its cursor only past what was flushed, so a killed process replays at most this much",
    )

    top_k: int = Field(5, ge=1, le=1000, description="similar past queries per retrieval (k, Eq. 2)")
    hops: int = Field(1, ge=0, le=4, description="query-graph expansion depth (Eq. 3)")
    budget: int = Field(3, ge=1, le=100, description="insights served at most (B, Eq. 10)")
    lambda_: float = Field(
        1.0,
        ge=0.0,
        validation_alias=AliasChoices("EVOMEM_LAMBDA", "lambda_", "lambda"),
        description="conflict penalty weight (λ, Eq. 8)",
    )
    operations: OperationsMode = "all"
    archive_policy: ArchivePolicy = "evidence"
    archive_ratio: float = Field(1.0, ge=0.0)
    archive_min: int = Field(
        2,
        ge=1,
        le=1000,
        description="judged negatives an insight needs at least before the evidence policy archives it",
    )
    archive_streak: int = Field(
        3,
        ge=0,
        le=1000,
        description="judged harms in a row after which the evidence policy archives an insight whatever "
        "its support (what helped before and harms now), plus one per power of ten of its judged "
        "positives; 0: never",
    )
    scoring: Scoring = Field(
        "weighted", description="weighted: support and conflict weighted by similarity; count: Eq. 8-9"
    )
    similarity: Similarity = Field(
        "idf",
        description="Eq. 2's search for similar past queries: cosine (the paper) or idf (each word weighted "
        "by how rare it is among the namespace's queries; sparse embedders only)",
    )
    similarity_power: float = Field(
        3.0, ge=1.0, le=8.0, description="weighted scoring counts a query by its similarity to this power"
    )
    relevance_power: float = Field(
        2.0,
        ge=0.0,
        le=4.0,
        description="weighted scoring multiplies a score by how much the insight's text is about the task, "
        "to this power",
    )
    relevance: Similarity = Field(
        "idf",
        description="how that text relevance weighs words: cosine (every word alike) or idf (the candidates "
        "it ranks first ranked again with each word 1-2-gram weighed by how rare it is among the "
        "namespace's insights)",
    )
    evidence_search: int = Field(
        8,
        ge=0,
        le=100,
        description="insights nearest to the task's text (hashing embedder: its word 1-2-grams) whose "
        "evidence a retrieval also searches: the k past queries most similar to the task among their "
        "evidence join Eq. 2's; 0: Eq. 2 alone",
    )
    archived_repeats: ArchivedRepeats = Field(
        "evidence",
        description="a proposed insight that repeats an archived one: evidence (its query becomes that "
        "insight's evidence, forwarded to what replaced it; no new node) | restore (the same, and a judged "
        "repeat that leaves its judged harms below the archive threshold makes it active again) | new (a "
        "new node, the paper's ADD)",
    )
    query_degree: int = Field(
        32, ge=0, le=10_000, description="neighbours each query keeps in the query graph, the most similar"
    )
    rules_credit: RulesCredit = Field(
        "relevant", description="which served insights the rule controller credits or blames"
    )
    rules_relevance: float = Field(
        0.7,
        ge=0.0,
        le=1.0,
        description="similarity from which the rule controller counts an insight relevant",
    )

    embedder: Literal["hashing", "openai"] = "hashing"
    embedding_model: str = "text-embedding-3-small"
    embedding_dim: int = Field(1536, ge=8)

    controller: Literal["auto", "llm", "rules"] = "auto"
    llm_model: str = "gpt-4o-mini"
    llm_base_url: str | None = Field(
        None, validation_alias=AliasChoices("EVOMEM_LLM_BASE_URL", "OPENAI_BASE_URL", "llm_base_url")
    )
    llm_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("EVOMEM_LLM_API_KEY", "OPENAI_API_KEY", "llm_api_key")
    )
    # The LLM controller (evomem/adapters/llm). Retries are the worker's: the openai client's own stay at 0.
    llm_timeout_s: float = Field(30.0, gt=0, description="timeout of one LLM request")
    llm_max_tokens: int = Field(4096, ge=64, description="most completion tokens of one LLM call")
    llm_completion_tokens_per_event: int = Field(
        256, ge=32, description="completion tokens a call asks for per event it carries"
    )
    llm_temperature: float = Field(0.0, ge=0.0, le=2.0)
    llm_events_per_call: int = Field(8, ge=1, le=64, description="events judged in one LLM call")
    llm_concurrency: int = Field(8, ge=1, le=256, description="LLM calls in flight per worker process")
    llm_max_attempts: int = Field(3, ge=1, le=10, description="tries of an event whose LLM answer is invalid")
    llm_transient_attempts: int = Field(4, ge=1, le=20, description="tries of a call on 429, 5xx, timeouts")
    llm_backoff_base_s: float = Field(0.5, gt=0, description="first backoff after a transient LLM failure")
    llm_backoff_max_s: float = Field(8.0, gt=0, description="longest exponential backoff")
    llm_rpm: int = Field(0, ge=0, description="LLM requests per minute shared by all workers; 0: no limit")
    llm_tpm: int = Field(0, ge=0, description="LLM tokens per minute shared by all workers; 0: no limit")
    llm_event_tokens: int = Field(1500, ge=100, description="prompt budget of one event's own text")
    llm_tokenizer: str = Field("auto", description="auto | estimate | a tiktoken encoding name")
    llm_response_format: Literal["auto", "json_schema", "json_object_schema", "json_object"] = "auto"
    llm_price_prompt_per_1k: float | None = Field(None, ge=0, description="USD per 1k prompt tokens")
    llm_price_completion_per_1k: float | None = Field(None, ge=0, description="USD per 1k completion tokens")
    duplicate_threshold: float = Field(
        0.9, gt=0, le=1, description="cosine from which a new insight text repeats an active one"
    )

    stream_maxlen: int = Field(
        1_000_000, ge=1, description="length past which acknowledged events are trimmed"
    )
    retrieval_ttl_s: int = Field(86_400, ge=60, description="how long a retrieval can be reported on")
    consumer_name: str | None = None

    url: str | None = Field(None, description="a retrieval service: Memory.open() becomes its client")
    token: SecretStr | None = Field(None, description="bearer token for EVOMEM_URL")
    tokens: SecretStr | None = Field(
        None, description="the service's tokens: 'TOKEN=ns1,ns2;TOKEN2=*' (unset: no auth, loopback only)"
    )
    http_host: str = "127.0.0.1"
    http_port: int = Field(8765, ge=0, le=65535)
    http_max_body_bytes: int = Field(1 << 20, ge=1024, description="largest request body the service reads")
    http_idle_timeout_s: float = Field(
        30.0, gt=0, description="a connection silent this long (no request, or a stalled body) is closed"
    )
    http_max_connections: int = Field(
        1000, ge=1, description="open connections past which the service answers 503 at once"
    )
    # The HTTP edge of `evomem serve` and `evomem mcp --http` (evomem/service/edge.py).
    http_max_head_bytes: int = Field(
        32 << 10,
        ge=1024,
        le=1 << 20,
        description="largest request head (request line and header fields); past it: 431",
    )
    http_max_headers: int = Field(
        100, ge=8, le=10_000, description="header fields a request may carry at most; past them: 431"
    )
    http_head_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="a request head must arrive within this of its first byte (408)"
    )
    http_body_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="a request body must arrive within this of its head (408)"
    )
    http_max_connections_per_client: int = Field(
        256,
        ge=1,
        description="open connections one client address may hold; past them it gets 503 (behind a "
        "proxy every client has the proxy's address: raise it to the cap)",
    )
    mcp_sessions_per_token: int = Field(
        100,
        ge=1,
        description="MCP sessions one token (or, open, the whole server) may hold open; past them: 429",
    )

    http_workers: int = Field(
        1,
        ge=1,
        le=64,
        description="retrieval processes `evomem serve` runs on its port, each with its own index replica",
    )
    stale_after_s: float = Field(
        5.0,
        gt=0,
        description="a retrieval process whose index is this far behind the change feed answers stale",
    )

    text_cache: int = Field(
        1_048_576,
        ge=0,
        le=1 << 30,
        description="insight word sets a retrieval process keeps in memory for text relevance (about "
        "400 B each: 400 MB at a million), the oldest dropped first; 0: read every candidate's text",
    )
    word_table: int = Field(
        1_048_576,
        ge=0,
        le=1 << 30,
        description="word counts a retrieval process on the embedded index keeps whole for relevance=idf "
        "(about 90 B each), across namespaces; a namespace with more words has the counts a retrieval "
        "needs read each time; 0: always read them",
    )
    text_cache_warm: bool = Field(
        True,
        description="a following retrieval process (the service, MCP, Memory.follow) fills its word-set "
        "cache from the index's active insights in a background thread at start, up to text_cache",
    )
    tenancy_cache_s: float = Field(
        2.0,
        ge=0.0,
        description="how long a process keeps per-namespace settings and run-time tokens it has read",
    )
    tenancy_cache_entries: int = Field(
        10_000,
        ge=1,
        description="per-namespace settings, and run-time tokens, a process keeps at most (each)",
    )

    # The MCP server (`evomem mcp`).
    mcp_namespace: str | None = Field(
        None, description="the namespace the MCP server's tools use when a call names none; binds stdio to it"
    )
    mcp_port: int = Field(8766, ge=0, le=65535, description="port of `evomem mcp --http`")
    mcp_consolidate: bool = Field(
        True, description="on the local stores, the MCP server consolidates reported events itself"
    )

    # Per-namespace quotas, counted in Redis over one-minute windows; 0: no limit. Past one, the
    # service answers 429 with Retry-After and the SDK raises QuotaExceededError.
    quota_events_per_minute: int = Field(60_000, ge=0, description="events one namespace may report a minute")
    quota_event_bytes_per_minute: int = Field(
        256 << 20, ge=0, description="bytes of event documents one namespace may report a minute"
    )
    quota_retrievals_per_minute: int = Field(
        120_000,
        ge=0,
        description="retrievals (each keeps a retrieval record) one namespace may make a minute",
    )

    batch_size: int = Field(256, ge=1, le=10_000, description="events a worker reads per batch")
    batch_wait_ms: int = Field(200, ge=0, description="how long a worker waits for a batch to fill")
    claim_idle_ms: int = Field(120_000, ge=100, description="an unacked event idle this long is reclaimed")
    max_deliveries: int = Field(5, ge=1, description="deliveries before an event is dead-lettered")
    batch_time_limit_s: float = Field(60.0, gt=0, description="a worker task's soft time limit")
    visibility_timeout_s: int = Field(600, ge=1, description="Celery broker visibility timeout")
    worker_concurrency: int = Field(2, ge=1, description="processes per `evomem worker`")
    pump_interval_s: float = Field(0.2, gt=0, description="how often a worker checks the stream for work")
    otel_exporter: Literal["none", "console", "otlp"] = Field(
        "none", description="OpenTelemetry exporter of evomem's own processes (needs the otel extra)"
    )
    otel_service_name: str = Field("evomem", description="service.name of those processes' spans")
    worker_metrics_port: int | None = Field(
        None, ge=0, le=65535, description="where each `evomem worker` serves /metrics; unset: nowhere"
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

    @property
    def allowed_operations(self) -> frozenset[str]:
        return ALLOWED_OPERATIONS[self.operations]

    @property
    def embedded_redis(self) -> bool:
        return self.redis_url is None

    @property
    def embedded_qdrant(self) -> bool:
        return self.qdrant_url is None


class NamespaceOverrides(BaseModel):
    """What a namespace may set for itself, with the same bounds as the global settings."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    lambda_: float | None = Field(None, ge=0.0, alias="lambda", description="conflict penalty weight λ")
    budget: int | None = Field(None, ge=1, le=100, description="insights served at most")
    top_k: int | None = Field(None, ge=1, le=1000, description="similar past queries per retrieval")
    hops: int | None = Field(None, ge=0, le=4, description="query-graph expansion depth")
    scoring: Scoring | None = None
    similarity_power: float | None = Field(None, ge=1.0, le=8.0)
    relevance_power: float | None = Field(None, ge=0.0, le=4.0)
    relevance: Similarity | None = None
    evidence_search: int | None = Field(None, ge=0, le=100)
    archive_policy: ArchivePolicy | None = None
    archive_ratio: float | None = Field(None, ge=0.0)
    archive_min: int | None = Field(None, ge=1, le=1000)
    archive_streak: int | None = Field(None, ge=0, le=1000)

    def set_fields(self) -> dict[str, Any]:
        """The overridden fields, by their ``Settings`` names."""
        return self.model_dump(exclude_none=True)


#: The names a user types (``lambda``, not ``lambda_``).
OVERRIDABLE = tuple(f.alias or name for name, f in NamespaceOverrides.model_fields.items())


__all__ = [
    "ALLOWED_OPERATIONS",
    "OVERRIDABLE",
    "ArchivePolicy",
    "ArchivedRepeats",
    "NamespaceOverrides",
    "OperationsMode",
    "RulesCredit",
    "Scoring",
    "Settings",
]
