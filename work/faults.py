"""Fault-injection switches for crash tests, off unless their environment variable is set.

A crash switch ends the process with `os._exit` (no cleanup, no exception handlers, no acks),
the way a kill -9 or a power loss would. A pause switch stops the process with SIGSTOP, so a test
can act while it is frozen (let its lease expire, delete the document, kill its database
connection) and then resume it with SIGCONT.

Before acting, a switch writes a marker file to CANON_FAULT_MARKER_DIR (when set) so the test can
assert that the fault really happened at that point.

    CANON_FAULT_AFTER_STORE=1           die after an upload's file was stored, before its commit
    CANON_FAULT_AFTER_OUTBOX_COMMIT=1   die after an upload committed, before any send
    CANON_FAULT_AFTER_CHUNK_BATCH=N     die after chunk batch N (1-based) committed
    CANON_FAULT_CHUNK_BATCH_DELAY=S     sleep S seconds after each chunk batch (a slow disk)
    CANON_FAULT_BEFORE_SWITCH=1         die after every stage succeeded, before the switch
    CANON_FAULT_RELAY_AFTER_SEND=1      die after the relay sent a message, before marking it
    CANON_FAULT_DROP_HEARTBEATS=1       never renew leases
    CANON_FAULT_POISON=TEXT             die while parsing any file that contains TEXT
    CANON_FAULT_PARSER_RAISES=TEXT      raise an unexpected exception while parsing any file
                                        that contains TEXT (a parser bug, not a bad file)
    CANON_FAULT_SYNC_AFTER_ITEM=N       die after a sync run submitted its Nth item (committed)
    CANON_FAULT_SYNC_BEFORE_DELETIONS=1 die after a sync run submitted every item, before it
                                        deletes what left the source
    CANON_FAULT_EVALUATION_AFTER_RESULT=N die after an evaluation run wrote its Nth result
                                        (committed) in this attempt
    CANON_FAULT_CALIBRATION_AFTER_LEGS=N die after a calibration read its Nth question's legs
                                        (nothing of it written yet)
    CANON_FAULT_PAUSE_AT=POINT          SIGSTOP at POINT, every time it is reached:
                                        before_switch | in_switch | relay_after_send |
                                        relay_after_round_trip (each full one of a pass)
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def _enabled(name: str) -> str | None:
    return os.environ.get(f"CANON_FAULT_{name}") or None


def _mark(point: str) -> None:
    marker_dir = os.environ.get("CANON_FAULT_MARKER_DIR")
    if marker_dir:
        Path(marker_dir).mkdir(parents=True, exist_ok=True)
        (Path(marker_dir) / f"{point}.{os.getpid()}").write_text(point)
    sys.stderr.write(f"canon fault injection: {point} in process {os.getpid()}\n")
    sys.stderr.flush()


def _die(point: str) -> None:
    _mark(point)
    os._exit(137)


def pause_point(point: str) -> None:
    """Freeze this process at `point`, every time, when CANON_FAULT_PAUSE_AT names it."""
    if _enabled("PAUSE_AT") == point:
        _mark(f"paused_{point}")
        os.kill(os.getpid(), signal.SIGSTOP)


def after_store() -> None:
    if _enabled("AFTER_STORE"):
        _die("after_store")


def after_outbox_commit() -> None:
    if _enabled("AFTER_OUTBOX_COMMIT"):
        _die("after_outbox_commit")


def after_chunk_batch(batch_number: int) -> None:
    delay = _enabled("CHUNK_BATCH_DELAY")
    if delay:
        time.sleep(float(delay))
    target = _enabled("AFTER_CHUNK_BATCH")
    if target and int(target) == batch_number:
        _die(f"after_chunk_batch_{batch_number}")


def before_switch() -> None:
    if _enabled("BEFORE_SWITCH"):
        _die("before_switch")
    pause_point("before_switch")


def relay_after_send() -> None:
    if _enabled("RELAY_AFTER_SEND"):
        _die("relay_after_send")
    pause_point("relay_after_send")


def sync_after_item(item_number: int) -> None:
    target = _enabled("SYNC_AFTER_ITEM")
    if target and int(target) == item_number:
        _die(f"sync_after_item_{item_number}")


def sync_before_deletions() -> None:
    if _enabled("SYNC_BEFORE_DELETIONS"):
        _die("sync_before_deletions")


def evaluation_after_result(result_number: int) -> None:
    target = _enabled("EVALUATION_AFTER_RESULT")
    if target and int(target) == result_number:
        _die(f"evaluation_after_result_{result_number}")


def calibration_after_legs(question_number: int) -> None:
    target = _enabled("CALIBRATION_AFTER_LEGS")
    if target and int(target) == question_number:
        _die(f"calibration_after_legs_{question_number}")


def heartbeat_dropped() -> bool:
    return _enabled("DROP_HEARTBEATS") is not None


def poison(content: bytes) -> None:
    """Stands in for a parser that crashes the process on a particular file, or (PARSER_RAISES)
    that raises an exception no extractor translates into a readable ParseError."""
    needle = _enabled("POISON")
    if needle and needle.encode() in content:
        _die("poison")
    needle = _enabled("PARSER_RAISES")
    if needle and needle.encode() in content:
        _mark("parser_raises")
        raise NotImplementedError(f"fault injection: the parser cannot handle {needle!r}")
