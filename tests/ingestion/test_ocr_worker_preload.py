"""The OCR engine in real worker processes (issue 37): where OCR is on, each worker child loads
it once, when it starts, not on the first page; where it is off everywhere (CANON_OCR=off, or
every knowledge base off) it is never loaded, and an image's build fails saying so."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kb import storage
from kb.models import Build, KnowledgeBase, Revision, Tenant
from kb.services.documents import document_create
from kb.services.index_versions import knowledge_base_create
from tests.conftest import wait_for
from tests.textkit.extract.ocr_fixtures import encoded, page

pytestmark = pytest.mark.integration

LOADED = re.compile(r"OCR engine loaded in [\d.]+ s \(1 threads\)")


def upload(kb: KnowledgeBase, key: str, data: bytes, media_type: str, name: str) -> Revision:
    return document_create(
        kb=kb,
        key=key,
        title=key,
        stored=storage.store_bytes(data),
        media_type=media_type,
        original_name=name,
    )


def picture(text: str) -> bytes:
    return encoded(page([[text]], size=36, page_size=(900, 240)), "PNG")


def finished(revision: Revision) -> Build | None:
    return Build.objects.filter(
        revision=revision, state__in=[Build.State.LIVE, Build.State.FAILED]
    ).first()


def test_where_ocr_is_on_each_worker_child_loads_the_engine_at_start_once(
    worker_factory: Any, kb: KnowledgeBase
) -> None:
    worker = worker_factory()
    wait_for(lambda: LOADED.search(worker.log()), relay=False, what="the engine loaded at start")

    revision = upload(kb, "notice", picture("The canteen opens at noon."), "image/png", "n.png")
    built = wait_for(lambda: finished(revision), what="the picture built")
    assert built.state == Build.State.LIVE, built.error
    assert len(LOADED.findall(worker.log())) == 1  # the first page did not load it again


def test_the_server_switch_off_never_loads_the_engine(
    worker_factory: Any, kb: KnowledgeBase
) -> None:
    worker = worker_factory(CANON_OCR="off")
    revision = upload(kb, "notice", picture("The canteen opens at noon."), "image/png", "n.png")
    built = wait_for(lambda: finished(revision), what="the picture's build to end")
    assert built.state == Build.State.FAILED
    assert built.error.startswith("OCR is off on this server (CANON_OCR=off)")
    assert "OCR engine loaded" not in worker.log()


def test_with_every_knowledge_base_off_the_engine_waits_for_one_that_turns_it_on(
    worker_factory: Any, kb: KnowledgeBase, tenant: Tenant
) -> None:
    KnowledgeBase.objects.filter(pk=kb.pk).update(ocr_mode=KnowledgeBase.OcrMode.OFF)
    worker = worker_factory()
    typed = upload(kb, "typed", b"The canteen opens at noon.", "text/plain", "typed.txt")
    assert wait_for(lambda: finished(typed), what="a typed file built").state == Build.State.LIVE
    assert "OCR engine loaded" not in worker.log()  # the child started without it

    # a knowledge base that reads pictures, added later: its first page loads the engine
    scans = knowledge_base_create(tenant=tenant, name="Scans", slug="scans")
    revision = upload(scans, "notice", picture("The canteen opens at noon."), "image/png", "n.png")
    built = wait_for(lambda: finished(revision), what="the picture built")
    assert built.state == Build.State.LIVE, built.error
    assert len(LOADED.findall(worker.log())) == 1
