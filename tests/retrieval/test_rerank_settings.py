"""CANON_RERANK_* are checked when the settings load: a process configured with a reranker it
cannot use does not start, and says which setting is wrong (without repeating a credential)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "from django.conf import settings; "
    "print(repr((settings.RERANK_URL, settings.RERANK_PROTOCOL, settings.RERANK_TIMEOUT_SECONDS,"
    " settings.RERANK_CANDIDATES)))"
)


def load(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CANON_RERANK_")}
    clean.update(DJANGO_SETTINGS_MODULE="config.settings", DEBUG="1", **env)
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=clean, capture_output=True, text=True
    )


def test_off_by_default_with_the_documented_defaults() -> None:
    loaded = load()

    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "('', 'tei', 2.0, 30)"


def test_a_cohere_reranker_with_its_model_loads() -> None:
    loaded = load(
        CANON_RERANK_URL="https://rerank.example/",
        CANON_RERANK_PROTOCOL="cohere",
        CANON_RERANK_MODEL="rerank-v3.5",
        CANON_RERANK_TIMEOUT="0.8",
        CANON_RERANK_CANDIDATES="50",
    )

    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "('https://rerank.example', 'cohere', 0.8, 50)"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CANON_RERANK_PROTOCOL": "jina"}, "CANON_RERANK_PROTOCOL must be tei or cohere"),
        ({"CANON_RERANK_CANDIDATES": "0"}, "CANON_RERANK_CANDIDATES must be between 1 and 100"),
        ({"CANON_RERANK_CANDIDATES": "101"}, "CANON_RERANK_CANDIDATES must be between 1 and 100"),
        ({"CANON_RERANK_CANDIDATES": "many"}, "CANON_RERANK_CANDIDATES a whole number"),
        ({"CANON_RERANK_TIMEOUT": "0"}, "CANON_RERANK_TIMEOUT must be more than 0"),
        ({"CANON_RERANK_TIMEOUT": "nan"}, "CANON_RERANK_TIMEOUT must be more than 0"),
        ({"CANON_RERANK_URL": "tei:8080"}, "CANON_RERANK_URL must be an http or https URL"),
        (
            {"CANON_RERANK_URL": "https://api.example", "CANON_RERANK_PROTOCOL": "cohere"},
            "CANON_RERANK_PROTOCOL=cohere needs CANON_RERANK_MODEL",
        ),
        (
            {"CANON_RERANK_URL": "https://user:sk-secret-1@api.example"},
            "CANON_RERANK_URL must not carry credentials",
        ),
    ],
)
def test_a_wrong_setting_stops_the_start_with_a_clear_message(
    env: dict[str, str], message: str
) -> None:
    loaded = load(**env)

    assert loaded.returncode != 0
    assert "ImproperlyConfigured" in loaded.stderr
    assert message in loaded.stderr
    assert "sk-secret-1" not in loaded.stderr
