"""The event stream's own guarantees: trimming never drops an unacknowledged event, stale entries
are reclaimed with their delivery count, lag is visible."""

from __future__ import annotations

import redis

from evomem.adapters.redis.events import EventStream


def test_trimming_keeps_every_event_that_is_pending_or_unread(redis_client: redis.Redis) -> None:
    stream = EventStream(redis_client, maxlen=5)
    ids = [stream.publish_raw(f'{{"n": {i}}}') for i in range(20)]
    first = stream.read("a", count=8)  # delivered to a, 5 acked, 3 left pending
    stream.ack([e.id for e in first[:5]])
    assert stream.info()["lag"] == 12 and stream.info()["pending"] == 3
    dropped = stream.trim()
    assert dropped == 5, "only the acknowledged entries before the first pending one go"
    left = [e[0].decode() for e in redis_client.xrange(stream.stream)]
    assert left == ids[5:]
    assert {e.id for e in stream.read("a", count=8)} == {e.id for e in first[5:]}  # still readable
    assert stream.trim() == 0, "nothing more may go while those are pending"


def test_a_short_stream_is_not_trimmed(redis_client: redis.Redis) -> None:
    stream = EventStream(redis_client, maxlen=100)
    for i in range(10):
        stream.publish_raw(f'{{"n": {i}}}')
    stream.ack([e.id for e in stream.read("a", count=10)])
    assert stream.trim() == 0 and stream.info()["length"] == 10


def test_entries_of_a_dead_consumer_are_reclaimed_with_their_delivery_count(
    redis_client: redis.Redis,
) -> None:
    stream = EventStream(redis_client)
    stream.publish_raw('{"n": 1}')
    (taken,) = stream.read("dead", count=1)
    assert stream.claim_stale("alive", min_idle_ms=60_000, count=10) == [], "not idle long enough yet"
    (claimed,) = stream.claim_stale("alive", min_idle_ms=0, count=10)
    assert claimed.id == taken.id and claimed.deliveries == 2
    assert stream.info()["consumers"] == 2


def test_a_released_entry_keeps_the_delivery_count_it_had(redis_client: redis.Redis) -> None:
    """After a batch failed on an outage, its entries come back counted as before that read."""
    stream = EventStream(redis_client)
    stream.publish_raw('{"n": 1}')
    stream.read("a", count=1)
    (again,) = stream.read("a", count=1)
    assert again.deliveries == 2
    stream.release("a", [again])
    (after,) = stream.read("a", count=1)
    assert after.deliveries == 2, "the released read is not counted"
    assert stream.info()["pending"] == 1
