"""A circuit breaker whose state lives in Redis, so every worker process shares it.

One Redis hash per breaker (`<prefix>:<name>`) holds the state (closed / open / half_open), the
count of consecutive failures, when it opened, when the next probe may run, the last error and a
few counters. A `SET NX PX` key (`<name>:probe`) makes sure exactly one worker runs the half-open
probe; a capped list (`<name>:events`) keeps the last transitions for the admin and for tests.
Every transition is one Lua script, so two workers never both decide.

- closed: calls go through; `threshold` consecutive failures open the breaker.
- open: no call is made (`acquire` raises BreakerOpen with the time of the next probe) until the
  cool-down has passed.
- half_open: the first caller after the cool-down holds the probe lock and makes one call; its
  success closes the breaker, its failure opens it for another cool-down. Everyone else keeps
  waiting meanwhile.

Times are Unix seconds from the caller's clock (`clock`), so tests can drive the cool-down.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import redis
from django.conf import settings
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

logger = logging.getLogger(__name__)

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"

# The scripts keep the last 50 transitions (LTRIM 0 49).

# KEYS: hash, probe lock, registry, events. ARGV: now, token, probe ttl ms, name, label.
_ACQUIRE = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state or state == 'closed' then return {'closed', ''} end
local now = tonumber(ARGV[1])
local next_probe = tonumber(redis.call('HGET', KEYS[1], 'next_probe_at') or '0')
if state == 'open' and now < next_probe then
  redis.call('HINCRBY', KEYS[1], 'rejected', 1)
  return {'open', tostring(next_probe)}
end
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then
  redis.call('HSET', KEYS[1], 'state', 'half_open', 'probe_started_at', ARGV[1])
  redis.call('LPUSH', KEYS[4], ARGV[1] .. ' half_open probe')
  redis.call('LTRIM', KEYS[4], 0, 49)
  return {'probe', ''}
end
redis.call('HINCRBY', KEYS[1], 'rejected', 1)
local pttl = redis.call('PTTL', KEYS[2])
if pttl < 0 then pttl = 0 end
return {'half_open', tostring(now + pttl / 1000)}
"""

# KEYS: hash, probe lock, registry, events. ARGV: now, token, name, label.
_SUCCESS = """
redis.call('SADD', KEYS[3], ARGV[3])
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
redis.call('HSET', KEYS[1], 'label', ARGV[4], 'last_success_at', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'successes', 1)
local is_probe = redis.call('GET', KEYS[2]) == ARGV[2]
if is_probe then redis.call('DEL', KEYS[2]) end
if state == 'closed' or is_probe then
  redis.call('HSET', KEYS[1], 'state', 'closed', 'failures', 0)
  if state ~= 'closed' then
    redis.call('LPUSH', KEYS[4], ARGV[1] .. ' closed probe succeeded')
    redis.call('LTRIM', KEYS[4], 0, 49)
  end
  return {state, 'closed'}
end
return {state, state}
"""

# KEYS: hash, probe lock, registry, events. ARGV: now, token, name, label, threshold, cooldown,
# error.
_FAILURE = """
redis.call('SADD', KEYS[3], ARGV[3])
local now = tonumber(ARGV[1])
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
redis.call('HSET', KEYS[1], 'label', ARGV[4], 'last_error', ARGV[7], 'last_error_at', ARGV[1])
local failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
local is_probe = redis.call('GET', KEYS[2]) == ARGV[2]
if is_probe then redis.call('DEL', KEYS[2]) end
if is_probe or (state == 'closed' and failures >= tonumber(ARGV[5])) then
  local next_probe = tostring(now + tonumber(ARGV[6]))
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', ARGV[1], 'next_probe_at', next_probe)
  redis.call('HINCRBY', KEYS[1], 'opens', 1)
  local why = 'after ' .. failures .. ' consecutive failures'
  if is_probe then why = 'probe failed' end
  redis.call('LPUSH', KEYS[4], ARGV[1] .. ' open ' .. why)
  redis.call('LTRIM', KEYS[4], 0, 49)
  return {state, 'open'}
end
return {state, state}
"""


class BreakerOpen(Exception):
    """The breaker is open (or another worker is probing): no call may be made before
    `retry_at` (Unix seconds)."""

    def __init__(self, name: str, *, state: str, retry_at: float, last_error: str) -> None:
        super().__init__(
            f"circuit breaker {name} is {state.replace('_', '-')}; "
            f"next attempt after {time.strftime('%H:%M:%S', time.gmtime(retry_at))} UTC"
            + (f"; last error: {last_error}" if last_error else "")
        )
        self.state = state
        self.retry_at = retry_at
        self.last_error = last_error


@dataclass(frozen=True)
class Permit:
    """Leave to make one call; `probe` when this call is the half-open probe."""

    token: str
    probe: bool


@dataclass(frozen=True)
class BreakerState:
    """What the admin shows about one breaker."""

    name: str
    label: str
    state: str
    failures: int
    opened_at: float | None
    next_probe_at: float | None
    last_error: str
    last_error_at: float | None
    last_success_at: float | None
    probe_in_flight: bool
    opens: int
    rejected: int
    events: list[str]

    @property
    def display_state(self) -> str:
        return self.state.replace("_", "-")


