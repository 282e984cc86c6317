"""The parse stage: the revision's stored file -> the extracted blocks (`textkit.extract`), kept
as a derived file, and the title the file gave; read as the build's knowledge base chooses
(`parse_options`: its OCR mode, under the process's switch, and whether DOCX page headers and
footers are text)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Now
from django.utils.translation import gettext_noop

from ingestion.pipeline.stages import JsonDict, TerminalError
from kb import storage
from kb.failures import STORED_FILE_DAMAGED, STORED_FILE_MISSING, STORED_FILE_PROBLEM
from kb.models import Build, Document, KnowledgeBase, Revision
from textkit import extract as extractors
from textkit.extract import ocr
from textkit.extract import options as extract_options
from textkit.extract import progress as extract_progress
from textkit.reasons import Reason
from work import faults
from work.leases import Lease, fenced

logger = logging.getLogger(__name__)


def parse(revision: Revision) -> JsonDict:
    """Extract the file into derived storage as `Extracted.to_json` (title, headings, blocks).
    A source file that is missing or not the uploaded bytes fails the build, terminally (a
    retry cannot help until someone restores the file), with a reason a person can act on. A
    store that cannot be reached raises StorageUnavailable: the task waits (`run`)."""
    media_type = revision.media_type
    try:
        # the file itself, or a copy downloaded from the bucket, checked against its SHA-256
        with storage.local_copy(
            revision.storage_path, sha256=revision.sha256, size=revision.size
        ) as path:
            faults.poison(path.read_bytes()[:1_000_000])
            extracted = extractors.extract(path, media_type, max_chars=settings.PARSE_MAX_CHARS)
    except storage.StoredFileProblem as exc:
        raise TerminalError("stored_file_missing", _stored_file_reason(exc, revision)) from None
    except extractors.ParseError as exc:
        raise TerminalError("unparseable", exc.reason or str(exc)) from exc
    stored = storage.store_bytes(extracted.to_json(), kind="derived")
    for note in extracted.notes:
        logger.warning("revision %s: %s", revision.pk, note)
    return {
        "text_path": stored.path,
        "text_sha256": stored.sha256,
        "chars": sum(len(block.text) for block in extracted.blocks),
        "title": extracted.title,
        "notes": extracted.notes,
    }


def _stored_file_reason(exc: storage.StoredFileProblem, revision: Revision) -> Reason:
    if exc.problem == storage.MISSING:
        return STORED_FILE_MISSING(sha256=revision.sha256)
    if exc.problem == storage.DAMAGED:
        return STORED_FILE_DAMAGED(sha256=revision.sha256)
    return STORED_FILE_PROBLEM(problem=exc.problem, sha256=revision.sha256)


@dataclass(frozen=True)
class ParseOptions:
    """How one build's file is read: OCR's mode and limits, and the extraction choices."""

    ocr: ocr.OcrOptions
    extract: extract_options.ExtractOptions

    @property
    def key(self) -> str:
        """What of these options changes the extracted text, for the parse stage's
        fingerprint, so a parse made under other options is never reused. "" for the defaults
        (the fingerprint parses made before these options existed were recorded under)."""
        defaults = ocr.OcrOptions(), extract_options.ExtractOptions()
        if (self.ocr.mode, self.extract) == (defaults[0].mode, defaults[1]):
            return ""
        # Off, the reason is in the text too (the notes name what was not read, and why).
        mode = self.ocr.mode if self.ocr.on else f"{self.ocr.mode} ({self.ocr.off_reason})"
        return f"ocr={mode};headers_footers={int(self.extract.headers_footers)}"


def ocr_off_reason(*, kb: KnowledgeBase) -> str:
    """Why OCR is off for `kb`'s builds in this process, or "" when it is on. The process's
    switches win over the knowledge base's setting. In English (it is in a stored reason and the
    parse's fingerprint), marked: the admin words a reason holding it in the person's language."""
    if not settings.OCR_ENABLED:
        return gettext_noop("OCR is off on this server (CANON_OCR=off)")
    if settings.OCR_MAX_PAGES <= 0:
        return gettext_noop("OCR is off on this server (CANON_OCR_MAX_PAGES=0)")
    if kb.ocr_mode == KnowledgeBase.OcrMode.OFF:
        return gettext_noop("OCR is off for this knowledge base")
    return ""


def parse_options(*, kb: KnowledgeBase) -> ParseOptions:
    off_reason = ocr_off_reason(kb=kb)
    return ParseOptions(
        ocr=ocr.OcrOptions(
            mode=ocr.OFF if off_reason else kb.ocr_mode,
            off_reason=off_reason or ocr.OcrOptions.off_reason,
            threads=settings.OCR_THREADS,
            max_pages=settings.OCR_MAX_PAGES,
            max_seconds=settings.OCR_MAX_SECONDS,
            max_pixels=settings.OCR_MAX_PIXELS,
            min_confidence=settings.OCR_MIN_CONFIDENCE,
        ),
        extract=extract_options.ExtractOptions(headers_footers=kb.extract_headers_footers),
    )


def ocr_wanted() -> bool:
    """Whether this process may OCR anything: its switches are on and some knowledge base has
    OCR on (a worker child loads the engine at start only then)."""
    if not settings.OCR_ENABLED or settings.OCR_MAX_PAGES <= 0:
        return False
    return KnowledgeBase.objects.exclude(ocr_mode=KnowledgeBase.OcrMode.OFF).exists()


def record_title(*, revision: Revision, title: str, lease: Lease) -> None:
    """Write the revision's extracted title, and make it the document's title when the uploader
    gave none (the title is then the key). Fenced; idempotent: both are conditional UPDATEs
    that change nothing the second time, and a title the uploader gave is never replaced."""
    with fenced(lease):
        Revision.objects.filter(pk=revision.pk).exclude(extracted_title=title).update(
            extracted_title=title
        )
        if title:
            Document.objects.filter(pk=revision.document_id, title=F("key")).exclude(
                title=title
            ).update(title=title, updated_at=Now())


# The parse stage writes its progress to the build at most this often.
PROGRESS_INTERVAL_SECONDS = 1.0


@contextmanager
def parse_context(*, build_id: int, lease: Lease, options: ParseOptions) -> Iterator[None]:
    """Around the parse stage of one build: `options` (`parse_options` of its knowledge base)
    in force, and what a long extraction reports ("OCR page 12/40") written to
    `Build.parse_progress` for the admin's bar, fenced (a worker that lost its lease stops
    there), at most once a second."""
    last = -PROGRESS_INTERVAL_SECONDS

    def record(label: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < PROGRESS_INTERVAL_SECONDS:
            return
        last = now
        with fenced(lease):
            Build.objects.filter(pk=build_id).update(parse_progress=label[:64])

    with (
        ocr.configured(options.ocr),
        extract_options.configured(options.extract),
        extract_progress.reporting(record),
    ):
        yield
