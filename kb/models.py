"""Knowledge and its visibility: tenants, knowledge bases, index versions, documents, revisions,
builds, chunks and the live pointer (Publication).

The visibility rule (docs/ARCHITECTURE.md, "Visibility"): a chunk is searchable iff its build is
the Publication of its document in the knowledge base's active index version, the document is not
deleted, and the caller may read the document's access groups. Only `kb.services` moves pointers.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy
from pgvector.django import VectorField

# What a new index version is built with. p2: BM25 postings instead of the `simple` tsvector,
# main-content extraction and heading paths. Versions keep the pipeline they were created with;
# a knowledge base moves to a new one through a new index version and a swap.
PIPELINE_VERSION = "p2"
# Index versions of these pipelines keep the legacy `simple` tsvector instead of postings.
LEGACY_LEXICAL_PIPELINES = frozenset({"p1"})


class Tenant(models.Model):
    name = models.CharField(max_length=200, verbose_name=gettext_lazy("name"))
    slug = models.SlugField(max_length=100, unique=True, verbose_name=gettext_lazy("slug"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))

    class Meta:
        verbose_name = gettext_lazy("tenant")
        verbose_name_plural = gettext_lazy("tenants")

    def __str__(self) -> str:
        return self.name


class TenantMembership(models.Model):
    """Which tenant an admin user works in. Superusers see every tenant."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="tenant_membership",
        verbose_name=gettext_lazy("user"),
    )
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        related_name="memberships",
        verbose_name=gettext_lazy("tenant"),
    )
    access_groups = ArrayField(
        models.CharField(max_length=100),
        default=list,
        blank=True,
        verbose_name=gettext_lazy("access groups"),
    )

    class Meta:
        verbose_name = gettext_lazy("tenant membership")
        verbose_name_plural = gettext_lazy("tenant memberships")

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant}"


class KnowledgeBase(models.Model):
    class OcrMode(models.TextChoices):
        """What OCR reads in this knowledge base's files (textkit.extract.ocr's modes)."""

        OFF = "off", gettext_lazy("Off")
        PAGES_WITHOUT_TEXT = "pages_without_text", gettext_lazy("Pages without text only")
        ALWAYS = "always", gettext_lazy("Always, also pictures on pages with text")

    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.PROTECT,
        related_name="knowledge_bases",
        verbose_name=gettext_lazy("tenant"),
    )
    name = models.CharField(max_length=200, verbose_name=gettext_lazy("name"))
    slug = models.SlugField(max_length=100, verbose_name=gettext_lazy("slug"))
    description = models.TextField(blank=True, verbose_name=gettext_lazy("description"))
    active_index_version = models.ForeignKey(
        "IndexVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=gettext_lazy("active index version"),
    )
    require_approval = models.BooleanField(
        default=False, verbose_name=gettext_lazy("require approval")
    )
    retention_days = models.PositiveIntegerField(
        default=30, verbose_name=gettext_lazy("retention days")
    )
    # What the parse stage extracts (ingestion.pipeline.parse.parse_options); a change applies
    # to the builds made from then on.
    ocr_mode = models.CharField(
        gettext_lazy("OCR"),
        max_length=24,
        choices=OcrMode.choices,
        default=OcrMode.PAGES_WITHOUT_TEXT,
        db_default=OcrMode.PAGES_WITHOUT_TEXT,
        help_text=gettext_lazy(
            "OCR reads the text of pictures. Pages without text only: images, and PDF pages "
            "that have no text layer (scans). Always: also the pictures placed on PDF pages that "
            "do have text (scanned inserts, screenshots, words in a chart); slower. Off: an "
            "image fails its build and a PDF page without text is skipped (the build says "
            "which). Applies to files built from now on; the server's CANON_OCR=off turns it "
            "off for every knowledge base."
        ),
    )
    extract_headers_footers = models.BooleanField(
        gettext_lazy("index page headers and footers"),
        default=False,
        db_default=False,
        help_text=gettext_lazy(
            "Index the page headers and footers of word-processing documents (DOCX): often a "
            "company name and page numbers repeated on every page, so off by default. "
            "Footnotes are always indexed. Applies to files built from now on."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))

    class Meta:
        verbose_name = gettext_lazy("knowledge base")
        verbose_name_plural = gettext_lazy("knowledge bases")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="kb_unique_slug_per_tenant"),
            models.CheckConstraint(
                condition=models.Q(ocr_mode__in=["off", "pages_without_text", "always"]),
                name="kb_ocr_mode_known",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.slug}"