@lru_cache(maxsize=8)
def _client(url: str) -> redis.Redis:
    # Short timeouts and one quick retry: a slow or absent Redis must not hold up a worker
    # (callers fail open on errors).
    return redis.Redis.from_url(
        url,
        socket_timeout=2.0,
        socket_connect_timeout=2.0,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.05), 1),
        decode_responses=True,
    )


def redis_client() -> redis.Redis:
    return _client(settings.REDIS_URL)


def _registry_key(prefix: str) -> str:
    return f"{prefix}:all"


class CircuitBreaker:
    def __init__(
        self,
        name: str,
        *,
        threshold: int,
        cooldown: float,
        probe_ttl: float,
        label: str = "",
        prefix: str | None = None,
        client: redis.Redis | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if threshold < 1:
            raise ValueError("the breaker threshold must be at least 1")
        self.name = name
        self.label = label or name
        self.threshold = threshold
        self.cooldown = cooldown
        self.probe_ttl = probe_ttl
        self.prefix = prefix or settings.BREAKER_KEY_PREFIX
        self.client = client or redis_client()
        self.clock = clock
        self.key = f"{self.prefix}:{name}"
        self._keys = [
            self.key,
            f"{self.key}:probe",
            _registry_key(self.prefix),
            f"{self.key}:events",
        ]
        self._scripts = {s: self.client.register_script(s) for s in (_ACQUIRE, _SUCCESS, _FAILURE)}

    def _run(self, script: str, *args: Any) -> Any:
        return self._scripts[script](keys=self._keys, args=list(args))

    def acquire(self) -> Permit:
        """Leave to make one call, or BreakerOpen."""
        token = uuid.uuid4().hex
        verdict, when = self._run(
            _ACQUIRE, repr(self.clock()), token, max(1, int(self.probe_ttl * 1000))
        )
        if verdict == CLOSED:
            return Permit(token=token, probe=False)
        if verdict == "probe":
            logger.warning("circuit breaker %s is half-open: this call is the probe", self.label)
            return Permit(token=token, probe=True)
        retry_at = float(when)
        if verdict == HALF_OPEN:
            # Another worker is probing: look again within a cool-down, not only when its probe
            # lock would expire.
            retry_at = min(retry_at, self.clock() + self.cooldown)
        last_error = str(self.client.hget(self.key, "last_error") or "")
        raise BreakerOpen(self.label, state=verdict, retry_at=retry_at, last_error=last_error)

    def success(self, permit: Permit) -> None:
        before, after = self._run(_SUCCESS, repr(self.clock()), permit.token, self.name, self.label)
        if before != after:
            logger.warning("circuit breaker %s closed: the probe succeeded", self.label)

    def failure(self, permit: Permit, error: str) -> None:
        before, after = self._run(
            _FAILURE,
            repr(self.clock()),
            permit.token,
            self.name,
            self.label,
            self.threshold,
            self.cooldown,
            error[:1000],
        )
        if after == OPEN and (before != OPEN):
            logger.warning(
                "circuit breaker %s opened for %ss: %s", self.label, self.cooldown, error[:1000]
            )

    def state(self) -> BreakerState:
        return breaker_state(self.name, prefix=self.prefix, client=self.client)

    def reset(self) -> None:
        """Forget everything about this breaker (tests, operators)."""
        self.client.delete(*self._keys[:2], self._keys[3])
        self.client.srem(self._keys[2], self.name)


def _float(value: str | None) -> float | None:
    return float(value) if value else None


def breaker_state(
    name: str, *, prefix: str | None = None, client: redis.Redis | None = None
) -> BreakerState:
    prefix = prefix or settings.BREAKER_KEY_PREFIX
    client = client or redis_client()
    key = f"{prefix}:{name}"
    fields: dict[str, str] = client.hgetall(key)  # type: ignore[assignment]
    return BreakerState(
        name=name,
        label=fields.get("label", name),
        state=fields.get("state", CLOSED),
        failures=int(fields.get("failures", 0)),
        opened_at=_float(fields.get("opened_at")),
        next_probe_at=_float(fields.get("next_probe_at"))
        if fields.get("state") in (OPEN, HALF_OPEN)
        else None,
        last_error=fields.get("last_error", ""),
        last_error_at=_float(fields.get("last_error_at")),
        last_success_at=_float(fields.get("last_success_at")),
        probe_in_flight=bool(client.exists(f"{key}:probe")),
        opens=int(fields.get("opens", 0)),
        rejected=int(fields.get("rejected", 0)),
        events=[str(event) for event in reversed(client.lrange(f"{key}:events", 0, -1))],
    )


def breaker_states(*, prefix: str | None = None) -> list[BreakerState]:
    """Every breaker that has recorded a call, by name."""
    prefix = prefix or settings.BREAKER_KEY_PREFIX
    client = redis_client()
    names = sorted(str(name) for name in client.smembers(_registry_key(prefix)))
    return [breaker_state(name, prefix=prefix, client=client) for name in names]
