"""Embedding providers, one module each, behind one small interface (`base`):

- `hash` — deterministic feature hashing, no model (tests, lexical similarity);
- `use` — Universal Sentence Encoder multilingual v3, packaged with Canon (the `make run` demo);
- `minilm` — all-MiniLM-L6-v2 int8 on onnxruntime, packaged with Canon (English only);
- `openai` — any OpenAI-compatible embedding service (retries, timeouts, a shared breaker);
- `sentence-transformers` — a local model directory (optional extra `local-models`).

Beside them, `rerank` scores texts against a query for search's rerank stage (a reranking
service over HTTP, `tei` or `cohere`), with the same errors and breaker.

An IndexVersion names one provider, model and dimension; `get_provider` builds exactly that one.
Nothing here ever falls back to another provider or model: a provider that cannot answer raises
ProviderUnavailable and the task waits.
"""

from embeddings.base import (
    HASH_PROVIDER,
    LOCAL_PROVIDER,
    MINILM_PROVIDER,
    OPENAI_PROVIDER,
    USE_PROVIDER,
    CircuitOpen,
    EmbeddingError,
    EmbeddingProvider,
    EmbeddingShapeError,
    ProviderMisconfigured,
    ProviderRejected,
    ProviderSpec,
    ProviderUnavailable,
    check_shape,
    get_provider,
    preload,
    provider_spec,
    provider_specs,
)
from embeddings.hash import HashEmbeddingProvider
from embeddings.minilm import MINILM_DIMENSIONS, MINILM_MODEL, MiniLMProvider
from embeddings.openai import RETRYABLE_STATUS, HttpProviderConfig, OpenAIEmbeddingProvider
from embeddings.sentence_transformers import SentenceTransformersProvider, _load_local_model
from embeddings.sentence_transformers import model_path as local_model_path
from embeddings.transport import breaker_name
from embeddings.use import USE_DIMENSIONS, USE_MODEL, UniversalSentenceEncoderProvider

KNOWN_PROVIDERS = tuple(spec.name for spec in provider_specs())

__all__ = [
    "HASH_PROVIDER",
    "KNOWN_PROVIDERS",
    "LOCAL_PROVIDER",
    "MINILM_DIMENSIONS",
    "MINILM_MODEL",
    "MINILM_PROVIDER",
    "OPENAI_PROVIDER",
    "RETRYABLE_STATUS",
    "USE_DIMENSIONS",
    "USE_MODEL",
    "USE_PROVIDER",
    "CircuitOpen",
    "EmbeddingError",
    "EmbeddingProvider",
    "EmbeddingShapeError",
    "HashEmbeddingProvider",
    "HttpProviderConfig",
    "MiniLMProvider",
    "OpenAIEmbeddingProvider",
    "ProviderMisconfigured",
    "ProviderRejected",
    "ProviderSpec",
    "ProviderUnavailable",
    "SentenceTransformersProvider",
    "UniversalSentenceEncoderProvider",
    "_load_local_model",
    "breaker_name",
    "check_shape",
    "get_provider",
    "local_model_path",
    "preload",
    "provider_spec",
    "provider_specs",
]
