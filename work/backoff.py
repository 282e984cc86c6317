"""How long to wait before trying again."""

from __future__ import annotations

import random


def backoff_seconds(attempt: int, *, base: float, cap: float) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0, min(cap, base * (2 ** max(attempt - 1, 0))))
