"""The admin's translations (locale/<language>/LC_MESSAGES/django.po and its compiled .mo), kept
without GNU gettext: Babel extracts, merges and compiles, so a fresh machine needs nothing more
than `make test` installs.

Extraction follows `manage.py makemessages` (tests/config/test_translations.py compares the two
where xgettext is installed): Python files are read with the keywords Django gives xgettext, and
templates are first turned into Python by Django's own `templatize`, as makemessages does.

    python -m devtools.catalogue check     # what is missing, fuzzy, stale or compiled out of date
    python -m devtools.catalogue update    # merge the code's messages into the .po, then compile
    python -m devtools.catalogue compile   # the .po into the .mo Django reads
"""

from __future__ import annotations

import argparse
import gettext
import io
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog, Message
from babel.messages.extract import extract
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
LOCALE = ROOT / "locale"
LANGUAGES = ("zh_Hans",)
DOMAIN = "django"
# What is not Canon's shipped code: tests and benchmarks assert and measure English; docs,
# deployment files and what tools write are no source. Hidden directories (.venv, .data) are
# skipped as makemessages skips them.
IGNORED = {
    "artifacts",
    "bench",
    "build",
    "canon.egg-info",
    "deploy",
    "docs",
    "locale",
    "migrations",
    "run",
    "tests",
    "__pycache__",
}
TEMPLATE_SUFFIXES = (".html", ".txt")
# The keywords `makemessages` passes xgettext, besides xgettext's own for Python.
KEYWORDS = {
    "_": None,
    "gettext": None,
    "ngettext": (1, 2),
    "gettext_noop": None,
    "gettext_lazy": None,
    "ngettext_lazy": (1, 2),
    "pgettext": ((1, "c"), 2),
    "npgettext": ((1, "c"), 2, 3),
    "pgettext_lazy": ((1, "c"), 2),
    "npgettext_lazy": ((1, "c"), 2, 3),
}
# Placeholders a translation must keep: %(name)s, %(hour)02d, %s, %d, {name}.
PLACEHOLDER = re.compile(
    r"%\([A-Za-z0-9_]+\)[#0 +-]?\d*(?:\.\d+)?[sdifrx]|%[sdifr]|\{[A-Za-z0-9_]*\}"
)


def po_path(language: str) -> Path:
    return LOCALE / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def mo_path(language: str) -> Path:
    return po_path(language).with_suffix(".mo")


def source_files(root: Path = ROOT) -> Iterator[Path]:
    """Canon's Python files and templates, in a stable order."""
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(part in IGNORED or part.startswith(".") for part in parts):
            continue
        if path.is_file() and (path.suffix == ".py" or path.suffix in TEMPLATE_SUFFIXES):
            yield path


def file_messages(path: Path) -> Iterator[tuple[int, str | tuple[str, ...], str | None]]:
    """(line, message, context) of every translatable string in one file; a plural message is
    (singular, plural)."""
    source = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        from django.utils.translation.template import templatize

        source = templatize(source, origin=str(path))
    for lineno, message, _comments, context in extract(
        "python", io.BytesIO(source.encode("utf-8")), keywords=KEYWORDS
    ):
        yield lineno, message, context


def code_catalog(root: Path = ROOT) -> Catalog:
    """Every message of Canon's code, each with where it is (file names, no line numbers: they
    change with every edit and say little a search cannot)."""
    catalog = Catalog(domain=DOMAIN, project="Canon", fuzzy=False)
    for path in source_files(root):
        relative = path.relative_to(root).as_posix()
        for _lineno, message, context in file_messages(path):
            existing = catalog.get(message, context=context)
            if existing is not None:
                if (relative, 0) not in existing.locations:
                    existing.locations.append((relative, 0))
                continue
            catalog.add(message, context=context, locations=[(relative, 0)])
    return catalog


def read_catalog(language: str) -> Catalog:
    with po_path(language).open("rb") as fileobj:
        return read_po(fileobj, locale=language, domain=DOMAIN)


def write_catalog(language: str, catalog: Catalog) -> None:
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=100, include_lineno=False, ignore_obsolete=True)
    po_path(language).write_bytes(buffer.getvalue())


