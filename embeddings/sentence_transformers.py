"""`sentence-transformers`: a local model directory (the optional extra `local-models`), loaded
once per process and never downloaded."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from embeddings.base import (
    EXTRA_MISSING,
    LOCAL_MODEL_DIMENSIONS,
    LOCAL_PROVIDER,
    NO_LOCAL_MODEL,
    EmbeddingShapeError,
    ProviderMisconfigured,
    ProviderSpec,
    register,
)


@lru_cache(maxsize=4)
def _load_local_model(path: str, device: str) -> Any:
    """Load a sentence-transformers model from a local directory, never from the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ProviderMisconfigured(EXTRA_MISSING()) from exc
    if not Path(path).is_dir():
        raise ProviderMisconfigured(NO_LOCAL_MODEL(path=path))
    return SentenceTransformer(path, device=device, local_files_only=True)


class SentenceTransformersProvider:
    """A sentence-transformers model loaded from a path (CANON_LOCAL_MODELS_DIR/<model>, or
    `model` itself when absolute). Vectors are L2-normalised."""

    def __init__(self, *, model: str, dimensions: int, models_dir: str | None = None) -> None:
        from django.conf import settings

        self.name = LOCAL_PROVIDER
        self.model = model
        self.dimensions = dimensions
        path = model_path(model, models_dir)
        self._encoder = _load_local_model(str(path), settings.LOCAL_MODEL_DEVICE)
        get_dimension = getattr(self._encoder, "get_sentence_embedding_dimension", None) or getattr(
            self._encoder, "get_embedding_dimension", None
        )
        actual = get_dimension() if get_dimension is not None else None
        if actual is not None and actual != dimensions:
            raise EmbeddingShapeError(
                LOCAL_MODEL_DIMENSIONS(
                    model=model, dimensions=str(actual), expected=str(dimensions)
                )
            )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        array = self._encoder.encode(
            list(texts),
            batch_size=max(1, len(texts)),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [[float(value) for value in row] for row in array]


def model_path(model: str, models_dir: str | None = None) -> Path:
    """Where the model directory named `model` is: itself when absolute, else under
    CANON_LOCAL_MODELS_DIR."""
    from django.conf import settings

    path = Path(model)
    if not path.is_absolute():
        path = Path(models_dir or settings.LOCAL_MODELS_DIR) / model
    return path


def _installed() -> bool:
    try:
        return importlib.util.find_spec("sentence_transformers") is not None
    except (ImportError, ValueError):  # a broken install, or a stand-in without a spec
        return False


def _preload(model: str) -> None:
    from django.conf import settings

    _load_local_model(str(model_path(model)), settings.LOCAL_MODEL_DEVICE)


SPEC = register(
    ProviderSpec(
        name=LOCAL_PROVIDER,
        label="sentence-transformers (a local model directory)",
        default_model="all-MiniLM-L6-v2",
        default_dimensions=384,
        build=lambda model, dimensions, _base_url: SentenceTransformersProvider(
            model=model, dimensions=dimensions
        ),
        available=_installed,
        preload=_preload,
    )
)
