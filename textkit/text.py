"""Text normalisation and the lexical terms shared by the hash embedding and PostgreSQL search.

Everything here is deterministic and linear in the length of the input.
"""

from __future__ import annotations

import re
import unicodedata

# Han (with extensions and compatibility ideographs), Hiragana, Katakana (with the phonetic
# extensions and half-width forms), Hangul syllables and jamo, and the iteration mark 々.
_CJK_RANGES = (
    "\u1100-\u11ff"
    "\u3005"
    "\u3040-\u309f"
    "\u30a0-\u30ff"
    "\u3130-\u318f"
    "\u31f0-\u31ff"
    "\u3400-\u4dbf"
    "\u4e00-\u9fff"
    "\ua960-\ua97f"
    "\uac00-\ud7af"
    "\ud7b0-\ud7ff"
    "\uf900-\ufaff"
    "\uff66-\uff9f"
    "\U00020000-\U0003134f"
)
_TERM_RE = re.compile(rf"([{_CJK_RANGES}]+)|([^\W_{_CJK_RANGES}]+)")
_CJK_CHAR_RE = re.compile(rf"[{_CJK_RANGES}]")
_CJK_RUN_RE = re.compile(rf"[{_CJK_RANGES}]+")
_WORD_RE = re.compile(rf"[^\W_{_CJK_RANGES}]+")

# Line-like separators become newlines; every other C0/C1 control character except the tab is
# dropped.
_LINE_BREAK_RE = re.compile("[\r\x0b\x0c\x85\u2028\u2029]")
_CONTROL_RE = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")
_EXTRA_BLANK_LINES_RE = re.compile(r"\n{3,}")


_CJK_IDEOGRAPH_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_SPACE_RE = re.compile(r"\s+")


def cjk_share(text: str) -> float:
    """The share of CJK ideographs among the non-space characters of `text` (0 for none): how
    Chinese a query or a chunk is, for the hybrid fusion's language features."""
    compact = _SPACE_RE.sub("", text)
    if not compact:
        return 0.0
    return round(len(_CJK_IDEOGRAPH_RE.findall(compact)) / len(compact), 4)


# A text at least this Chinese (`cjk_share`) counts as Chinese: for the hybrid fusion's language
# features, and for which chunks the English list embeds (a model that reads no Chinese).
CHINESE_SHARE = 0.2


def mostly_chinese(text: str) -> bool:
    """Whether `text` counts as Chinese (`CHINESE_SHARE`)."""
    return cjk_share(text) >= CHINESE_SHARE


def normalize_text(text: str) -> str:
    """Return `text` NFC-normalised, with \\n line ends, no control characters other than \\n
    and \\t, no trailing whitespace on any line, at most one blank line in a row, and no leading
    or trailing whitespace."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n"))
    text = _CONTROL_RE.sub("", _LINE_BREAK_RE.sub("\n", text))
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _EXTRA_BLANK_LINES_RE.sub("\n\n", text).strip()


def lexical_terms(text: str) -> list[str]:
    """Return the lexical terms of `text` in order.

    The text is NFKC-folded (so full-width letters and ligatures match their plain forms) and
    lowercased. Word terms are runs of Unicode word characters outside CJK scripts, split at
    underscores as PostgreSQL's parser would split them; a CJK run yields its overlapping
    character bigrams, or itself when it is a single character.
    """
    terms: list[str] = []
    folded = unicodedata.normalize("NFKC", text).lower()
    for cjk, word in _TERM_RE.findall(folded):
        if word:
            terms.append(word)
        elif len(cjk) == 1:
            terms.append(cjk)
        else:
            terms.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
    return terms


def is_cjk_term(term: str) -> bool:
    """Whether `term` (as produced by `lexical_terms`) comes from a CJK run."""
    return _CJK_CHAR_RE.match(term) is not None


def lexical_document(text: str) -> str:
    """The terms of `text` joined by spaces: the input to `to_tsvector('simple', ...)`."""
    return " ".join(lexical_terms(text))


def lexical_query(text: str) -> str:
    """The distinct terms of a query in first-seen order, joined by spaces."""
    return " ".join(dict.fromkeys(lexical_terms(text)))


def token_count(text: str) -> int:
    """Approximate model tokens: word tokens plus CJK characters."""
    words = _WORD_RE.subn("", text)[1]
    cjk_chars = len(text) - len(_CJK_RUN_RE.sub("", text))
    return words + cjk_chars
