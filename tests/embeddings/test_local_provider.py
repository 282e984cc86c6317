"""The optional sentence-transformers provider: imported lazily, a clear error when the extra is
not installed, loaded only from a local path (never downloaded), dimensions checked on load.
`make test` does not install the extra, so the loading path runs against a stand-in module."""

from __future__ import annotations

import os
import re
import sys
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from embeddings import (
    EmbeddingShapeError,
    ProviderMisconfigured,
    SentenceTransformersProvider,
    _load_local_model,
    get_provider,
)


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    _load_local_model.cache_clear()
    yield
    _load_local_model.cache_clear()


class FakeSentenceTransformer:
    loaded: list[dict[str, Any]] = []

    def __init__(self, path: str, *, device: str, local_files_only: bool) -> None:
        self.loaded.append({"path": path, "device": device, "local_files_only": local_files_only})

    def get_sentence_embedding_dimension(self) -> int:
        return 3

    def encode(self, texts: Sequence[str], **options: Any) -> list[list[float]]:
        assert options["normalize_embeddings"] is True
        return [[1.0, float(len(text)), 0.0] for text in texts]


@pytest.fixture
def fake_module(monkeypatch: pytest.MonkeyPatch) -> type[FakeSentenceTransformer]:
    module = types.ModuleType("sentence_transformers")
    module.SentenceTransformer = FakeSentenceTransformer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    FakeSentenceTransformer.loaded = []
    return FakeSentenceTransformer


def test_without_the_extra_the_error_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails

    with pytest.raises(ProviderMisconfigured, match=r"pip install -e '\.\[local-models\]'"):
        get_provider(provider="sentence-transformers", model="mini", dimensions=3)


def test_the_model_is_loaded_from_the_models_directory_and_never_downloaded(
    settings: Any, tmp_path: Path, fake_module: type[FakeSentenceTransformer]
) -> None:
    (tmp_path / "mini").mkdir()
    settings.LOCAL_MODELS_DIR = str(tmp_path)

    provider = get_provider(provider="sentence-transformers", model="mini", dimensions=3)

    assert isinstance(provider, SentenceTransformersProvider)
    assert fake_module.loaded == [
        {"path": str(tmp_path / "mini"), "device": "cpu", "local_files_only": True}
    ]
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert provider.embed(["ab", "abcd"]) == [[1.0, 2.0, 0.0], [1.0, 4.0, 0.0]]
    assert provider.embed([]) == []


def test_a_missing_model_directory_is_a_clear_error(
    settings: Any, tmp_path: Path, fake_module: type[FakeSentenceTransformer]
) -> None:
    settings.LOCAL_MODELS_DIR = str(tmp_path)

    with pytest.raises(
        ProviderMisconfigured, match=re.escape(f"No local model at {tmp_path / 'absent'}")
    ):
        get_provider(provider="sentence-transformers", model="absent", dimensions=3)
    assert fake_module.loaded == []


def test_a_model_of_another_dimension_is_refused(
    settings: Any, tmp_path: Path, fake_module: type[FakeSentenceTransformer]
) -> None:
    (tmp_path / "mini").mkdir()

    with pytest.raises(EmbeddingShapeError, match=r"produces 3 dimensions; .* expects 384"):
        get_provider(provider="sentence-transformers", model=str(tmp_path / "mini"), dimensions=384)
