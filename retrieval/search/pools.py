"""Thread pools a search hands side work to (the English query's embedding, snapshot readers):
one per process and name, made on first use, so a forked child makes its own (the parent's
threads are not in it). `idle` counts the threads free for a caller that would rather not wait
for one (`shared_snapshot.read_soon`); a caller that may wait submits to `executor` alone."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True)
class Pool:
    executor: ThreadPoolExecutor
    idle: threading.BoundedSemaphore


_pools: dict[tuple[int, str], Pool] = {}
_lock = threading.Lock()


def process_pool(name: str, workers: int) -> Pool:
    """This process's pool `name` of `workers` threads (named after it), made on first call."""
    with _lock:
        key = (os.getpid(), name)
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = Pool(
                ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name),
                threading.BoundedSemaphore(workers),
            )
        return pool