class MetadataField(models.Model):
    """A metadata field a knowledge base declares: its documents' values of it are checked and
    normalised to its type on every write (`kb.metadata`), and search filters compare them by
    it. A knowledge base that declares none accepts any metadata (what it did before fields)."""

    class Type(models.TextChoices):
        STRING = "string", gettext_lazy("String")
        NUMBER = "number", gettext_lazy("Number")
        DATE = "date", gettext_lazy("Date")
        BOOLEAN = "boolean", gettext_lazy("Boolean")
        STRING_LIST = "string_list", gettext_lazy("list of strings")

    kb = models.ForeignKey(
        KnowledgeBase,
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.CASCADE,
        related_name="metadata_fields",
    )
    name = models.CharField(
        max_length=64,
        help_text=gettext_lazy("Lower-case letters, digits and _ (e.g. department, valid_until)."),
        verbose_name=gettext_lazy("name"),
    )
    type = models.CharField(
        max_length=16, choices=Type.choices, default=Type.STRING, verbose_name=gettext_lazy("type")
    )
    description = models.CharField(
        max_length=300, blank=True, verbose_name=gettext_lazy("description")
    )

    class Meta:
        verbose_name = gettext_lazy("metadata field")
        verbose_name_plural = gettext_lazy("metadata fields")
        constraints = [
            models.UniqueConstraint(fields=["kb", "name"], name="metadata_field_unique_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_type_display()})"


class IndexVersion(models.Model):
    """One embedding space and pipeline configuration of a knowledge base."""

    class State(models.TextChoices):
        BUILDING = "building", gettext_lazy("Building")
        READY = "ready", gettext_lazy("Ready")
        ACTIVE = "active", gettext_lazy("Active")
        RETIRED = "retired", gettext_lazy("Retired")
        FAILED = "failed", gettext_lazy("Failed")

    kb = models.ForeignKey(
        KnowledgeBase,
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="index_versions",
    )
    number = models.PositiveIntegerField(verbose_name=gettext_lazy("number"))
    state = models.CharField(
        max_length=16,
        choices=State.choices,
        default=State.BUILDING,
        verbose_name=gettext_lazy("state"),
    )
    provider = models.CharField(
        max_length=50, default="hash", verbose_name=gettext_lazy("provider")
    )
    model = models.CharField(max_length=200, verbose_name=gettext_lazy("model"))
    dimensions = models.PositiveIntegerField(verbose_name=gettext_lazy("dimensions"))
    metric = models.CharField(max_length=16, default="cosine", verbose_name=gettext_lazy("metric"))
    chunk_size = models.PositiveIntegerField(verbose_name=gettext_lazy("chunk size"))
    chunk_overlap = models.PositiveIntegerField(verbose_name=gettext_lazy("chunk overlap"))
    pipeline_version = models.CharField(
        max_length=32, verbose_name=gettext_lazy("pipeline version")
    )
    # What the version's HNSW index holds (kb.ann): 4-byte floats, or 2-byte halfvec (half the
    # index, for scale); the chunk rows keep the full vector either way.
    vector_storage = models.CharField(
        max_length=8,
        choices=[
            ("vector", gettext_lazy("vector (float32)")),
            ("halfvec", gettext_lazy("halfvec (float16)")),
        ],
        default="vector",
        db_default="vector",
        verbose_name=gettext_lazy("vector storage"),
    )
    # The English list (issue 38): a second embedding of each chunk whose text is not Chinese
    # (`textkit.text.mostly_chinese`), by a packaged model that reads English paraphrase better
    # than a multilingual one, with its own HNSW index (`kb.ann`); search reads it as a third
    # list for queries not in Chinese. "" for a version without it.
    english_provider = models.CharField(
        max_length=50,
        blank=True,
        default="",
        db_default="",
        verbose_name=gettext_lazy("English list provider"),
    )
    english_model = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        verbose_name=gettext_lazy("English list model"),
    )
    english_dimensions = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("English list dimensions")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    activated_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("activated at")
    )
    retired_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("retired at")
    )
    collected_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("collected at")
    )  # chunks and index dropped

    class Meta:
        verbose_name = gettext_lazy("index version")
        verbose_name_plural = gettext_lazy("index versions")
        permissions = [
            (
                "manage_index_versions",
                gettext_lazy("Can create, swap and roll back index versions"),
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["kb", "number"], name="iv_unique_number_per_kb"),
            models.UniqueConstraint(
                fields=["kb"], condition=Q(state="active"), name="iv_one_active_per_kb"
            ),
            models.CheckConstraint(
                condition=Q(dimensions__gte=1) & Q(dimensions__lte=16000),
                name="iv_dimensions_range",
            ),
        ]

    def __str__(self) -> str:
        # No state: a stored "building" is not what a candidate that covers the knowledge base
        # is (ready; kb.selectors.index_versions.index_version_status says that).
        return f"{self.kb} v{self.number} ({self.model}, {self.dimensions}d)"

    @property
    def english_list(self) -> bool:
        """Whether the version embeds its English chunks a second time (`english_provider`)."""
        return bool(self.english_provider)

    @property
    def uses_postings(self) -> bool:
        """Whether the version's keyword leg is BM25 over postings (else the p1 tsvector)."""
        return self.pipeline_version not in LEGACY_LEXICAL_PIPELINES


