"""What every embedding provider shares: the protocol, the errors (retryable or terminal), the
checks applied to what a provider returns, and the registry `get_provider` builds from.

Each provider module registers one ProviderSpec: its name, what the admin shows, the model and
dimensions a new index version starts from, and how to build and preload it. Nothing here ever
falls back to another provider or model.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from textkit.reasons import Reason, ReasonedError, reason
from textkit.words import gettext_noop

logger = logging.getLogger(__name__)

HASH_PROVIDER = "hash"
OPENAI_PROVIDER = "openai"
LOCAL_PROVIDER = "sentence-transformers"
USE_PROVIDER = "use"
MINILM_PROVIDER = "minilm"


class EmbeddingError(ReasonedError):
    """Embedding failed; `retryable` says whether trying again later can succeed. Its message is
    a declared reason (below) where a build's failure may show it to a person."""

    retryable: bool = False


class ProviderUnavailable(EmbeddingError):
    """The provider could not be reached, timed out, is rate limiting or answered garbage.

    `retry_at` (Unix seconds), when set, is the earliest time worth trying again (the breaker's
    next probe, a Retry-After); `retry_after` is the server's Retry-After for this one answer.
    """

    retryable = True

    def __init__(
        self,
        message: str | Reason,
        *,
        retry_at: float | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_at = retry_at
        self.retry_after = retry_after


class CircuitOpen(ProviderUnavailable):
    """The shared circuit breaker is open: no call was made."""


class ProviderRejected(EmbeddingError):
    """The provider answered and refused the request (400, 401, 404, 500, ...): retrying the
    same request cannot help."""

    retryable = False


class ProviderMisconfigured(EmbeddingError):
    """The provider cannot be used as configured (optional package missing, no model at the
    path, unknown settings)."""

    retryable = False


class EmbeddingShapeError(EmbeddingError):
    """The provider answered with the wrong number of vectors, wrong sizes or bad values."""

    retryable = False


class EmbeddingProvider(Protocol):
    """Turns texts into vectors of `dimensions` floats, one per text, in order."""

    name: str
    model: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


# Why embedding failed for good (a build's failure shows them). Values that are names or
# numbers read as identifiers (a vector's index, dimensions, an HTTP status) are text.
REFUSED = reason(
    "embedding.refused",
    gettext_noop("%(provider)s refused the request: HTTP %(status)s: %(answer)s"),
)
COULD_NOT_EMBED = reason(
    "embedding.could_not_embed", gettext_noop("%(model)s could not embed the batch: %(detail)s")
)
WRONG_COUNT = reason(
    "embedding.wrong_count",
    gettext_noop("The embedding provider returned %(vectors)s vectors for %(texts)s texts."),
)
WRONG_DIMENSIONS = reason(
    "embedding.wrong_dimensions",
    gettext_noop("Vector %(index)s has %(dimensions)s dimensions; expected %(expected)s."),
)
NOT_A_NUMBER = reason(
    "embedding.not_a_number",
    gettext_noop("Vector %(index)s contains a value that is not a number."),
)
NOT_FINITE = reason(
    "embedding.not_finite", gettext_noop("Vector %(index)s contains NaN or infinity.")
)
ALL_ZEROS = reason(
    "embedding.all_zeros",
    gettext_noop("Vector %(index)s is all zeros, so its cosine distance is undefined."),
)
INPUTS_NOT_NAMED_ONCE = reason(
    "embedding.inputs_not_named_once",
    gettext_noop(
        "The embedding provider's answer does not name each input exactly once (indices "
        "%(indices)s)."
    ),
)
MODEL_DIMENSIONS = reason(
    "embedding.model_dimensions",
    gettext_noop(
        "The model %(model)s produces %(dimensions)s dimensions; the index version expects "
        "%(expected)s."
    ),
)
LOCAL_MODEL_DIMENSIONS = reason(
    "embedding.local_model_dimensions",
    gettext_noop(
        "The local model %(model)s produces %(dimensions)s dimensions; the index version "
        "expects %(expected)s."
    ),
)
NO_SUCH_MODEL = reason(
    "embedding.no_such_model",
    gettext_noop("The use provider has no model %(model)s; its one model is %(only)s."),
)
PACKAGE_MISSING = reason(
    "embedding.package_missing",
    gettext_noop(
        "The use provider needs the package %(package)s (a dependency of Canon: reinstall with "
        "pip install -e .)."
    ),
)
MODEL_PACKAGE_MISSING = reason(
    "embedding.model_package_missing",
    gettext_noop(
        "The %(provider)s provider needs the packages %(package)s (dependencies of Canon: "
        "reinstall with pip install -e .)."
    ),
)
COULD_NOT_LOAD = reason(
    "embedding.could_not_load", gettext_noop("Could not load %(model)s: %(detail)s")
)
EXTRA_MISSING = reason(
    "embedding.extra_missing",
    gettext_noop(
        "The sentence-transformers provider needs the optional extra: pip install -e "
        "'.[local-models]'."
    ),
)
NO_LOCAL_MODEL = reason(
    "embedding.no_local_model",
    gettext_noop(
        "No local model at %(path)s. Put the model directory there (Canon never downloads "
        "models) or set CANON_LOCAL_MODELS_DIR."
    ),
)


def check_shape(
    vectors: Sequence[Sequence[float]], *, expected_count: int, dimensions: int
) -> None:
    """Raise EmbeddingShapeError unless there are `expected_count` vectors of `dimensions` finite
    numbers, none of them all zeros."""
    if len(vectors) != expected_count:
        raise EmbeddingShapeError(WRONG_COUNT(vectors=str(len(vectors)), texts=str(expected_count)))
    for index, vector in enumerate(vectors):
        if len(vector) != dimensions:
            raise EmbeddingShapeError(
                WRONG_DIMENSIONS(
                    index=str(index), dimensions=str(len(vector)), expected=str(dimensions)
                )
            )
        try:
            finite = all(math.isfinite(value) for value in vector)
        except TypeError:
            raise EmbeddingShapeError(NOT_A_NUMBER(index=str(index))) from None
        if not finite:
            raise EmbeddingShapeError(NOT_FINITE(index=str(index)))
        if not any(vector):
            raise EmbeddingShapeError(ALL_ZEROS(index=str(index)))


# --- what the packaged (in-process) models share -------------------------------------------


def log_loaded(model: str, started: float, threads: int) -> None:
    """The line each process logs when it has loaded a packaged model (`started`: its
    `time.perf_counter()` before loading)."""
    logger.info(
        "embedding model %s loaded in %.2fs (%d thread%s, pid %d)",
        model,
        time.perf_counter() - started,
        threads,
        "" if threads == 1 else "s",
        os.getpid(),
    )


def require_dimensions(model: str, has: int, asked: int) -> None:
    """Refuse an index version that asks a fixed-size model for other dimensions."""
    if asked != has:
        raise EmbeddingShapeError(
            MODEL_DIMENSIONS(model=model, dimensions=str(has), expected=str(asked))
        )


def local_vectors(
    encode: Callable[[list[str]], Any], texts: Sequence[str], model: str
) -> list[list[float]]:
    """An in-process encoder's rows for `texts` as lists of floats: running out of memory is
    worth retrying later, anything else the model raised is its refusal of this batch."""
    if not texts:
        return []
    try:
        array = encode(list(texts))
    except MemoryError as exc:
        raise ProviderUnavailable(
            f"Not enough memory to embed {len(texts)} texts with {model}."
        ) from exc
    except Exception as exc:
        raise ProviderRejected(COULD_NOT_EMBED(model=model, detail=str(exc))) from exc
    vectors: list[list[float]] = array.astype(float).tolist()
    return vectors


# --- the registry ------------------------------------------------------------------------

Factory = Callable[[str, int, str | None], EmbeddingProvider]


@dataclass(frozen=True)
class ProviderSpec:
    """One provider as the registry, the admin's *New index version…* form and the preloader
    know it.

    `models` maps the models whose dimension is fixed to that dimension: an index version of one
    of them must use exactly it. `fixed_models` says the provider knows no other models.
    `available` is False when an optional package is missing (the admin then does not offer it).
    `preload` loads a model's weights into this process so the first call does not pay for it.
    """

    name: str
    label: str
    default_model: str
    default_dimensions: int
    build: Factory
    models: Mapping[str, int] = field(default_factory=dict)
    fixed_models: bool = False
    available: Callable[[], bool] = lambda: True
    preload: Callable[[str], None] | None = None

    def dimension_problem(self, model: str, dimensions: int) -> str | None:
        """Why `model` at `dimensions` cannot be an index version of this provider, or None."""
        expected = self.models.get(model)
        if expected is None and self.fixed_models:
            known = ", ".join(self.models)
            return f"The {self.name} provider has no model {model!r}; it has {known}."
        if expected is not None and expected != dimensions:
            return f"{model} produces {expected} dimensions, not {dimensions}."
        return None


_SPECS: dict[str, ProviderSpec] = {}


def register(spec: ProviderSpec) -> ProviderSpec:
    _SPECS[spec.name] = spec
    return spec


def provider_specs() -> list[ProviderSpec]:
    """Every registered provider, in registration order."""
    return list(_SPECS.values())


def provider_spec(name: str) -> ProviderSpec:
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(
            f"unknown embedding provider {name!r}; known providers: {', '.join(_SPECS)}"
        ) from None


def get_provider(
    *, provider: str, model: str, dimensions: int, base_url: str | None = None
) -> EmbeddingProvider:
    """Return the provider named `provider` for exactly this model and dimension; ValueError for
    a name this build does not know. `base_url` overrides CANON_OPENAI_BASE_URL (openai only)."""
    return provider_spec(provider).build(model, dimensions, base_url)


def preload(entries: Sequence[str]) -> list[str]:
    """Load the weights of each `provider/model` entry (CANON_PRELOAD_EMBEDDING_MODELS) into
    this process, so the first build or query does not wait for them; returns what it loaded.
    Providers with nothing to load (hash, openai) are skipped. Raises what loading raises: a
    process configured to serve a model it cannot load should not start."""
    loaded = []
    for entry in entries:
        name, _, model = entry.strip().partition("/")
        if not name:
            continue
        spec = provider_spec(name)
        if spec.preload is None:
            continue
        spec.preload(model or spec.default_model)
        loaded.append(f"{name}/{model or spec.default_model}")
    return loaded