def compiled(catalog: Catalog) -> bytes:
    """The .mo of `catalog`: its translated, non-fuzzy messages."""
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    return buffer.getvalue()


def key(message: Message) -> tuple[str | None, str]:
    msgid = message.id if isinstance(message.id, str) else message.id[0]
    return message.context, msgid


def translated(message: Message) -> bool:
    strings = message.string if isinstance(message.string, tuple | list) else (message.string,)
    return bool(strings) and all(strings) and not message.fuzzy


def placeholders(text: str) -> list[str]:
    return sorted(PLACEHOLDER.findall(text))


@dataclass
class Problems:
    """What keeps a catalogue from being complete and current; each a list of readable lines."""

    missing: list[str]
    untranslated: list[str]
    stale: list[str]
    placeholders: list[str]

    def lines(self) -> list[str]:
        out: list[str] = []
        for title, items in (
            ("not in the catalogue", self.missing),
            ("untranslated or fuzzy", self.untranslated),
            ("in the catalogue but no longer in the code", self.stale),
            ("placeholders differ from the English", self.placeholders),
        ):
            out += [f"{title}: {item}" for item in items]
        return out


def label(message: Message) -> str:
    context = f"[{message.context}] " if message.context else ""
    where = ", ".join(sorted({file for file, _ in message.locations}))
    return f"{context}{key(message)[1]!r}" + (f" ({where})" if where else "")


def catalogue_problems(language: str, code: Catalog | None = None) -> Problems:
    """How the committed .po of `language` falls short of the code's messages."""
    code = code or code_catalog()
    po = read_catalog(language)
    problems = Problems([], [], [], [])
    for message in code:
        if not message.id:
            continue
        entry = po.get(message.id, context=message.context)
        if entry is None:
            problems.missing.append(label(message))
        elif not translated(entry):
            problems.untranslated.append(label(message))
        else:
            problems.placeholders += placeholder_problems(entry)
    for entry in po:
        if entry.id and code.get(entry.id, context=entry.context) is None:
            problems.stale.append(label(entry))
    return problems


def placeholder_problems(entry: Message) -> list[str]:
    """A translation that drops, adds or renames a placeholder would fail or say something else
    at run time; for a plural, each form keeps the plural's placeholders (Chinese has one form,
    used for every count)."""
    if isinstance(entry.id, str):
        pairs = [(entry.id, entry.string)]
    else:
        pairs = [(entry.id[-1], form) for form in entry.string or ()]
    return [
        f"{label(entry)}: {placeholders(english)} != {placeholders(str(text))} in {text!r}"
        for english, text in pairs
        if placeholders(english) != placeholders(str(text))
    ]


def mo_catalogue(language: str) -> dict[object, str]:
    """The committed .mo as Django reads it (the standard library's GNU gettext reader)."""
    with mo_path(language).open("rb") as fileobj:
        return dict(gettext.GNUTranslations(fileobj)._catalog)  # type: ignore[attr-defined]


def po_as_mo(language: str) -> dict[object, str]:
    """What the .mo compiled from the committed .po holds, read back the same way."""
    data = compiled(read_catalog(language))
    return dict(gettext.GNUTranslations(io.BytesIO(data))._catalog)  # type: ignore[attr-defined]


def update(language: str) -> None:
    """Merge the code's messages into the .po (new ones untranslated, gone ones dropped,
    translations and the glossary kept), then compile."""
    po = read_catalog(language)
    po.update(code_catalog(), no_fuzzy_matching=True, update_creation_date=False)
    po.obsolete.clear()
    write_catalog(language, po)
    compile_mo(language)


def compile_mo(language: str) -> None:
    mo_path(language).write_bytes(compiled(read_catalog(language)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("check", "update", "compile"))
    args = parser.parse_args(argv)
    import django

    django.setup()
    failed = False
    for language in LANGUAGES:
        if args.command == "update":
            update(language)
        elif args.command == "compile":
            compile_mo(language)
        problems = catalogue_problems(language)
        for line in problems.lines():
            print(f"{language}: {line}")
        if po_as_mo(language) != mo_catalogue(language):
            print(f"{language}: the .mo is not the compiled .po: run `compile`")
            failed = True
        failed = failed or bool(problems.lines())
    return 1 if failed else 0


if __name__ == "__main__":
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(main())