class Document(models.Model):
    """A stable identity. `desired_revision` is the CAS target of the switch: only a build of
    that revision may become live, so late events for older revisions can never win."""

    kb = models.ForeignKey(
        KnowledgeBase,
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="documents",
    )
    key = models.CharField(max_length=255, verbose_name=gettext_lazy("key"))
    title = models.CharField(max_length=500, verbose_name=gettext_lazy("title"))
    access_groups = ArrayField(
        models.CharField(max_length=100),
        default=list,
        blank=True,
        verbose_name=gettext_lazy("access groups"),
    )
    metadata = models.JSONField(default=dict, blank=True, verbose_name=gettext_lazy("metadata"))
    desired_revision = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("desired revision")
    )
    deleted_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("deleted at")
    )
    purged_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("purged at")
    )  # chunks physically removed
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("updated at"))

    class Meta:
        verbose_name = gettext_lazy("document")
        verbose_name_plural = gettext_lazy("documents")
        constraints = [models.UniqueConstraint(fields=["kb", "key"], name="doc_unique_key_per_kb")]
        indexes = [
            models.Index(fields=["kb", "id"], name="doc_kb_id"),
            # Filters on metadata (retrieval.filters): containment for equality and lists.
            GinIndex(fields=["metadata"], name="doc_metadata_gin", opclasses=["jsonb_path_ops"]),
        ]
        permissions = [
            ("approve_build", gettext_lazy("Can approve a ready build")),
            ("rollback_document", gettext_lazy("Can roll a document back to an earlier build")),
            ("retry_build", gettext_lazy("Can retry a failed build")),
            ("soft_delete_document", gettext_lazy("Can delete a document (restorable)")),
            ("restore_document", gettext_lazy("Can restore a deleted document")),
        ]

    def __str__(self) -> str:
        return self.title or self.key


