import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embeddings import (
    EmbeddingError,
    EmbeddingProvider,
    EmbeddingShapeError,
    HashEmbeddingProvider,
    ProviderUnavailable,
    check_shape,
    get_provider,
)

ROOT = Path(__file__).resolve().parents[2]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture
def provider() -> HashEmbeddingProvider:
    return HashEmbeddingProvider(model="hash-v1", dimensions=256)


def test_errors_say_whether_to_retry() -> None:
    assert ProviderUnavailable("down").retryable is True
    assert EmbeddingShapeError("bad").retryable is False
    assert isinstance(ProviderUnavailable("down"), EmbeddingError)
    assert isinstance(EmbeddingShapeError("bad"), EmbeddingError)


def test_get_provider_builds_the_hash_provider() -> None:
    provider: EmbeddingProvider = get_provider(provider="hash", model="hash-v1", dimensions=64)
    assert isinstance(provider, HashEmbeddingProvider)
    assert (provider.name, provider.model, provider.dimensions) == ("hash", "hash-v1", 64)


def test_get_provider_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown embedding provider 'cohere'"):
        get_provider(provider="cohere", model="embed-v4", dimensions=1536)


def test_dimensions_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HashEmbeddingProvider(dimensions=0)


class TestHashEmbedding:
    def test_vectors_are_unit_length_with_the_right_size(
        self, provider: HashEmbeddingProvider
    ) -> None:
        vectors = provider.embed(["Hello world", "知识库管理", "a b c " * 500])
        assert len(vectors) == 3
        for vector in vectors:
            assert len(vector) == 256
            assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0)
        check_shape(vectors, expected_count=3, dimensions=256)

    def test_no_terms_gives_a_fixed_unit_vector(self, provider: HashEmbeddingProvider) -> None:
        empty, punctuation = provider.embed(["", "  ... !!! "])
        assert empty == punctuation == [1.0] + [0.0] * 255

    def test_is_deterministic(self, provider: HashEmbeddingProvider) -> None:
        text = "Deterministic embeddings for 知识库"
        assert provider.embed([text]) == HashEmbeddingProvider(dimensions=256).embed([text])

    def test_is_stable_across_processes(self, provider: HashEmbeddingProvider) -> None:
        code = (
            "from embeddings import HashEmbeddingProvider;"
            "print(repr(HashEmbeddingProvider(dimensions=256).embed(['stable 稳定 hashing'])[0]))"
        )
        outputs = set()
        for seed in ("1", "2"):
            env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
            result = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            )
            outputs.add(result.stdout)
        assert outputs == {repr(provider.embed(["stable 稳定 hashing"])[0]) + "\n"}

    def test_shared_english_words_are_closer_than_unrelated_text(
        self, provider: HashEmbeddingProvider
    ) -> None:
        query, related, unrelated = provider.embed(
            [
                "How do I publish a new version of the knowledge base?",
                "Publishing a new knowledge base version makes it visible to search.",
                "The weather in the mountains was cold and windy all week.",
            ]
        )
        assert cosine(query, related) > 0.3
        assert cosine(query, related) > cosine(query, unrelated) + 0.2

    def test_shared_chinese_bigrams_are_closer_than_unrelated_text(
        self, provider: HashEmbeddingProvider
    ) -> None:
        query, related, unrelated = provider.embed(
            ["如何发布知识库的新版本", "发布新版本后知识库立即可以检索", "今天山里的天气又冷又有风"]
        )
        assert cosine(query, related) > 0.3
        assert cosine(query, related) > cosine(query, unrelated) + 0.2

    def test_near_spellings_are_similar(self, provider: HashEmbeddingProvider) -> None:
        embedding, embeddings, weather = provider.embed(["embedding", "embeddings", "weather"])
        assert cosine(embedding, embeddings) > 0.25
        assert cosine(embedding, embeddings) > cosine(embedding, weather) + 0.15

    def test_repeated_terms_weigh_sublinearly(self, provider: HashEmbeddingProvider) -> None:
        once, many = provider.embed(["cat dog", "cat " * 50 + "dog"])
        assert cosine(once, many) > 0.5


class TestCheckShape:
    def test_accepts_good_vectors(self) -> None:
        check_shape([[0.5, 0.5], [1.0, 0.0]], expected_count=2, dimensions=2)

    def test_wrong_count(self) -> None:
        with pytest.raises(EmbeddingShapeError, match="returned 1 vectors for 2 texts"):
            check_shape([[1.0, 0.0]], expected_count=2, dimensions=2)

    def test_wrong_dimensions(self) -> None:
        with pytest.raises(EmbeddingShapeError, match="Vector 1 has 3 dimensions; expected 2"):
            check_shape([[1.0, 0.0], [1.0, 0.0, 0.0]], expected_count=2, dimensions=2)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_non_finite_values(self, bad: float) -> None:
        with pytest.raises(EmbeddingShapeError, match="Vector 0 contains NaN or infinity"):
            check_shape([[bad, 1.0]], expected_count=1, dimensions=2)

    def test_non_numbers(self) -> None:
        with pytest.raises(EmbeddingShapeError, match="not a number"):
            check_shape([["0.1", 1.0]], expected_count=1, dimensions=2)  # type: ignore[list-item]

    def test_zero_vector(self) -> None:
        with pytest.raises(EmbeddingShapeError, match="all zeros"):
            check_shape([[0.0, 0.0]], expected_count=1, dimensions=2)
