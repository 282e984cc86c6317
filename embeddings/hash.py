"""`hash`: feature hashing of words, CJK bigrams and character trigrams. Deterministic, no model,
no network: for tests, offline demos and lexical similarity, not for semantic search."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from embeddings.base import HASH_PROVIDER, ProviderSpec, register
from textkit.text import is_cjk_term, lexical_terms

# The trigrams of a word together weigh this much relative to the word itself.
_TRIGRAM_WEIGHT = 0.75


class HashEmbeddingProvider:
    """Feature hashing of `textkit.text.lexical_terms` into a unit vector.

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


SPEC = register(
    ProviderSpec(
        name=HASH_PROVIDER,
        label="hash (lexical, no model)",
        default_model="canon-hash-v1",
        default_dimensions=384,
        build=lambda model, dimensions, _base_url: HashEmbeddingProvider(
            model=model, dimensions=dimensions
        ),
    )
)