class Revision(models.Model):
    """An immutable uploaded source. The file lives under a content-addressed path."""

    document = models.ForeignKey(
        Document,
        on_delete=models.PROTECT,
        related_name="revisions",
        verbose_name=gettext_lazy("document"),
    )
    # The title found in the file (HTML <title>/<h1>, PDF metadata, DOCX properties, first
    # heading); set by the parse stage.
    extracted_title = models.CharField(
        max_length=500, blank=True, default="", verbose_name=gettext_lazy("extracted title")
    )
    number = models.PositiveIntegerField(verbose_name=gettext_lazy("number"))
    storage_path = models.CharField(max_length=300, verbose_name=gettext_lazy("storage path"))
    sha256 = models.CharField(max_length=64, verbose_name=gettext_lazy("sha256"))
    size = models.PositiveBigIntegerField(verbose_name=gettext_lazy("size"))
    media_type = models.CharField(max_length=100, verbose_name=gettext_lazy("media type"))
    original_name = models.CharField(
        max_length=255, blank=True, verbose_name=gettext_lazy("original name")
    )
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=gettext_lazy("uploaded by"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))

    class Meta:
        verbose_name = gettext_lazy("revision")
        verbose_name_plural = gettext_lazy("revisions")
        constraints = [
            models.UniqueConstraint(fields=["document", "number"], name="rev_unique_number")
        ]

    def __str__(self) -> str:
        return f"{self.document} r{self.number}"


class Build(models.Model):
    """The chunks of one revision under one index version: the candidate until switched live."""

    class State(models.TextChoices):
        PENDING = "pending", gettext_lazy("Pending")
        BUILDING = "building", gettext_lazy("Building")
        READY = "ready", gettext_lazy("Ready")
        LIVE = "live", gettext_lazy("Live")
        SUPERSEDED = "superseded", gettext_lazy("Superseded")
        FAILED = "failed", gettext_lazy("Failed")

    kb = models.ForeignKey(
        KnowledgeBase,
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="+",
    )
    document = models.ForeignKey(
        Document,
        on_delete=models.PROTECT,
        related_name="builds",
        verbose_name=gettext_lazy("document"),
    )
    revision = models.ForeignKey(
        Revision,
        on_delete=models.PROTECT,
        related_name="builds",
        verbose_name=gettext_lazy("revision"),
    )
    index_version = models.ForeignKey(
        IndexVersion,
        on_delete=models.PROTECT,
        related_name="builds",
        verbose_name=gettext_lazy("index version"),
    )
    state = models.CharField(
        max_length=16,
        choices=State.choices,
        default=State.PENDING,
        verbose_name=gettext_lazy("state"),
    )
    expected_chunk_count = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("expected chunk count")
    )
    chunks_written = models.PositiveIntegerField(
        default=0, verbose_name=gettext_lazy("chunks written")
    )
    # How many of the chunks must carry an English vector (`Chunk.embedding_en`): those not in
    # Chinese, when the version has an English list; None when it has none. Set with
    # `expected_chunk_count`, checked by the completeness check.
    english_expected = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("English vectors expected")
    )
    # How many of the build's chunks have a vector (cached or embedded so far), set by the embed
    # stage after each batch; the admin's progress counts it before any chunk is written.
    chunks_embedded = models.PositiveIntegerField(
        default=0, db_default=0, verbose_name=gettext_lazy("chunks embedded")
    )
    # What the parse stage is doing, while it runs long ("OCR page 12/40"), set by it (fenced);
    # the admin's progress shows it until the build has its chunk count.
    parse_progress = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        verbose_name=gettext_lazy("parse progress"),
    )
    # The parse stage's extracted text this build was chunked from (a derived file, never
    # rewritten): its chunks' char_start/char_end count into `Extracted.text()` of it. Set by
    # the pipeline after the parse stage (fenced); "" for a build not parsed yet. Citations and
    # search context read it back (`retrieval.extracted`).
    text_path = models.CharField(
        max_length=300,
        blank=True,
        default="",
        db_default="",
        verbose_name=gettext_lazy("text path"),
    )
    dimensions = models.PositiveIntegerField(verbose_name=gettext_lazy("dimensions"))
    manifest_sha256 = models.CharField(
        max_length=64, blank=True, verbose_name=gettext_lazy("manifest sha256")
    )
    # Set by the write stage once the written chunks were checked against the expected count,
    # dimensions and manifest; cleared (under the same lease fence) by any later chunk write.
    # The switch trusts it, so the switch reads no chunk rows.
    verified_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("verified at")
    )
    # Why it failed or was set aside, in English (the API's and the logs' words); and, when the
    # reason was a declared one (`textkit.reasons`), its code and values, which the admin words
    # in the person's language (`kb.failures`). "" and {} for rows from before codes were kept.
    error = models.TextField(blank=True, verbose_name=gettext_lazy("error"))
    error_code = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        verbose_name=gettext_lazy("error code"),
    )
    error_params = models.JSONField(
        blank=True, default=dict, db_default={}, verbose_name=gettext_lazy("error values")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("updated at"))
    finished_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("finished at")
    )
    # Set (under the build lock) when retention gives the build up; its chunks go after that.
    collected_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("collected at")
    )

    class Meta:
        verbose_name = gettext_lazy("build")
        verbose_name_plural = gettext_lazy("builds")
        constraints = [
            models.UniqueConstraint(
                fields=["revision", "index_version"], name="build_one_per_revision_and_version"
            )
        ]
        indexes = [models.Index(fields=["kb", "state"], name="build_kb_state")]

    def __str__(self) -> str:
        # No state: a stored "live" is not what search serves once its version is retired or its
        # document deleted (kb.selectors.builds.build_role_of says that, where a page needs it).
        return f"build {self.pk} ({self.revision}, v{self.index_version.number})"


