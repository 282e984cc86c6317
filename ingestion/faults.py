"""Fault-injection switches for crash tests. All are off unless their environment variable is
set, and each ends the process with `os._exit` (no cleanup, no exception handlers, no acks), the
way a kill -9 or a power loss would.

Before dying, a switch writes a marker file to CANON_FAULT_MARKER_DIR (when set) so a test can
assert that the crash really happened at that point.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _enabled(name: str) -> str | None:
    return os.environ.get(f"CANON_FAULT_{name}") or None


def _die(point: str) -> None:
    marker_dir = os.environ.get("CANON_FAULT_MARKER_DIR")
    if marker_dir:
        Path(marker_dir).mkdir(parents=True, exist_ok=True)
        (Path(marker_dir) / f"{point}.{os.getpid()}").write_text(point)
    sys.stderr.write(f"canon fault injection: dying at {point}\n")
    sys.stderr.flush()
    os._exit(137)


def after_outbox_commit() -> None:
    if _enabled("AFTER_OUTBOX_COMMIT"):
        _die("after_outbox_commit")


def after_chunk_batch(batch_number: int) -> None:
    """Dies after chunk batch N (1-based) has committed."""
    target = _enabled("AFTER_CHUNK_BATCH")
    if target and int(target) == batch_number:
        _die(f"after_chunk_batch_{batch_number}")


def before_switch() -> None:
    if _enabled("BEFORE_SWITCH"):
        _die("before_switch")


def relay_after_send() -> None:
    if _enabled("RELAY_AFTER_SEND"):
        _die("relay_after_send")


def heartbeat_dropped() -> bool:
    return _enabled("DROP_HEARTBEATS") is not None
