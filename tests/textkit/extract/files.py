"""Writing a test's file, and reading it back as the chunker reads it: the extraction tests'
shared helpers."""

from __future__ import annotations

from pathlib import Path

from textkit.extract import extract


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


def parse_file(path: Path, media_type: str, **limits: int) -> str:
    """The file's text as the chunker reads it: its blocks separated by blank lines."""
    return extract(path, media_type, **limits).text()