class Chunk(models.Model):
    """One piece of a build. `embedding` is an untyped vector so each index version may have its
    own dimensions; the per-version HNSW index casts it to vector(D)."""

    kb = models.ForeignKey(
        KnowledgeBase,
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="+",
    )
    build = models.ForeignKey(
        Build, on_delete=models.CASCADE, related_name="chunks", verbose_name=gettext_lazy("build")
    )
    document = models.ForeignKey(
        Document, on_delete=models.PROTECT, related_name="+", verbose_name=gettext_lazy("document")
    )
    index_version = models.ForeignKey(
        IndexVersion,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=gettext_lazy("index version"),
    )
    ordinal = models.PositiveIntegerField(verbose_name=gettext_lazy("ordinal"))
    chunk_key = models.CharField(max_length=64, unique=True, verbose_name=gettext_lazy("chunk key"))
    text = models.TextField(verbose_name=gettext_lazy("text"))
    content_hash = models.CharField(max_length=64, verbose_name=gettext_lazy("content hash"))
    token_count = models.PositiveIntegerField(verbose_name=gettext_lazy("token count"))
    embedding = VectorField(null=True, blank=True)
    # The English list's vector (IndexVersion.english_provider), for chunks not in Chinese of a
    # version that has one; its own HNSW index per version casts it likewise (kb.ann).
    embedding_en = VectorField(null=True, blank=True)
    # Pipeline p1 only: the `simple` tsvector of the words and CJK bigrams (legacy keyword leg).
    lexical = SearchVectorField(null=True, blank=True)
    # From p2 on: the number of analysed terms (BM25's document length; postings in Posting).
    lexical_length = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("lexical length")
    )
    # The headings above the chunk, outermost first, joined by " › " ("11. Indexes › 11.8 ...").
    heading_path = models.TextField(
        blank=True, default="", db_default="", verbose_name=gettext_lazy("heading path")
    )
    # For citations (textkit.chunker.ChunkPiece): the chunk's range of the build's extracted text
    # and the pages, slides or rows it stands on ({"unit", "first", "last"[, "part"]}, as
    # textkit.extract.Location.to_json); null for chunks written before they were kept and for
    # formats without pages.
    char_start = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("char start")
    )
    char_end = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("char end")
    )
    location = models.JSONField(null=True, blank=True, verbose_name=gettext_lazy("location"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))

    class Meta:
        verbose_name = gettext_lazy("chunk")
        verbose_name_plural = gettext_lazy("chunks")
        constraints = [
            models.UniqueConstraint(fields=["build", "ordinal"], name="chunk_unique_ordinal")
        ]
        # Vector indexes are per index version (kb.ann), created when the version is.
        indexes = [
            GinIndex(fields=["lexical"], name="chunk_lexical_gin"),
            # The shard summaries (kb.audit) sum counts and content-hash digests per build from
            # this index alone (an index-only scan: ~100 B a chunk against the heap's kilobytes).
            models.Index(
                fields=["build", "ordinal"], include=["content_hash"], name="chunk_build_audit"
            ),
        ]

    def __str__(self) -> str:
        # Counted from 1, as every page shows chunks (the stored ordinal counts from 0).
        return f"chunk {self.ordinal + 1} of build {self.build_id}"


