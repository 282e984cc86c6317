"""Swap a knowledge base from `hash` to the packaged multilingual model (`use`) while search
keeps serving: a real Celery worker builds the new index version (its child loads the model when
it starts), every search during the build answers from the active version, and after the swap a
paraphrase that shares no word with its document finds it, in English and in Chinese."""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest
from django.db import connection, transaction

from embeddings import USE_DIMENSIONS, USE_MODEL
from kb.ann import ann_index_ready
from kb.models import KnowledgeBase
from kb.selectors.index_versions import index_version_progress
from kb.services.index_versions import index_version_activate, index_version_create
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.conftest import wait_for
from tests.fault.harness import RUNNING_SEARCHERS, Searcher, upload

pytestmark = pytest.mark.integration

DOCUMENTS = {
    "vacation": "Vacation policy. Every employee receives twenty days of paid leave per year. "
    "Requests go to the team lead two weeks in advance.",
    "expenses": "Travel expenses. Keep the receipts for taxis, hotels and meals and submit them "
    "within thirty days to be reimbursed.",
    "security": "Laptop security. Lock your screen when you leave your desk, and report a lost or "
    "stolen laptop to the IT service desk at once.",
    "parking": "Parking. Cars may use the garage under building B; bicycles are kept in the "
    "covered racks by the main entrance.",
    "onboarding": "Onboarding. New colleagues get their badge, accounts and a mentor on the "
    "first morning.",
}
# No word in common with the document each should find.
PARAPHRASES = {
    "How many holidays do staff get annually?": "vacation",
    "员工每年有几天假期？": "vacation",
    "Where can I leave my bike?": "parking",
}


class VersionSearcher(Searcher):
    """The fault harness's searcher (every hit is from the live, complete build of the active
    version, in the snapshot the search read), also recording which index version answered."""

    versions: list[int]

    def _search_once(self, query: str, mode: str) -> None:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            result = search(principal=self.principal, kb=self.kb, query=query, top_k=10, mode=mode)
            active = KnowledgeBase.objects.select_related("active_index_version").get(pk=self.kb.pk)
            assert active.active_index_version is not None
            if result.index_version != active.active_index_version.number:
                self.violations.append(
                    f"answered from version {result.index_version}, active is "
                    f"{active.active_index_version.number}"
                )
            self.versions.append(result.index_version)
            for hit in result.hits:
                self._check_build(hit.document_key, hit.build_id)


def test_swapping_hash_for_the_multilingual_model_while_search_serves(
    worker_factory: Any, kb: KnowledgeBase
) -> None:
    # given a knowledge base on hash with five documents live
    assert kb.active_index_version is not None
    assert kb.active_index_version.provider == "hash"
    worker = worker_factory(CANON_PRELOAD_EMBEDDING_MODELS=f"use/{USE_MODEL}")
    documents = [upload(kb, key, text) for key, text in DOCUMENTS.items()]
    hash_version = kb.active_index_version
    wait_for(
        lambda: index_version_progress(version=hash_version).live == len(documents),
        what="five documents live on hash",
    )
    # and a searcher running throughout
    searcher = VersionSearcher(kb=kb, queries=[*PARAPHRASES, "vacation", "laptop"])
    searcher.versions = []
    searcher.start()
    RUNNING_SEARCHERS.append(searcher)
    try:
        # when a new index version with the packaged model is built by the worker
        version = index_version_create(
            kb_id=kb.pk,
            provider="use",
            model=USE_MODEL,
            dimensions=USE_DIMENSIONS,
            chunk_size=800,
            chunk_overlap=100,
        )
        wait_for(
            lambda: index_version_progress(version=version).live == len(documents),
            what="the use version built",
        )
        assert index_version_progress(version=version).failed == []
        # its vector index is built once its last build is written (kb.ann_build)
        wait_for(lambda: ann_index_ready(version.pk), relay=False, what="the use version's index")
        searches_before_swap = len(searcher.versions)
        time.sleep(0.5)  # a few more searches with both versions complete

        # then every search so far answered from the hash version, which is still active
        assert set(searcher.versions) == {hash_version.number}
        assert searches_before_swap > 0

        # when the swap is made
        index_version_activate(version_id=version.pk, actor=None, reason="semantic")
        wait_for(
            lambda: searcher.versions and searcher.versions[-1] == version.number,
            relay=False,
            what="a search answered by the new version",
        )
    finally:
        searcher.stop()

    # then search never mixed versions and moved from the old one to the new one exactly once
    searcher.assert_clean()
    switch = searcher.versions.index(version.number)
    assert set(searcher.versions[:switch]) == {hash_version.number}
    assert set(searcher.versions[switch:]) == {version.number}

    # and paraphrases that share no word with their document find it
    principal = Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    for query, key in PARAPHRASES.items():
        result = search(principal=principal, kb=kb, query=query, top_k=3, mode="vector")
        assert result.index_version == version.number
        assert result.hits and result.hits[0].document_key == key, (query, result.hits)

    # and the worker's child loaded the model once, when it started, without noise in the log
    log = worker.log()
    assert log.count(f"embedding model {USE_MODEL} loaded") == 1, log
    assert not any(noise in log for noise in ("DeprecationWarning", "UserWarning", "%|"))
    children = psutil.Process(worker.pid).children()
    assert children and all(c.memory_info().rss < 600 * 2**20 for c in children)
