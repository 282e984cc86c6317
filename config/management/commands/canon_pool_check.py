"""Print the database connections Canon's processes may open together against what the server
allows, and fail when they do not fit (the arithmetic of system check canon.E010)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config.checks import server_limits
from config.dbpool import ConnectionBudget


class Command(BaseCommand):
    help = "Check that Canon's database connections fit PostgreSQL's max_connections."
    requires_system_checks: list[str] = []  # this command is the check; it prints the sum too

    def handle(self, *args: Any, **options: Any) -> None:
        budget: ConnectionBudget = settings.CANON_DB_BUDGET
        stated = settings.CANON_DB_MAX_CONNECTIONS
        max_connections, reserved = (stated, 3) if stated is not None else server_limits()
        allowed = budget.allowed(max_connections=max_connections, server_reserved=reserved)
        self.stdout.write(budget.arithmetic())
        self.stdout.write(
            f"allowed {allowed} = max_connections {max_connections} - {reserved} reserved by "
            f"the server - {budget.operator_reserved} CANON_DB_RESERVED_CONNECTIONS"
        )
        problem = budget.problem(max_connections=max_connections, server_reserved=reserved)
        if problem:
            raise CommandError(problem)
        self.stdout.write(f"ok: {budget.total} <= {allowed}")
