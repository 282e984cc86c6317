"""What the backup tests ask of a Canon they do not run in-process: a separate process pointed by
DATABASE_URL and CANON_STORAGE_ROOT at a database (the original, or its restored copy), printing
one JSON document.

    python -m tests.integration.probe search KEY KB '[[MODE, QUERY], ...]'
    python -m tests.integration.probe reconcile
    python -m tests.integration.probe reindex KB TIMEOUT
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from console.dashboard import dashboard  # noqa: E402
from ingestion.reconciler.runner import reconcile  # noqa: E402
from ingestion.relay import outbox_relay_batch  # noqa: E402
from kb.models import Build, KnowledgeBase  # noqa: E402
from kb.services.index_versions import index_version_create  # noqa: E402
from retrieval.principals import principal_from_key  # noqa: E402
from retrieval.search.engine import search  # noqa: E402
from retrieval.search.visibility import knowledge_base_for  # noqa: E402
from work.models import IngestionTask  # noqa: E402


def probe_search(key: str, kb_ref: str, queries: str) -> Any:
    """Each [mode, query] of the JSON list `queries`: its hits, best first."""
    principal = principal_from_key(key)
    kb = knowledge_base_for(principal=principal, kb_ref=kb_ref)
    return [
        [
            {
                "chunk_id": hit.chunk_id,
                "score": hit.score,
                "document_key": hit.document_key,
                "revision": hit.revision,
                "build_id": hit.build_id,
            }
            for hit in search(principal=principal, kb=kb, query=query, mode=mode, top_k=10).hits
        ]
        for mode, query in json.loads(queries)
    ]


def probe_reconcile() -> Any:
    counts = reconcile()
    return {
        "counts": counts,
        "dashboard": [
            {
                "kind": event.kind,
                "subject": f"{event.subject_type} {event.subject_id}",
                "escalated": event.escalated,
                "detail": event.details.get("detail", ""),
            }
            for event in dashboard(tenant_ids=None).anomalies
        ],
    }


def probe_reindex(kb_ref: str, timeout: str) -> Any:
    """Build every document again into a new index version (what a re-index or a model change
    does), relaying as beat would, until each build has finished one way or the other."""
    kb = KnowledgeBase.objects.get(slug=kb_ref)
    active = kb.active_index_version
    assert active is not None
    version = index_version_create(
        kb_id=kb.pk,
        provider=active.provider,
        model=active.model,
        dimensions=active.dimensions,
        chunk_size=active.chunk_size,
        chunk_overlap=active.chunk_overlap,
    )
    deadline = time.monotonic() + float(timeout)
    open_statuses = ("queued", "running", "retry_wait")
    while time.monotonic() < deadline:
        outbox_relay_batch()
        if not IngestionTask.objects.filter(
            build__index_version=version, status__in=open_statuses
        ).exists():
            break
        time.sleep(0.2)
    return {
        build.document.key: {"state": build.state, "error": build.error}
        for build in Build.objects.filter(index_version=version).select_related("document")
    }


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    probes: dict[str, Callable[..., Any]] = {
        "search": probe_search,
        "reconcile": probe_reconcile,
        "reindex": probe_reindex,
    }
    print(json.dumps(probes[command](*args)))
