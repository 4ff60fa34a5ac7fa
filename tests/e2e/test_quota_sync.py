"""The retrieval quota is counted in the process and added to Redis off the retrieval's path: a
retrieval never waits for Redis's answer, and every process sharing a memory still shares one
count per namespace and window."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from evomem import QuotaExceededError
from evomem.adapters.redis import quotas as quotas_module
from evomem.adapters.redis.quotas import Quotas
from evomem.settings import Settings


def test_processes_share_one_retrieval_count(redis_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quotas_module, "RETRIEVAL_SYNC_S", 0.0)  # a sync at every charge not overlapping one
    settings = Settings(quota_retrievals_per_minute=5, quota_retrieval_bytes_per_minute=0)
    a, b = Quotas(redis_client, settings), Quotas(redis_client, settings)
    try:
        for _ in range(3):
            a.charge_retrieval("alpha")
            a.wait_synced()
        b.charge_retrieval("alpha")  # its first: counted here, the sync brings in the other's 3
        b.wait_synced()
        b.charge_retrieval("beta")  # another namespace's count is its own
        b.charge_retrieval("alpha")  # 5 in all
        with pytest.raises(QuotaExceededError):
            b.charge_retrieval("alpha")  # 6
    finally:
        a.close()
        b.close()


def test_a_retrieval_does_not_wait_for_redis(redis_client: Any) -> None:
    """While Redis holds the sync's reply back, retrievals are still counted and refused at once."""
    release = threading.Event()
    held: list[int] = []

    class Stalled(Quotas):
        def _incr(
            self, namespace: str, amounts: list[tuple[str, int]], window: int | None = None
        ) -> list[int]:
            held.append(1)
            release.wait(10)
            return super()._incr(namespace, amounts, window)

    quotas = Stalled(
        redis_client, Settings(quota_retrievals_per_minute=3, quota_retrieval_bytes_per_minute=0)
    )
    try:
        for _ in range(3):
            quotas.charge_retrieval("alpha")  # the first starts a sync, which stalls
        with pytest.raises(QuotaExceededError):
            quotas.charge_retrieval("alpha")
        assert held and not release.is_set()  # answered while the sync waited
        release.set()
        quotas.wait_synced()
        assert int(redis_client.get(next(iter(redis_client.scan_iter("*retrievals*"))))) == 1  # the first one
        with pytest.raises(QuotaExceededError):  # the synced total is no lower than the local one
            quotas.charge_retrieval("alpha")
    finally:
        release.set()
        quotas.close()


def test_an_unreachable_redis_counts_here(redis_client: Any) -> None:
    class Down(Quotas):
        def _incr(
            self, namespace: str, amounts: list[tuple[str, int]], window: int | None = None
        ) -> list[int]:
            raise ConnectionError("down")

    quotas = Down(redis_client, Settings(quota_retrievals_per_minute=2, quota_retrieval_bytes_per_minute=0))
    try:
        quotas.charge_retrieval("alpha")
        quotas.wait_synced()  # failed: the one retrieval stays counted
        quotas.charge_retrieval("alpha")
        with pytest.raises(QuotaExceededError):
            quotas.charge_retrieval("alpha")
    finally:
        quotas.close()
