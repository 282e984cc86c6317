"""Check every invariant of the visibility rule and the protocols: over the whole database at once,
or in bounded, resumable slices of documents (`--slice-size N`; `kb.audit.audit_slice`).

    manage.py kb_verify                               # everything, now
    manage.py kb_verify --slice-size 500 --resume     # the next 500 documents of the walk
    manage.py kb_verify --slice-size 500 --resume --slices 0   # the rest of the current pass
    manage.py kb_verify --slice-size 500              # start a new pass, one slice
    manage.py kb_verify --status                      # where the walk is, what its passes found
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb import audit
from kb.models import AuditCursor, AuditSlice
from kb.verify import verify

WALKER = "kb_verify"


class Command(BaseCommand):
    help = "Check Canon's invariants; exit non-zero with a report if any is violated."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--slice-size",
            type=int,
            default=0,
            help="check this many documents per slice (kb id, document id order), "
            "recording each slice and moving a cursor kept in the database",
        )
        parser.add_argument(
            "--resume",
            action="store_true",
            help="continue the walk where its last committed slice ended "
            "(without it, a new pass starts at the first document)",
        )
        parser.add_argument(
            "--slices",
            type=int,
            default=1,
            help="slices to run (0: until the current pass ends); default 1",
        )
        parser.add_argument(
            "--status", action="store_true", help="show the walk's position and passes"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["status"]:
            self._status()
            return
        size = options["slice_size"]
        if size < 0 or options["slices"] < 0:
            raise CommandError("--slice-size and --slices take a number ≥ 0")
        if not size:
            if options["resume"]:
                raise CommandError("--resume needs --slice-size")
            self._report(verify(), "kb_verify: all invariants hold.")
            return
        if not options["resume"]:
            audit.audit_restart(walker=WALKER)
        violations = []
        ran = 0
        while True:
            result = audit.audit_slice(walker=WALKER, size=size)
            if result.busy:
                raise CommandError("another kb_verify slice of this walk is running; try later")
            ran += 1
            violations += result.violations
            self.stdout.write(
                f"kb_verify: pass {result.pass_number} slice: {result.documents} documents "
                f"after {result.after} through {result.through} in {result.seconds:.2f} s, "
                f"{len(result.violations)} violation(s)"
                + ("; the pass is complete" if result.last_of_pass else "")
            )
            if result.last_of_pass or (options["slices"] and ran >= options["slices"]):
                break
        self._report(violations, "kb_verify: all invariants hold in the documents checked.")

    def _report(self, violations: list[Any], clean: str) -> None:
        if violations:
            report = "\n".join(f"  {v}" for v in violations)
            raise CommandError(f"{len(violations)} invariant violation(s):\n{report}")
        self.stdout.write(clean)

    def _status(self) -> None:
        cursor = AuditCursor.objects.filter(pk=WALKER).first()
        if cursor is None:
            self.stdout.write("kb_verify: no sliced walk has run.")
            return
        for pass_number in (cursor.pass_number - 1, cursor.pass_number):
            slices = AuditSlice.objects.filter(cursor=cursor, pass_number=pass_number)
            if not slices.exists():
                continue
            documents = sum(s.items for s in slices)
            found = sum(len(s.violations) for s in slices)
            state = "complete" if slices.filter(last_of_pass=True).exists() else "in progress"
            self.stdout.write(
                f"pass {pass_number} ({state}): {slices.count()} slices, {documents} documents, "
                f"{found} violation(s)"
            )
        self.stdout.write(
            f"next slice starts after (kb {cursor.position_kb}, document {cursor.position_id})"
        )
