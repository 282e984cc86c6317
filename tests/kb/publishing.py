"""Publishing a document, reading which revision is live, and racing two admin actions: shared
by the knowledge base's approve/rollback, swap, retention and purge tests and the console's
role checks."""

from __future__ import annotations

import threading
from typing import Any

from django.db import connection

from kb.models import Build, Document, KnowledgeBase, Publication
from kb.services.base import ActionRefused
from tests.helpers import run_pending, upload_text


def publish(kb: KnowledgeBase, key: str, text: str) -> Build:
    """Upload and run every task this upload created (one per live index version)."""
    revision = upload_text(kb, key, text)
    run_pending()
    return Build.objects.get(revision=revision, index_version=kb.active_index_version_id)


def live_revision(document: Document) -> int | None:
    kb = KnowledgeBase.objects.get(pk=document.kb_id)
    pub = (
        Publication.objects.filter(document=document, index_version_id=kb.active_index_version_id)
        .select_related("build__revision")
        .first()
    )
    return pub.build.revision.number if pub else None


def race(**calls: Any) -> dict[str, str]:
    """Run the calls in threads released together; report "won" or "refused: <message>"."""
    outcomes: dict[str, str] = {}
    barrier = threading.Barrier(len(calls))

    def act(name: str, call: Any) -> None:
        barrier.wait()
        try:
            call()
            outcomes[name] = "won"
        except ActionRefused as exc:
            outcomes[name] = f"refused: {exc}"
        finally:
            connection.close()

    threads = [threading.Thread(target=act, args=item) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes
