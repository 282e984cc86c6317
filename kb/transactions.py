"""Retrying whole transactions that PostgreSQL aborted to resolve a conflict."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import OperationalError, connection
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

P = ParamSpec("P")
R = TypeVar("R")

# serialization_failure, deadlock_detected
RETRYABLE_SQLSTATES = {"40001", "40P01"}


def is_conflict(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(exc, OperationalError) and getattr(cause, "sqlstate", None) in (
        RETRYABLE_SQLSTATES
    )


_retry = retry(
    retry=retry_if_exception(is_conflict),
    stop=stop_after_attempt(5),
    wait=wait_random_exponential(multiplier=0.05, max=1.0),
    reraise=True,
)


def retry_conflicts(fn: Callable[P, R]) -> Callable[P, R]:
    """Run `fn` (which opens its own transaction) again when it lost a serialization or
    deadlock conflict: bounded, with jitter. Inside an outer transaction a retry could not help
    (the outer transaction is already aborted), so there it runs once."""
    retried = _retry(fn)

    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if connection.in_atomic_block:
            return fn(*args, **kwargs)
        return retried(*args, **kwargs)

    wrapper.__doc__ = fn.__doc__
    wrapper.__name__ = fn.__name__
    return wrapper
