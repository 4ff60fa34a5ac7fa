"""Where redis-om would fit evomem, measured against what evomem does instead (README, Storage).

Not part of the package: run it with redis-om installed beside evomem,
``pip install redis-om && python bench/redis_om_fit.py`` (then ``pip uninstall redis-om``), on the
embedded Redis 6.2 (no query engine). Writes its figures under ``"redis_om"`` in bench/results.json.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine_info, merge_results
from evomem import keys
from evomem.adapters.redis.connection import EmbeddedRedis, connect
from evomem.adapters.redis.namespace_settings import NamespaceSettings
from evomem.settings import Settings

N = 3000
OTHER_KEYS = 50_000  # the rest of a small memory's keyspace, which a SCAN walks through
RESULTS = Path(__file__).with_name("results.json")


def per_call_us(fn: Any, n: int = N) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return round((time.perf_counter() - t0) / n * 1e6, 1)


def import_ms(module: str) -> float:
    """What importing ``module`` adds to a process that has imported evomem already."""
    code = f"import evomem, time; t=time.perf_counter(); import {module}; print(time.perf_counter()-t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return round(float(out) * 1000, 1)


def main() -> dict[str, Any]:
    from redis_om import Field, HashModel, get_redis_connection

    out: dict[str, Any] = {"redis_om_version": importlib.metadata.version("redis-om")}
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp))
        url = server.ensure()
        raw = connect(url)
        om = get_redis_connection(url=url, decode_responses=True)  # redis-om wants decoded replies
        out["redis_version"] = raw.info("server")["redis_version"]

        class Unindexed(HashModel):  # type: ignore[misc]
            namespace: str = Field(primary_key=True)
            budget: int | None = None

            class Meta:
                database = om

        try:
            Unindexed(namespace="alpha", budget=2).save()
            out["save_without_index"] = "ok"
        except Exception as exc:
            out["save_without_index"] = f"{type(exc).__name__}: {str(exc)[:90]}"

        class NsSettings(HashModel, index=True):  # type: ignore[call-arg,misc]
            namespace: str = Field(primary_key=True)
            lambda_: float | None = None
            budget: int | None = None
            archive_policy: str | None = None

            class Meta:
                database = om
                global_key_prefix = "bench"
                model_key_prefix = "nsset"

        record = NsSettings(namespace="alpha", lambda_=2.0, budget=1)
        record.save()
        out["om_key"] = record.key()
        try:
            NsSettings.find(NsSettings.budget == 1).all()
            out["find"] = "ok"
        except Exception as exc:
            out["find"] = f"{type(exc).__name__}: {str(exc)[:90]}"

        settings = Settings(redis_url=url)
        store = NamespaceSettings(raw, settings, ttl_s=3600)
        store.set("alpha", {"lambda": 2.0, "budget": 1})
        uncached = NamespaceSettings(raw, settings, ttl_s=0)
        out["get_us"] = {
            "redis_om_get": per_call_us(lambda: NsSettings.get("alpha")),
            "evomem_hgetall_validated": per_call_us(lambda: uncached.get("alpha")),
            "evomem_resolver_uncached": per_call_us(lambda: uncached("alpha")),
            "evomem_resolver_cached": per_call_us(lambda: store("alpha"), n=N * 30),
        }
        out["save_us"] = {
            "redis_om_save": per_call_us(lambda: NsSettings(namespace="alpha", lambda_=2.0, budget=1).save()),
            "evomem_set": per_call_us(lambda: store.set("alpha", {"budget": 1}), n=N // 3),
        }
        pipe = raw.pipeline(transaction=False)
        for i in range(OTHER_KEYS):
            pipe.set(f"other:{i}", "x")
        pipe.execute()
        for i in range(20):
            NsSettings(namespace=f"ns{i}", budget=1).save()
            store.set(f"ns{i}", {"budget": 1})
        out["list_20_of_50k_keys_ms"] = {
            "redis_om_all_pks_scan": round(per_call_us(lambda: list(NsSettings.all_pks()), n=20) / 1000, 2),
            "evomem_index_set": round(per_call_us(store.all, n=20) / 1000, 2),
        }
        out["evomem_key"] = keys.namespace_settings("alpha")
        raw.close()
        om.close()
        server.stop()
    out["import_ms_after_evomem"] = {"redis_om": import_ms("redis_om")}
    deps = ["redis-om", "redisvl", "ml_dtypes", "hiredis", "jsonpath-ng", "python-ulid", "types-redis"]
    out["pulls_in"] = {d: importlib.metadata.version(d) for d in deps if _installed(d)}
    out["note"] = "one process on a shared 2-core machine; compare within this run"
    out["date"] = time.strftime("%Y-%m-%d")
    out["machine"] = machine_info()
    return out


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    figures = main()
    merge_results(RESULTS, "redis_om", figures)
    sys.stdout.write(json.dumps(figures, indent=2) + "\n")
