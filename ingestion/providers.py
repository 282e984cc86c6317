"""Embedding providers: the protocol every provider meets, the checks applied to what a provider
returns, and a deterministic, dependency-free hash embedding."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

from ingestion.text import is_cjk_term, lexical_terms

HASH_PROVIDER = "hash"

# The trigrams of a word together weigh this much relative to the word itself.
_TRIGRAM_WEIGHT = 0.75


class EmbeddingError(Exception):
    """Embedding failed; `retryable` says whether trying again later can succeed."""

    retryable: bool = False


class ProviderUnavailable(EmbeddingError):
    """The provider could not be reached, timed out or is rate limiting."""

    retryable = True


class EmbeddingShapeError(EmbeddingError):
    """The provider answered with the wrong number of vectors, wrong sizes or bad values."""

    retryable = False


class EmbeddingProvider(Protocol):
    """Turns texts into vectors of `dimensions` floats, one per text, in order."""

    name: str
    model: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class HashEmbeddingProvider:
    """Feature hashing of `ingestion.text.lexical_terms` into a unit vector.

    Each term adds 1 + ln(term frequency) at a signed position chosen by blake2b, so results are
    identical in every process. Alphabetic words of three or more letters also add their
    character trigrams at a lower weight, so near-spellings land close together. A text without
    terms maps to the first unit vector, never to zeros (whose cosine distance is undefined).
    """

    def __init__(self, *, model: str = "hash-v1", dimensions: int = 256) -> None:
        if dimensions < 1:
            raise ValueError(f"embedding dimensions must be at least 1, got {dimensions}")
        self.name = HASH_PROVIDER
        self.model = model
        self.dimensions = dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def _embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for term, count in Counter(lexical_terms(text)).items():
            weight = 1.0 + math.log(count)
            self._add(vector, term, weight)
            if len(term) >= 3 and not term.isdigit() and not is_cjk_term(term):
                padded = f"<{term}>"
                trigrams = [padded[i : i + 3] for i in range(len(padded) - 2)]
                trigram_weight = weight * _TRIGRAM_WEIGHT / math.sqrt(len(trigrams))
                for trigram in trigrams:
                    # "#" cannot occur in a term, so trigrams never collide with words.
                    self._add(vector, "#" + trigram, trigram_weight)
        norm = math.sqrt(math.fsum(value * value for value in vector))
        if norm == 0.0:
            return [1.0] + [0.0] * (self.dimensions - 1)
        return [value / norm for value in vector]

    def _add(self, vector: list[float], feature: str, weight: float) -> None:
        index, sign = _feature_slot(feature, self.dimensions)
        vector[index] += sign * weight


@lru_cache(maxsize=65536)
def _feature_slot(feature: str, dimensions: int) -> tuple[int, float]:
    value = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "big")
    return value % dimensions, 1.0 if value >> 63 else -1.0


def get_provider(*, provider: str, model: str, dimensions: int) -> EmbeddingProvider:
    """Return the provider named `provider`; ValueError for a name this build does not know."""
    if provider == HASH_PROVIDER:
        return HashEmbeddingProvider(model=model, dimensions=dimensions)
    raise ValueError(f"unknown embedding provider {provider!r}; known providers: {HASH_PROVIDER}")


def check_shape(
    vectors: Sequence[Sequence[float]], *, expected_count: int, dimensions: int
) -> None:
    """Raise EmbeddingShapeError unless there are `expected_count` vectors of `dimensions` finite
    numbers, none of them all zeros."""
    if len(vectors) != expected_count:
        raise EmbeddingShapeError(
            f"The embedding provider returned {len(vectors)} vectors for {expected_count} texts."
        )
    for index, vector in enumerate(vectors):
        if len(vector) != dimensions:
            raise EmbeddingShapeError(
                f"Vector {index} has {len(vector)} dimensions; expected {dimensions}."
            )
        try:
            finite = all(math.isfinite(value) for value in vector)
        except TypeError:
            raise EmbeddingShapeError(
                f"Vector {index} contains a value that is not a number."
            ) from None
        if not finite:
            raise EmbeddingShapeError(f"Vector {index} contains NaN or infinity.")
        if not any(vector):
            raise EmbeddingShapeError(
                f"Vector {index} is all zeros, so its cosine distance is undefined."
            )
