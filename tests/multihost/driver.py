"""The multi-host test's Django side, run as its own process against the test's PostgreSQL
(DATABASE_URL, CANON_STORAGE_ROOT in the environment); prints one JSON object.

    python -m tests.multihost.driver upload --paragraphs 40

The test process itself stays off that database: pytest-django's connection belongs to the
shared test database, and this test's servers are its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def _paragraphs(tag: str, n: int, words: int = 60) -> str:
    return "\n\n".join(
        f"{tag} paragraph {i}. " + " ".join(f"{tag}word{i}x{j}" for j in range(words)) + "."
        for i in range(n)
    )


def upload(paragraphs: int) -> dict[str, Any]:
    """A tenant, a knowledge base and one document, uploaded through the services (its build
    task and outbox event commit with it; the relay sends the task to whichever host's worker
    takes it)."""
    from kb.models import Tenant
    from kb.services.index_versions import knowledge_base_create
    from tests.helpers import upload_text
    from work.models import IngestionTask

    tenant = Tenant.objects.create(name="Acme", slug="acme")
    kb = knowledge_base_create(tenant=tenant, name="Handbook", slug="handbook")
    revision = upload_text(kb, "policy", _paragraphs("alpha", paragraphs))
    task = IngestionTask.objects.get(build__revision=revision)
    return {
        "kb": kb.pk,
        "index_version": kb.active_index_version_id,
        "document": revision.document_id,
        "build": task.build_id,
        "task": task.pk,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tests.multihost.driver")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("upload").add_argument("--paragraphs", type=int, default=40)
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    print(json.dumps(upload(args.paragraphs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
