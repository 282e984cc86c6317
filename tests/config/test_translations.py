"""The admin's Simplified Chinese catalogue (locale/zh_Hans) is complete and compiled: every
message of Canon's code has a reviewed translation, and the committed .mo is that .po compiled.
`python -m devtools.catalogue check` prints the same findings; `update` and `compile` fix the
mechanical ones (docs/ADMIN_GUIDE.md, "Language")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from django.core.management import call_command
from django.test import override_settings
from django.utils import translation

from devtools import catalogue

LANGUAGE = "zh_Hans"


def test_every_message_of_the_code_is_translated() -> None:
    problems = catalogue.catalogue_problems(LANGUAGE)
    assert not problems.lines(), "\n".join(problems.lines())


def test_the_committed_mo_is_the_po_compiled() -> None:
    compiled = catalogue.po_as_mo(LANGUAGE)
    committed = catalogue.mo_catalogue(LANGUAGE)
    differing = sorted(
        str(key)
        for key in set(compiled) | set(committed)
        if compiled.get(key) != committed.get(key)
    )
    assert not differing, f"run `python -m devtools.catalogue compile`; differs: {differing[:20]}"
    assert "Plural-Forms: nplurals=1; plural=0;" in committed[""]


def test_the_check_finds_what_it_must(tmp_path: Path) -> None:
    """The check itself: a code message missing from the catalogue, one translated empty, one
    fuzzy, one whose translation lost a placeholder, and one the code no longer has are each
    reported."""
    (tmp_path / "pages.py").write_text(
        "from django.utils.translation import gettext, ngettext, pgettext_lazy\n"
        "gettext('Translated')\n"
        "gettext('Missing')\n"
        "gettext('Empty')\n"
        "gettext('Fuzzy')\n"
        "gettext('%(n)s documents')\n"
        "ngettext('%(n)s file', '%(n)s files', 2)\n"
        "pgettext_lazy('role', 'Index admins')\n"
    )
    (tmp_path / "page.html").write_text(
        "{% load i18n %}{% blocktranslate %}Hello {{ name }}{% endblocktranslate %}"
    )
    code = catalogue.code_catalog(tmp_path)
    assert {(m.context, m.id) for m in code if m.id} == {
        (None, "Translated"),
        (None, "Missing"),
        (None, "Empty"),
        (None, "Fuzzy"),
        (None, "%(n)s documents"),
        (None, ("%(n)s file", "%(n)s files")),
        ("role", "Index admins"),
        (None, "Hello %(name)s"),
    }
    po = tmp_path / "django.po"
    po.write_text(
        'msgid ""\nmsgstr ""\n"Plural-Forms: nplurals=1; plural=0;\\n"\n\n'
        'msgid "Translated"\nmsgstr "已翻译"\n\n'
        'msgid "Empty"\nmsgstr ""\n\n'
        '#, fuzzy\nmsgid "Fuzzy"\nmsgstr "模糊"\n\n'
        'msgid "%(n)s documents"\nmsgstr "%(count)s 个文档"\n\n'
        'msgid "%(n)s file"\nmsgid_plural "%(n)s files"\nmsgstr[0] "%(n)s 个文件"\n\n'
        'msgctxt "role"\nmsgid "Index admins"\nmsgstr "索引管理员"\n\n'
        'msgid "Hello %(name)s"\nmsgstr "你好 %(name)s"\n\n'
        'msgid "Gone"\nmsgstr "已删除的消息"\n'
    )
    with po.open("rb") as fileobj:
        catalog = read_po(fileobj, locale=LANGUAGE)
    original = catalogue.read_catalog
    try:
        catalogue.read_catalog = lambda language: catalog
        problems = catalogue.catalogue_problems(LANGUAGE, code=code)
    finally:
        catalogue.read_catalog = original
    assert [line.split(" (")[0] for line in problems.missing] == ["'Missing'"]
    assert [line.split(" (")[0] for line in problems.untranslated] == ["'Empty'", "'Fuzzy'"]
    assert len(problems.placeholders) == 1 and "%(n)s documents" in problems.placeholders[0]
    assert [line.split(" (")[0] for line in problems.stale] == ["'Gone'"]


@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("xgettext", "msguniq", "msgmerge", "msgattrib")),
    reason="GNU gettext is not installed: makemessages cannot run (the check above needs none)",
)
def test_the_check_extracts_what_makemessages_extracts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where GNU gettext is installed, Django's own makemessages over the same files finds the
    same messages as the catalogue's extraction (which needs no gettext). It runs on a copy of
    the files: makemessages writes beside the first locale directory above them."""
    copy = tmp_path / "canon"
    for path in catalogue.source_files():
        target = copy / path.relative_to(catalogue.ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    (copy / "locale").mkdir()
    monkeypatch.chdir(copy)
    with override_settings(LOCALE_PATHS=[copy / "locale"]):
        call_command(
            "makemessages",
            locale=[LANGUAGE],
            extensions=["html", "txt", "py"],
            no_location=True,
            verbosity=0,
        )
    with (copy / "locale" / LANGUAGE / "LC_MESSAGES" / "django.po").open("rb") as fileobj:
        made = read_po(fileobj)
    ours = catalogue.code_catalog()
    assert {(m.context, m.id) for m in made if m.id} == {(m.context, m.id) for m in ours if m.id}


def test_django_reads_the_translations() -> None:
    """What Django's gettext answers once the catalogue is in LOCALE_PATHS, plurals included."""
    with translation.override("zh-hans"):
        assert translation.gettext("Knowledge bases") == "知识库"
        assert translation.ngettext("%(n)s day", "%(n)s days", 3) % {"n": 3} == "3 天"
        assert translation.pgettext("role", "Index admins") == "索引管理员"
    with translation.override("en"):
        assert translation.gettext("Knowledge bases") == "Knowledge bases"
