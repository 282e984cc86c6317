"""Fixtures of the sources' tests: sources may reach loopback (the tests' servers), a key to
encrypt credentials with, a cache directory per test session, and a folder source."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kb.models import KnowledgeBase
from sources.models import Source
from sources.services.sources import source_save

SOURCES_KEY = base64.urlsafe_b64encode(b"canon-tests-sources-key-32-bytes").decode()


@pytest.fixture(autouse=True)
def _sources_settings(settings: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    settings.SOURCES_ALLOW_PRIVATE = True
    settings.SOURCES_KEY = SOURCES_KEY
    settings.SOURCES_CACHE_ROOT = tmp_path_factory.getbasetemp() / "sources-cache"
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path_factory.getbasetemp())]


@pytest.fixture
def folder_source(kb: KnowledgeBase, tmp_path: Path) -> Callable[..., Source]:
    """A folder source over a fresh directory (`source.config["path"]`)."""

    def make(**fields: Any) -> Source:
        root = tmp_path / fields.pop("folder", "share")
        root.mkdir(exist_ok=True)
        values: dict[str, Any] = {
            "kb": fields.pop("kb", kb),
            "name": "Share",
            "slug": "share",
            "kind": "folder",
            "config": {"path": str(root)},
        }
        values.update(fields)
        return source_save(**values)

    return make
