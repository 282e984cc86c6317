"""A knowledge base's own questions and how search answers them: question sets, their
questions, evaluation runs (leased work, `evaluation.run`) and each question's result per mode.

A run keeps what makes it comparable later: the question set's version when it started, the
index version it asked (pinned at its first attempt) and that version's settings, the fusion
and rerank settings, and top_k. Each result keeps the question as it was asked (its id, text,
language, tag and expected documents), so a run's figures can be recomputed from its results
alone, whatever became of the set since.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext, gettext_lazy, pgettext_lazy

from evaluation.metrics import METRICS

# A document key is at most this long (kb.Document.key).
KEY_MAX = 255
# A question is a search query: at most what the API searches (CANON_SEARCH_MAX_QUERY_CHARS).
QUESTION_MAX = 4000
PASSAGE_MAX = 4000
TAG_MAX = 100
EXTERNAL_ID_MAX = 200


class Language(models.TextChoices):
    EN = "en", gettext_lazy("English")
    ZH = "zh", gettext_lazy("Chinese")


class QuestionSet(models.Model):
    """A knowledge base's labelled questions. `version` goes up with every change of its
    questions (`evaluation.services.question_sets`), so a run says which questions it asked."""

    kb = models.ForeignKey(
        "kb.KnowledgeBase",
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="question_sets",
    )
    name = models.CharField(gettext_lazy("name"), max_length=200)
    description = models.TextField(gettext_lazy("description"), blank=True)
    version = models.PositiveIntegerField(gettext_lazy("version"), default=1, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    created_at = models.DateTimeField(gettext_lazy("created"), auto_now_add=True)
    updated_at = models.DateTimeField(gettext_lazy("updated"), auto_now=True)

    class Meta:
        verbose_name = gettext_lazy("question set")
        verbose_name_plural = gettext_lazy("question sets")
        constraints = [
            models.UniqueConstraint(fields=["kb", "name"], name="question_set_name_per_kb"),
        ]

    def __str__(self) -> str:
        return self.name


class Question(models.Model):
    """One question: the query asked, the documents that answer it (keys), optionally the
    passage that does, its language and a tag (a kind of question, a team, a topic)."""

    question_set = models.ForeignKey(
        QuestionSet,
        verbose_name=gettext_lazy("question set"),
        on_delete=models.CASCADE,
        related_name="questions",
    )
    external_id = models.CharField(
        gettext_lazy("id"),
        max_length=EXTERNAL_ID_MAX,
        help_text=gettext_lazy("Unique within the set; how files name it."),
    )
    text = models.TextField(gettext_lazy("question"), max_length=QUESTION_MAX)
    expected_keys = ArrayField(
        models.CharField(max_length=KEY_MAX),
        verbose_name=gettext_lazy("expected documents"),
        help_text=gettext_lazy("The keys of the documents that answer it."),
    )
    expected_passage = models.TextField(
        gettext_lazy("expected passage"),
        blank=True,
        max_length=PASSAGE_MAX,
        help_text=gettext_lazy("Optional: the words that answer it, as the document has them."),
    )
    language = models.CharField(gettext_lazy("language"), max_length=8, choices=Language.choices)
    tag = models.CharField(gettext_lazy("tag"), max_length=TAG_MAX, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = gettext_lazy("question")
        verbose_name_plural = pgettext_lazy("model", "questions")
        constraints = [
            models.UniqueConstraint(
                fields=["question_set", "external_id"], name="question_id_per_set"
            ),
        ]

    def __str__(self) -> str:
        return self.external_id


class EvaluationRun(models.Model):
    """Every question of a set asked of one index version, in each mode (`evaluation.run`)."""

    class State(models.TextChoices):
        QUEUED = "queued", gettext_lazy("Queued")
        RUNNING = "running", gettext_lazy("Running")
        SUCCEEDED = "succeeded", gettext_lazy("Succeeded")
        FAILED = "failed", gettext_lazy("Failed")

    OPEN_STATES = (State.QUEUED, State.RUNNING)

    class Target(models.TextChoices):
        ACTIVE = "active", gettext_lazy("the active version")
        CANDIDATE = "candidate", gettext_lazy("another index version")
        # One document's pending revision: its build served instead of the live one, the rest
        # of the knowledge base as it is (`retrieval.search.engine.search(served_instead=...)`).
        REVISION = "revision", gettext_lazy("a pending revision served instead")

    kb = models.ForeignKey(
        "kb.KnowledgeBase",
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.PROTECT,
        related_name="evaluation_runs",
    )
    question_set = models.ForeignKey(
        QuestionSet,
        verbose_name=gettext_lazy("question set"),
        on_delete=models.PROTECT,
        related_name="runs",
    )
    question_set_version = models.PositiveIntegerField(gettext_lazy("question set version"))
    target = models.CharField(
        gettext_lazy("asked"), max_length=16, choices=Target.choices, default=Target.ACTIVE
    )
    # The version asked: chosen with a candidate target, pinned at the first attempt for the
    # active one (a swap during the run does not mix two versions' answers).
    index_version = models.ForeignKey(
        "kb.IndexVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # A revision target's build, served instead of its document's live one in `index_version`.
    served_build = models.ForeignKey(
        "kb.Build", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    modes = ArrayField(models.CharField(max_length=8))
    top_k = models.PositiveSmallIntegerField(default=10)
    # Started by the knowledge base's nightly schedule (`evaluation.services.schedule`).
    scheduled = models.BooleanField(default=False)
    state = models.CharField(
        gettext_lazy("state"), max_length=16, choices=State.choices, default=State.QUEUED
    )
    task = models.OneToOneField(
        "ingestion.IngestionTask",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="evaluation_run",
    )
    # Who the run reads as: the requester's access groups when they asked (all_groups: every
    # group, as a superuser reads), so a resumed attempt reads exactly what the first did.
    access_groups = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    all_groups = models.BooleanField(default=False)
    questions_total = models.PositiveIntegerField(default=0)
    # The index version's, fusion's and rerank's settings and top_k, taken by the worker that
    # ran it (`evaluation.run`).
    search_settings = models.JSONField(default=dict, blank=True)
    # Per mode: `evaluation.metrics.summarize` of its results.
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(gettext_lazy("created"), auto_now_add=True)
    started_at = models.DateTimeField(gettext_lazy("started"), null=True, blank=True)
    finished_at = models.DateTimeField(gettext_lazy("finished"), null=True, blank=True)

    class Meta:
        verbose_name = gettext_lazy("evaluation run")
        verbose_name_plural = gettext_lazy("evaluation runs")
        permissions = [("run_evaluation", gettext_lazy("Can run evaluations of a knowledge base"))]
        indexes = [
            models.Index(fields=["kb", "-created_at"], name="evaluation_run_recent"),
            models.Index(fields=["question_set", "-created_at"], name="evaluation_run_of_set"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(target="active") | Q(index_version__isnull=False),
                name="evaluation_run_candidate_named",
            ),
            models.CheckConstraint(
                condition=(Q(target="revision") & Q(served_build__isnull=False))
                | (~Q(target="revision") & Q(served_build__isnull=True)),
                name="evaluation_run_revision_named",
            ),
        ]

    def __str__(self) -> str:
        return gettext("Evaluation %(n)s") % {"n": self.pk}


class EvaluationResult(models.Model):
    """How search answered one question in one mode: the rank of its first expected document
    among the documents of the top 10 hits (None: missed), those documents (keys, best first),
    whether the expected passage was among the hits, and how long the search took."""

    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="results")
    question = models.ForeignKey(
        Question, null=True, blank=True, on_delete=models.SET_NULL, related_name="results"
    )
    mode = models.CharField(max_length=8)
    # The question as it was asked.
    external_id = models.CharField(max_length=EXTERNAL_ID_MAX)
    text = models.TextField()
    language = models.CharField(max_length=8)
    tag = models.CharField(max_length=TAG_MAX, blank=True)
    expected_keys = ArrayField(models.CharField(max_length=KEY_MAX))
    rank = models.PositiveSmallIntegerField(null=True, blank=True)
    returned_keys = ArrayField(models.CharField(max_length=KEY_MAX), default=list, blank=True)
    passage_found = models.BooleanField(null=True, blank=True)
    latency_ms = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = gettext_lazy("evaluation result")
        verbose_name_plural = gettext_lazy("evaluation results")
        constraints = [
            models.UniqueConstraint(
                fields=["run", "question", "mode"], name="evaluation_result_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.external_id} ({self.mode})"


class QualityGate(models.Model):
    """A knowledge base's quality gate: the question set whose figures judge a swap, the figure
    and mode (MRR@10 of hybrid by default), and the largest drop allowed. A swap whose
    candidate drops it by more is refused unless a person with `override_quality_gate` gives
    a reason (`evaluation.gate`); with `nightly`, the set is asked of the active version every
    night at `nightly_hour`, and a drop past the same threshold is an anomaly on the
    consistency dashboard (`evaluation.services.schedule`).

    Evaluation's own row, not fields of the knowledge base: kb may not import evaluation, so
    the swap service asks the checks the floors above register (`kb.services.index_versions.
    SWAP_CHECKS`), and this one reads its gate here."""

    kb = models.OneToOneField(
        "kb.KnowledgeBase",
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.CASCADE,
        related_name="quality_gate",
    )
    question_set = models.ForeignKey(
        QuestionSet,
        verbose_name=gettext_lazy("question set"),
        on_delete=models.PROTECT,
        related_name="+",
        help_text=gettext_lazy("The questions whose figures judge a swap."),
    )
    metric = models.CharField(
        max_length=16,
        choices=[(name, name) for name in METRICS],
        default="mrr@10",
        help_text=gettext_lazy("The figure compared, over all questions of the set."),
    )
    mode = models.CharField(
        max_length=8,
        choices=[(mode, mode) for mode in ("hybrid", "keyword", "vector")],
        default="hybrid",
        help_text=gettext_lazy("The search mode whose figure is compared."),
    )
    max_drop = models.FloatField(
        gettext_lazy("largest drop allowed"),
        default=0.02,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text=gettext_lazy(
            "How much lower the candidate's figure may be than the active version's "
            "(0.02: MRR@10 0.700 may become 0.680, not 0.679)."
        ),
    )
    refuse_swaps = models.BooleanField(
        gettext_lazy("refuse swaps"),
        default=True,
        help_text=gettext_lazy("Unticked, the swap page shows the figures but refuses nothing."),
    )
    nightly = models.BooleanField(
        gettext_lazy("nightly run"),
        default=False,
        help_text=gettext_lazy(
            "Ask the set of the active version every night, and raise an anomaly on the "
            "consistency dashboard when the figure drops by more than allowed since the last run."
        ),
    )
    nightly_hour = models.PositiveSmallIntegerField(
        gettext_lazy("hour of the nightly run"),
        default=2,
        validators=[MaxValueValidator(23)],
        help_text=gettext_lazy("0-23, in the server's time zone."),
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = gettext_lazy("quality gate")
        verbose_name_plural = gettext_lazy("quality gates")
        permissions = [
            (
                "override_quality_gate",
                gettext_lazy(
                    "Can swap in an index version the quality gate refuses, giving a reason"
                ),
            )
        ]

    def __str__(self) -> str:
        return f"Quality gate of {self.kb}"


class Calibration(models.Model):
    """The learned fusion refitted on a question set of a knowledge base (issue 39, item 6;
    `evaluation.services.calibration`): the candidate parameters, cross-validated against the
    shipped default on the set, which a person may adopt through the gate a swap passes.

    Computed once per (set, set version, index version) (`calibration_request`) as leased work:
    an IngestionTask of kind "calibration" (`task`), claimed, heartbeated, requeued by the lease
    sweeper when its worker dies and dead past its attempt cap, as an evaluation run's is. Each
    question's held-out ranking is kept under the default and under the candidate (document
    keys: the admin names only those the viewer may read), and each fold's figures."""

    class State(models.TextChoices):
        QUEUED = "queued", gettext_lazy("queued")
        RUNNING = "running", gettext_lazy("computing")
        # a refit beat the default on the held-out folds: it may be adopted
        CANDIDATE = "candidate", gettext_lazy("candidate")
        # no refit beat the default by more than noise: nothing to adopt
        DEFAULT_KEPT = "default_kept", gettext_lazy("default kept")
        FAILED = "failed", gettext_lazy("failed")
        ADOPTED = "adopted", gettext_lazy("adopted")
        ROLLED_BACK = "rolled_back", gettext_lazy("rolled back")
        # another calibration was adopted after it
        REPLACED = "replaced", gettext_lazy("replaced")

    OPEN_STATES = (State.QUEUED, State.RUNNING)
    # Those a person may adopt (again).
    ADOPTABLE = (State.CANDIDATE, State.ROLLED_BACK, State.REPLACED)

    kb = models.ForeignKey(
        "kb.KnowledgeBase",
        verbose_name=gettext_lazy("knowledge base"),
        on_delete=models.CASCADE,
        related_name="calibrations",
    )
    question_set = models.ForeignKey(
        QuestionSet,
        verbose_name=gettext_lazy("question set"),
        on_delete=models.PROTECT,
        related_name="calibrations",
    )
    question_set_version = models.PositiveIntegerField()
    # The version whose legs were read (the active one when it was asked for).
    index_version = models.ForeignKey("kb.IndexVersion", on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    # The leased task that computes it (`evaluation.services.calibration.calibration_execute`);
    # None for one asked before calibrations were leased work.
    task = models.OneToOneField(
        "ingestion.IngestionTask",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="calibration",
    )
    # The shipped default's SHA-256 when computed: a calibration of another default is stale.
    default_sha256 = models.CharField(max_length=64, blank=True)
    # The candidate's parameters (`fusion_fitting.parameters_of`); the default's when kept.
    parameters = models.JSONField(default=dict, blank=True)
    # The L2 strength toward the default that cross-validation chose (None: the default kept).
    l2 = models.FloatField(null=True, blank=True)
    questions = models.PositiveIntegerField(default=0)
    teaching = models.PositiveIntegerField(default=0)
    # Held-out MRR@10 over every question: the default's, the candidate's.
    default_mrr = models.FloatField(null=True, blank=True)
    candidate_mrr = models.FloatField(null=True, blank=True)
    # [{"n", "default_mrr", "candidate_mrr"}] per fold; {l2: {"mrr@10", "gain", "se"}}.
    folds = models.JSONField(default=list, blank=True)
    grid = models.JSONField(default=dict, blank=True)
    # [{"question", "external_id", "text", "expected", "default", "candidate"}]: each
    # question's documents when held out, best first, under the default and the candidate.
    per_question = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    computed_at = models.DateTimeField(null=True, blank=True)
    adopted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    adopted_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)  # rolled back or replaced

    class Meta:
        verbose_name = gettext_lazy("fusion calibration")
        verbose_name_plural = gettext_lazy("fusion calibrations")
        indexes = [models.Index(fields=["kb", "-created_at"], name="evaluation_calib_recent")]
        constraints = [
            # one computation per set version and index version (a failed one may be retried)
            models.UniqueConstraint(
                fields=["question_set", "question_set_version", "index_version"],
                condition=~Q(state="failed"),
                name="evaluation_calibration_once",
            ),
            # at most one adopted per knowledge base
            models.UniqueConstraint(
                fields=["kb"], condition=Q(state="adopted"), name="evaluation_calibration_adopted"
            ),
        ]

    def __str__(self) -> str:
        return f"Calibration {self.pk}"
