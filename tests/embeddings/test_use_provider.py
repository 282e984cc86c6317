"""The packaged multilingual model (`use`), for real: the one unit test that loads it (~0.5 s).
Everything else in `make test` embeds with `hash`."""

from __future__ import annotations

import pytest

from embeddings import (
    USE_DIMENSIONS,
    USE_MODEL,
    EmbeddingShapeError,
    ProviderMisconfigured,
    UniversalSentenceEncoderProvider,
    check_shape,
    get_provider,
    preload,
    provider_spec,
)
from embeddings.use import load_encoder


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_english_and_chinese_land_in_one_space_and_related_text_is_closer() -> None:
    # given the packaged model
    provider = get_provider(provider="use", model=USE_MODEL, dimensions=USE_DIMENSIONS)
    assert isinstance(provider, UniversalSentenceEncoderProvider)
    texts = [
        "How do I stop a package from being upgraded?",
        "apt-mark hold marks a package as held back, so it is not upgraded automatically.",
        "如何防止软件包被自动升级？",
        "The printing system adds printers through a web interface on port 631.",
    ]

    # when it embeds a batch, twice
    vectors = provider.embed(texts)
    again = provider.embed(texts)

    # then each is a unit vector of 512 dimensions, identical for the same batch
    check_shape(vectors, expected_count=4, dimensions=512)
    assert all(abs(cosine(v, v) - 1.0) < 1e-4 for v in vectors)
    assert vectors == again
    # and one text alone agrees with itself in a batch (float32 rounding at most)
    alone = provider.embed(texts[:1])[0]
    assert cosine(alone, vectors[0]) > 0.99999
    # and the English question is nearer its answer than an unrelated passage
    question, answer, chinese, unrelated = vectors
    assert cosine(question, answer) > cosine(question, unrelated) + 0.1
    # and the Chinese question is nearer the English answer than the unrelated one
    assert cosine(chinese, answer) > cosine(chinese, unrelated) + 0.1
    assert provider.embed([]) == []


def test_a_dimension_or_model_the_package_does_not_have_is_refused() -> None:
    with pytest.raises(EmbeddingShapeError, match=r"produces 512 dimensions; .* expects 384"):
        get_provider(provider="use", model=USE_MODEL, dimensions=384)
    with pytest.raises(ProviderMisconfigured, match="its one model is use-multilingual-v3"):
        get_provider(provider="use", model="use-large", dimensions=512)
    assert provider_spec("use").dimension_problem(USE_MODEL, 384) == (
        "use-multilingual-v3 produces 512 dimensions, not 384."
    )


def test_preload_loads_local_models_once_and_skips_the_others() -> None:
    loaded = preload(["hash/canon-hash-v1", "openai/text-embedding-3-small", f"use/{USE_MODEL}"])

    assert loaded == [f"use/{USE_MODEL}"]
    assert load_encoder(USE_MODEL) is load_encoder(USE_MODEL)  # one encoder per process
    with pytest.raises(ValueError, match="unknown embedding provider 'nope'"):
        preload(["nope/x"])
