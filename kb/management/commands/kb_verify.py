"""Check every invariant of the visibility rule and the protocols over the whole database."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from kb.verify import verify


class Command(BaseCommand):
    help = "Check Canon's invariants; exit non-zero with a report if any is violated."

    def handle(self, *args: Any, **options: Any) -> None:
        violations = verify()
        if violations:
            report = "\n".join(f"  {v}" for v in violations)
            raise CommandError(f"{len(violations)} invariant violation(s):\n{report}")
        self.stdout.write("kb_verify: all invariants hold.")
