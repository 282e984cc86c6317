"""What `make run` sets for embedding: the packaged model unless the environment names another,
loaded at start by web, mcp and worker, with the cores shared among the worker's children."""

from __future__ import annotations

import os

import pytest

import embeddings
from devtools.devstack import ENGLISH_LIST_MODEL, demo_embedding_env


def test_make_run_defaults_to_the_packaged_model_and_shares_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    env: dict[str, str] = {}

    per_process = demo_embedding_env(env, concurrency=2)

    assert env["CANON_EMBEDDING_PROVIDER"] == "use"
    assert env["CANON_EMBEDDING_DIMENSIONS"] == "512"
    # with the English list's model, which new `use` knowledge bases get by default
    both = "use/use-multilingual-v3,minilm/all-MiniLM-L6-v2-int8"
    assert f"{embeddings.MINILM_PROVIDER}/{embeddings.MINILM_MODEL}" == ENGLISH_LIST_MODEL
    assert per_process["worker"] == {
        "CANON_PRELOAD_EMBEDDING_MODELS": both,
        "CANON_EMBEDDING_THREADS": "1",
    }
    assert per_process["web"]["CANON_PRELOAD_EMBEDDING_MODELS"] == both
    # issue 37, item 12: the MCP server embeds queries too; its first search waited 4.4 s
    assert per_process["mcp"] == {
        "CANON_PRELOAD_EMBEDDING_MODELS": both,
        "CANON_EMBEDDING_THREADS": "1",
    }
    off = demo_embedding_env({"CANON_ENGLISH_LIST": "0"}, concurrency=2)
    assert off["web"]["CANON_PRELOAD_EMBEDDING_MODELS"] == "use/use-multilingual-v3"
    assert demo_embedding_env({}, concurrency=1)["worker"]["CANON_EMBEDDING_THREADS"] == "2"


def test_an_embedding_named_in_the_environment_is_kept() -> None:
    env = {"CANON_EMBEDDING_PROVIDER": "openai", "CANON_EMBEDDING_MODEL": "text-embedding-3-small"}

    per_process = demo_embedding_env(env, concurrency=2)

    assert env["CANON_EMBEDDING_PROVIDER"] == "openai"
    assert "CANON_EMBEDDING_DIMENSIONS" not in env
    assert per_process["worker"]["CANON_PRELOAD_EMBEDDING_MODELS"] == (
        "openai/text-embedding-3-small"
    )
