"""Lexical analysis for the keyword index (pipeline p2 on): text -> terms.

The same function analyses chunks when they are written and queries when they are searched, so a
query term matches exactly the terms a chunk was indexed with. Deterministic, linear in the
input, no Django.

- Text is NFKC-folded (full-width letters and ligatures match their plain forms) and lowercased.
- Latin-script and other alphabetic words: English stop words are dropped and the rest are
  Snowball-stemmed (English), so "types" matches "type" and "indexes" matches "indexing".
- Identifiers joined by `_`, `.` or `-` between word characters (`work_mem`, `pg_stat_activity`,
  `os.path.join`, `utf-8`) are a term of their own, unstemmed, and their parts are analysed as
  words: `work_mem` matches a query for `work_mem` best and one for "work memory" too; a stop
  word inside an identifier (`mic_to_windows`) matches only through the whole identifier.
- CJK runs (Chinese, Japanese kana, Korean) give their overlapping character bigrams, which is
  what BM25 over Chinese needs without a dictionary; documents are also indexed by single
  characters so that a one-character query ("表") finds something. Queries use the bigrams of
  each run of two or more characters, and the character itself for a one-character run.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

import Stemmer

from ingestion.text import _CJK_RANGES

# Longer "words" (base64, hashes, glued text) would bloat the index and match nothing useful.
MAX_TERM_LENGTH = 64

# Words and identifiers (word characters joined by single `_`, `.`, `-`), or CJK runs.
_TOKEN_RE = re.compile(rf"([{_CJK_RANGES}]+)|([^\W{_CJK_RANGES}]+(?:[._\-][^\W_{_CJK_RANGES}]+)*)")
_PART_RE = re.compile(rf"[^\W_{_CJK_RANGES}]+")

# English stop words: function words that carry no topic (the list Lucene and bm25s start from,
# with a few more pronouns and auxiliaries). Content words such as "use", "not" or "first" stay.
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves
    """.split()  # noqa: SIM905 (a word list reads best as words)
)


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_stemmer().stemWord(word))


def _word_terms(word: str) -> list[str]:
    """A plain word: nothing if it is a stop word, else its stem."""
    if word in STOP_WORDS or len(word) > MAX_TERM_LENGTH:
        return []
    return [_stem(word) if word.isascii() and not word.isdigit() else word]


def _token_terms(token: str) -> list[str]:
    parts = _PART_RE.findall(token)
    if len(parts) == 1 and parts[0] == token:
        return _word_terms(token)
    # An identifier: itself, then its parts as words.
    terms = [token] if len(token) <= MAX_TERM_LENGTH else []
    for part in parts:
        terms.extend(_word_terms(part))
    return terms


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def document_terms(text: str) -> list[str]:
    """Every term of a chunk, in order (with repeats: BM25 counts them)."""
    terms: list[str] = []
    for cjk, token in _TOKEN_RE.findall(_fold(text)):
        if token:
            terms.extend(_token_terms(token))
        else:
            terms.extend(cjk)
            terms.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
    return terms


def query_terms(text: str) -> list[str]:
    """The distinct terms of a query, in first-seen order."""
    terms: list[str] = []
    for cjk, token in _TOKEN_RE.findall(_fold(text)):
        if token:
            terms.extend(_token_terms(token))
        elif len(cjk) == 1:
            terms.append(cjk)
        else:
            terms.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
    return list(dict.fromkeys(terms))


def term_frequencies(text: str) -> tuple[dict[str, int], int]:
    """(term -> count, document length in terms) of a chunk's text."""
    terms = document_terms(text)
    return dict(Counter(terms)), len(terms)


# --- BM25 ------------------------------------------------------------------------------------

# Okapi BM25 with Lucene's defaults and IDF (always positive).
K1 = 1.2
B = 0.75
# The average length the stored impacts assume. Impacts only order a term's postings (best
# first); scores are recomputed with the version's real average length (`retrieval.bm25`), so
# this constant changes which chunks are candidates at the margin, never a score.
NOMINAL_LENGTH = 100.0


def impact(tf: int, length: int) -> float:
    """A term's BM25 weight in a chunk without its IDF, under the nominal average length."""
    return tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / NOMINAL_LENGTH))
