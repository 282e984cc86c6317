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

# English stop words: Lucene's list (which bm25s uses too). A longer list measured worse on
# technical text, where "up", "out", "only", "own" or "should" often carry the question.
STOP_WORDS = frozenset(
    """
    a an and are as at be but by for if in into is it no not of on or such that the their then
    there these they this to was will with
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


def _document_terms(text: str) -> tuple[list[str], list[str]]:
    """(terms, the single characters of longer CJK runs), in order, with repeats."""
    terms: list[str] = []
    characters: list[str] = []
    for cjk, token in _TOKEN_RE.findall(_fold(text)):
        if token:
            terms.extend(_token_terms(token))
        elif len(cjk) == 1:
            terms.append(cjk)
        else:
            terms.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
            characters.extend(cjk)
    return terms, characters


def document_terms(text: str) -> list[str]:
    """Every term of a chunk, in order (with repeats: BM25 counts them)."""
    terms, characters = _document_terms(text)
    return terms + characters


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
    """(term -> count, document length) of a chunk's text. The single characters of CJK runs
    are indexed only for one-character queries and do not count in the length, so a Chinese
    chunk's length is its bigrams, as the queries that use them see it."""
    terms, characters = _document_terms(text)
    return dict(Counter(terms + characters)), len(terms)


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
