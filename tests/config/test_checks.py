"""Canon's system checks of the stored files' and the sources' settings (config/checks.py):
a bad CANON_STORAGE_URL or addressing style is an error at start-up, not at the first upload;
a folder root that is not an absolute folder is a warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config.checks import sources_folder_roots, storage_url


@pytest.mark.parametrize(
    "url", ["", "s3://canon", "s3://canon/files/prod", "s3://canon-files.example/prefix/"]
)
def test_an_empty_or_s3_storage_url_passes(settings: Any, url: str) -> None:
    settings.STORAGE_URL = url
    assert storage_url() == []


@pytest.mark.parametrize(
    "url",
    ["/srv/canon", "file:///srv/canon", "s3://", "s3:///prefix", "gs://canon/x", "s3://b?x=1"],
)
def test_a_storage_url_that_is_no_bucket_is_an_error_naming_it(settings: Any, url: str) -> None:
    settings.STORAGE_URL = url

    (error,) = storage_url()

    assert error.id == "canon.E020" and repr(url) in error.msg
    assert "CANON_STORAGE_ROOT" in str(error.hint)


def test_an_unknown_addressing_style_is_an_error(settings: Any) -> None:
    settings.S3_ADDRESSING_STYLE = "paths"

    (error,) = storage_url()

    assert error.id == "canon.E021" and "'paths'" in error.msg and "virtual" in error.msg


def test_folder_roots_must_be_absolute_folders(settings: Any, tmp_path: Path) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("not a folder")
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path), "share", str(a_file), str(tmp_path / "gone")]

    warnings = sources_folder_roots()

    assert [w.id for w in warnings] == ["canon.W022"] * 3
    assert [w.msg.split("'")[1] for w in warnings] == ["share", str(a_file), str(tmp_path / "gone")]
