"""Run the outbox relay outside beat: once, or in a loop (an extra relay process)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError, connection

from ingestion.relay import outbox_relay_batch
from work.broker import ROUND_TRIP_SIZE


class Command(BaseCommand):
    help = "Deliver unpublished outbox events (once, or every --interval seconds with --loop)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true")
        parser.add_argument("--interval", type=float, default=0.2)
        parser.add_argument("--seconds", type=float, default=0.0, help="stop after (with --loop)")
        parser.add_argument(
            "--limit", type=int, default=None, help="events per pass (CANON_RELAY_BATCH_SIZE)"
        )
        parser.add_argument(
            "--round-trip",
            type=int,
            default=ROUND_TRIP_SIZE,
            help=f"messages per Redis round trip ({ROUND_TRIP_SIZE})",
        )

    def handle(
        self,
        *args: Any,
        loop: bool,
        interval: float,
        seconds: float,
        limit: int | None,
        round_trip: int,
        **options: Any,
    ) -> None:
        deadline = time.monotonic() + seconds if seconds else None
        while True:
            try:
                sent = outbox_relay_batch(limit=limit, round_trip=round_trip)
            except DatabaseError as exc:
                if not loop:
                    raise
                # A lost connection or a failover: reconnect on the next pass, do not die.
                self.stderr.write(f"relay pass failed: {exc}")
                connection.close()
                sent = 0
            if sent:
                self.stdout.write(f"sent {sent}")
                self.stdout.flush()
            if not loop or (deadline is not None and time.monotonic() > deadline):
                return
            time.sleep(interval)