class Publication(models.Model):
    """The live pointer: (document, index version) -> build. The only thing search trusts."""

    kb = models.ForeignKey(
        KnowledgeBase,
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="+",
    )
    document = models.ForeignKey(
        Document,
        on_delete=models.PROTECT,
        related_name="publications",
        verbose_name=gettext_lazy("document"),
    )
    index_version = models.ForeignKey(
        IndexVersion,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=gettext_lazy("index version"),
    )
    build = models.ForeignKey(
        Build, on_delete=models.PROTECT, related_name="+", verbose_name=gettext_lazy("build")
    )
    published_at = models.DateTimeField(verbose_name=gettext_lazy("published at"))

    class Meta:
        verbose_name = gettext_lazy("publication")
        verbose_name_plural = gettext_lazy("publications")
        constraints = [
            models.UniqueConstraint(
                fields=["document", "index_version"], name="pub_one_per_document_and_version"
            )
        ]
        indexes = [
            models.Index(fields=["build"], name="pub_build"),
            models.Index(fields=["index_version", "document"], name="pub_version_document"),
        ]

    def __str__(self) -> str:
        return f"{self.document} v{self.index_version_id} -> build {self.build_id}"


class PublicationEvent(models.Model):
    """Append-only history of every pointer change."""

    class Action(models.TextChoices):
        PUBLISH = "publish", gettext_lazy("Publish")
        APPROVE = "approve", gettext_lazy("Approve")
        ROLLBACK = "rollback", gettext_lazy("Rollback")
        DELETE = "delete", gettext_lazy("Delete")
        RESTORE = "restore", gettext_lazy("Restore")

    kb = models.ForeignKey(
        KnowledgeBase,
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="+",
    )
    document = models.ForeignKey(
        Document,
        on_delete=models.PROTECT,
        related_name="events",
        verbose_name=gettext_lazy("document"),
    )
    index_version = models.ForeignKey(
        IndexVersion,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=gettext_lazy("index version"),
    )
    action = models.CharField(
        max_length=16, choices=Action.choices, verbose_name=gettext_lazy("action")
    )
    build = models.ForeignKey(
        Build,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=gettext_lazy("build"),
    )
    previous_build = models.ForeignKey(
        Build,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=gettext_lazy("previous build"),
    )
    revision_number = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=gettext_lazy("revision number")
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=gettext_lazy("actor"),
    )
    reason = models.TextField(blank=True, verbose_name=gettext_lazy("reason"))
    created_at = models.DateTimeField(
        auto_now_add=True, db_index=True, verbose_name=gettext_lazy("created at")
    )

    class Meta:
        verbose_name = gettext_lazy("publication event")
        verbose_name_plural = gettext_lazy("publication events")

    def __str__(self) -> str:
        return f"{self.action} {self.document} at {self.created_at:%Y-%m-%d %H:%M:%S}"


