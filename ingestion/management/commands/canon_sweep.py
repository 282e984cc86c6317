"""Run the lease sweeper once (beat runs it every 15 s)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ingestion.sweeper import lease_sweep


class Command(BaseCommand):
    help = "Requeue or dead-letter running tasks whose lease expired."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"handled {lease_sweep()}")
