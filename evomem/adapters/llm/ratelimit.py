"""A rate limit shared by every worker through Redis: requests and tokens per minute, Retry-After.

Two token buckets (requests, tokens), each refilled continuously at its per-minute rate up to one
minute's worth, are checked and debited in one Lua script, against Redis' clock, so workers on
different machines share one budget and never race. A ``Retry-After`` from the endpoint blocks
every worker until it passes. Tokens are reserved before a call from the prompt's estimate and
settled afterwards with what the endpoint reports.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from evomem import keys
from evomem.adapters.llm.endpoint import EndpointError
from evomem.adapters.redis.connection import Client, mapped
from evomem.errors import TransientError

# KEYS: requests bucket, tokens bucket, blocked-until. ARGV: rpm, tpm, tokens wanted.
# Returns "0" when granted (both buckets debited), else the seconds to wait, as a string (a Lua
# number would reach the client truncated to an integer).
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local blocked = tonumber(redis.call('GET', KEYS[3]) or '0')
if blocked > now then return tostring(blocked - now) end
local function level(key, cap)
  local v = redis.call('HMGET', key, 'level', 'at')
  local l, at = tonumber(v[1]), tonumber(v[2])
  if l == nil then return cap end
  return math.min(cap, l + (now - at) * cap / 60)
end
local rpm, tpm, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local wait, rl, tl = 0, 0, 0
if rpm > 0 then
  rl = level(KEYS[1], rpm)
  if rl < 1 then wait = math.max(wait, (1 - rl) * 60 / rpm) end
end
if tpm > 0 then
  cost = math.min(cost, tpm)
  tl = level(KEYS[2], tpm)
  if tl < cost then wait = math.max(wait, (cost - tl) * 60 / tpm) end
end
if wait > 0 then return tostring(wait) end
if rpm > 0 then
  redis.call('HSET', KEYS[1], 'level', tostring(rl - 1), 'at', tostring(now))
  redis.call('EXPIRE', KEYS[1], 120)
end
if tpm > 0 then
  redis.call('HSET', KEYS[2], 'level', tostring(tl - cost), 'at', tostring(now))
  redis.call('EXPIRE', KEYS[2], 120)
end
return '0'
"""

# KEYS: tokens bucket. ARGV: tpm, tokens to give back (negative: to charge on top).
_SETTLE = """
local tpm = tonumber(ARGV[1])
if tpm <= 0 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local v = redis.call('HMGET', KEYS[1], 'level', 'at')
local l, at = tonumber(v[1]), tonumber(v[2])
if l == nil then l, at = tpm, now end
l = math.min(tpm, math.min(tpm, l + (now - at) * tpm / 60) + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'level', tostring(l), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], 120)
return 1
"""

# KEYS: blocked-until. ARGV: seconds. Extends the block, never shortens it.
_BLOCK = """
local t = redis.call('TIME')
local untl = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if untl > cur then
  redis.call('SET', KEYS[1], tostring(untl), 'PX', math.ceil(tonumber(ARGV[1]) * 1000) + 1000)
end
return 1
"""


class RateLimiter:
    """The shared limit of one endpoint and model (``scope``); ``rpm``/``tpm`` of 0 mean no limit."""

    def __init__(
        self,
        client: Client,
        scope: str,
        rpm: int = 0,
        tpm: int = 0,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.r = mapped(client)
        self.rpm, self.tpm = rpm, tpm
        self._keys = [
            keys.llm_limit(scope, "requests"),
            keys.llm_limit(scope, "tokens"),
            keys.llm_limit(scope, "blocked"),
        ]
        self._acquire = client.register_script(_ACQUIRE)
        self._settle = client.register_script(_SETTLE)
        self._block = client.register_script(_BLOCK)
        self.sleep = sleep
        self.rng = rng or random.Random()

    def try_acquire(self, tokens: int) -> float:
        """Take one request and ``tokens`` from the budget now, or say how long to wait (seconds)."""
        try:
            reply = self._acquire(keys=self._keys, args=[self.rpm, self.tpm, max(0, tokens)])
        except TransientError as exc:
            raise TransientError("redis unreachable while taking the LLM rate limit") from exc
        return float(reply.decode() if isinstance(reply, bytes) else reply)

    def acquire(self, tokens: int, deadline: float) -> None:
        """Wait for the budget. A wait that would pass ``deadline`` (a ``time.monotonic()``) is
        waited up to the deadline and then raises ``EndpointError``: the caller gives up in time and
        its events stay pending, and a redelivery comes no sooner than a batch's time later (giving
        up at once would spend an event's deliveries while the endpoint still says wait)."""
        while True:
            wait = self.try_acquire(tokens)
            if wait <= 0:
                return
            wait += self.rng.uniform(0, 0.1 * wait + 0.01)  # so waiting workers do not all wake at once
            left = deadline - time.monotonic()
            if wait > left:
                self.sleep(max(0.0, left))
                raise EndpointError(
                    "rate_limit_wait",
                    f"LLM rate limit: {wait:.1f} s to wait, more than the batch has left",
                    retry_now=False,
                )
            self.sleep(wait)

    def settle(self, reserved: int, used: int) -> None:
        """Give back what a call did not use, or charge what it used beyond its reservation."""
        if self.tpm > 0 and used != reserved:
            self._settle(keys=[self._keys[1]], args=[self.tpm, reserved - used])

    def block(self, seconds: float) -> None:
        """Hold every worker back for ``seconds`` (the endpoint's Retry-After)."""
        if seconds > 0:
            self._block(keys=[self._keys[2]], args=[f"{seconds:.3f}"])


__all__ = ["RateLimiter"]
