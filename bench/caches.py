"""evomem bench_caches: hit rate against size of the caches a retrieval process keeps, each sized by
a setting. The per-namespace settings (``EVOMEM_TENANCY_CACHE_ENTRIES``, the resolver every
retrieval calls) and the run-time tokens (the same bound) are driven through their real classes on
the embedded Redis, by requests whose namespaces (tokens) follow a Zipf law, as a fleet's traffic
does; the TTL is set long so that only the size decides. Figures merged under "caches" in
bench/results.json."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from evomem.adapters.redis.api_tokens import TokenStore
from evomem.adapters.redis.connection import EmbeddedRedis, connect
from evomem.adapters.redis.namespace_settings import NamespaceSettings
from evomem.settings import Settings

KEY = "caches"


def zipf_stream(n_keys: int, n_requests: int, s: float, seed: int) -> np.ndarray:
    """Key ranks 0..n_keys-1 drawn with P(rank r) ∝ 1 / (r+1)^s."""
    weights = 1.0 / np.arange(1, n_keys + 1) ** s
    rng = np.random.default_rng(seed)
    return rng.choice(n_keys, size=n_requests, p=weights / weights.sum())


def namespace_hit_rate(url: str, stream: np.ndarray, entries: int) -> dict[str, Any]:
    settings = Settings(redis_url=url, tenancy_cache_entries=entries)
    resolver = NamespaceSettings(connect(url), settings, ttl_s=3600)
    t0 = time.perf_counter()
    for rank in stream:
        resolver(f"ns-{rank}")
    elapsed = time.perf_counter() - t0
    total = resolver.hits + resolver.misses
    return {
        "entries": entries,
        "hit_rate": round(resolver.hits / total, 4),
        "us_per_call": round(elapsed / total * 1e6, 2),
        "held": len(resolver._cache),
    }


def token_hit_rate(url: str, tokens: list[str], stream: np.ndarray, entries: int) -> dict[str, Any]:
    store = TokenStore(connect(url), ttl_s=3600, max_entries=entries)
    for rank in stream:
        store.lookup(tokens[rank])
    total = store.hits + store.misses
    return {"entries": entries, "hit_rate": round(store.hits / total, 4), "held": len(store._cache)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(x) for x in args.sizes.split(",")]
    stream = zipf_stream(args.keys, args.requests, args.zipf, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp))
        url = server.ensure()
        try:
            store = TokenStore(connect(url))
            tokens = [store.create([f"ns-{i}"])[0] for i in range(args.keys)]
            ns_rows = [namespace_hit_rate(url, stream, n) for n in sizes]
            tok_rows = [token_hit_rate(url, tokens, stream, n) for n in sizes]
        finally:
            server.stop()
    return {
        "keys": args.keys,
        "requests": args.requests,
        "zipf_s": args.zipf,
        "distinct_in_stream": len(np.unique(stream)),
        "namespace_settings": ns_rows,
        "tokens": tok_rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.caches", description=__doc__)
    parser.add_argument(
        "--keys", type=int, default=20_000, help="namespaces (and tokens) (default: %(default)s)"
    )
    parser.add_argument("--requests", type=int, default=200_000, help="lookups (default: %(default)s)")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent (default: %(default)s)")
    parser.add_argument("--sizes", default="10,100,1000,10000", help="cache entries (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=common.DEFAULT_OUT)
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    figures = run(args)
    section = {
        "timestamp": started.isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.caches", *sys.argv[1:]]),
        "machine": common.machine_info(),
        **figures,
    }
    common.merge_results(args.out, KEY, section)
    print(f"{figures['keys']:,} namespaces, {figures['requests']:,} lookups, Zipf s={figures['zipf_s']}")
    print(f"{'entries':>8}{'settings hit':>14}{'µs/call':>9}{'tokens hit':>12}")
    for ns, tok in zip(figures["namespace_settings"], figures["tokens"], strict=True):
        print(f"{ns['entries']:>8,}{ns['hit_rate']:>14.1%}{ns['us_per_call']:>9.2f}{tok['hit_rate']:>12.1%}")
    print(f"merged under {KEY!r} in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