class Posting(models.Model):
    """One analysed term of one chunk: the keyword index (`retrieval.lexical`).

    `impact` is the term's BM25 weight in the chunk without IDF, under a nominal average length,
    so a term's postings can be read best-first from the index and a common word never makes a
    search rank every chunk that contains it. Written with the chunk, under the same lease fence;
    deleted before the chunk (retention, purge)."""

    pk = models.CompositePrimaryKey("chunk_id", "term")
    # The primary key (chunk, term) serves lookups by chunk: no index of its own.
    chunk = models.ForeignKey(Chunk, on_delete=models.CASCADE, related_name="+", db_index=False)
    # Its chunk's version, copied for the index below; the chunk's own foreign key keeps it
    # real, and a second deferred check per posting (~80 a chunk) doubled what a build's
    # commit spent on checks (docs/BENCHMARKS.md, B10).
    index_version = models.ForeignKey(
        IndexVersion,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    term = models.CharField(max_length=64)
    tf = models.PositiveSmallIntegerField()
    impact = models.FloatField()

    class Meta:
        indexes = [
            models.Index(
                fields=["index_version", "term", "-impact"],
                include=["chunk", "tf"],
                name="posting_term_impact",
            )
        ]

    def __str__(self) -> str:
        return f"{self.term!r} in chunk {self.chunk_id}"


class LexicalStat(models.Model):
    """A build's share of its index version's BM25 statistics: for each term, how many of its
    chunks contain it; for the term "" the build's chunk count and total length. The version's
    statistics are the sum over the builds whose chunks are retained (as a search engine counts
    deleted documents until a merge). Replaced whole when the build's chunks are written, deleted
    with them."""

    pk = models.CompositePrimaryKey("build_id", "term")
    build = models.ForeignKey(Build, on_delete=models.DO_NOTHING, related_name="+", db_index=False)
    index_version = models.ForeignKey(
        IndexVersion, on_delete=models.DO_NOTHING, related_name="+", db_index=False
    )
    term = models.CharField(max_length=64, blank=True)
    chunks = models.PositiveIntegerField()
    length = models.BigIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(
                fields=["index_version", "term"], include=["chunks", "length"], name="lexstat_term"
            )
        ]

    def __str__(self) -> str:
        return f"{self.term!r}: {self.chunks} chunks of build {self.build_id}"


class BuildSeal(models.Model):
    """What a verified build's chunks summed to when the audit last read them all (`kb.audit`):
    their count and digest (the sum of a 64-bit hash of each chunk's build, ordinal and content
    hash). Valid while `verified_at` equals the build's; `ok` is False once the build was found
    damaged (escalated), which takes it out of the shard summaries."""

    build = models.OneToOneField(
        Build, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    verified_at = models.DateTimeField()
    ok = models.BooleanField()
    chunk_count = models.PositiveIntegerField()
    digest = models.DecimalField(max_digits=40, decimal_places=0, null=True)
    sealed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"seal of build {self.build_id} ({'ok' if self.ok else 'damaged'})"


class AuditCursor(models.Model):
    """Where one resumable walk (`kb.audit`) stands: the documents by (kb id, document id) for
    `kb_verify --resume` and the reconciler, the builds by id (`position_kb` 0) for the shard
    summaries. A slice moves it in the transaction that records the slice."""

    name = models.CharField(max_length=64, primary_key=True)
    pass_number = models.PositiveIntegerField(default=1)
    position_kb = models.BigIntegerField(default=0)
    position_id = models.BigIntegerField(default=0)
    pass_started_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    last_pass_finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} pass {self.pass_number} at ({self.position_kb}, {self.position_id})"


class AuditSlice(models.Model):
    """One committed slice of a walk: the documents (after_*, through_*] it checked and what it
    found. Written with the cursor's move, so a slice killed before it commits leaves nothing and
    is checked again; kept for the current and the previous pass."""

    cursor = models.ForeignKey(AuditCursor, on_delete=models.CASCADE, related_name="slices")
    pass_number = models.PositiveIntegerField()
    after_kb = models.BigIntegerField()
    after_id = models.BigIntegerField()
    through_kb = models.BigIntegerField()
    through_id = models.BigIntegerField()
    items = models.PositiveIntegerField()
    violations = models.JSONField(default=list)
    seconds = models.FloatField()
    last_of_pass = models.BooleanField(default=False)
    finished_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.cursor_id} pass {self.pass_number}: {self.items} items"
