"""B8 with a fourth list (issue 38, items 4 and 5): a page's title and heading path as a keyword
field of their own, and CC-CEDICT's translations of the query as a keyword list, each beside
the three lists search reads today, fitted on one corpus and measured on the other as
`bench.quality.cross_corpus` does.

    python -m bench.quality.fourth_list              # after B8 and B8C2: read the lists (one
                                                     # child process per corpus), then fit
    python -m bench.quality.fourth_list read quality2  # one corpus's pass only

**The pass** (per corpus, read only, in the database its B8 run left, the dump's index version):

- `headings`: BM25 over each live chunk's *field*, its document's title and its heading path
  (the title left out when the path already starts with it), analysed as chunks are
  (`textkit.analysis.term_frequencies`), with Canon's k1 and b and the field's own statistics
  (N the live chunks, df and the average length over the fields). Per question: the field's top
  LEG_DEPTH (ties by chunk id; a section's chunks share a field, so they tie) and the field
  score of every chunk any list names. Today the field's words are already in the chunk's
  keyword text (`ingestion.pipeline.write.keyword_text`) and the title is not: this measures
  what scoring them apart adds.
- `dict`: `bench.quality.crosslingual`'s variant (b), the query's own terms and their
  CC-CEDICT translations at weight w, read through Canon's own `ranked_rows` (the keyword
  leg's statement, `crosslingual.Index.leg`) LEG_DEPTH deep and cut to each depth; one list per
  DICT_GRID variant.
- the English cosine (the version's stored `embedding_en`, the question embedded by search's
  own `english_query`) of every chunk a fourth list adds that the dump has none for, so its
  ENGLISH columns are what search would compute.

Written beside the per-leg dump as `<name>-legs-fourth.json`, checked against it.

**The systems**, every fitted one by fusion_fit's machinery (its Newton fit, 5-fold CV over
depth x L2, the one-standard-error rule), all from the shipped recipe of the three lists
(`third_leg.SHIPPED_ENGLISH`: monotone, the keyword gate, the English list for questions not in
Chinese, Chinese questions by the two legs' model):
- `shipped recipe`: today's default, refitted;
- `+ headings`: the field's list added (its candidates and FOURTH's columns), for questions in
  every language (the Chinese part gets it too);
- `+ headings, re-score only`: no new candidates, the field's score of the lists' own
  candidates (what a stored field gives without a list of its own);
- `+ dictionary`: the dictionary's list added, its variant chosen on the first corpus's tuning
  half (the CV figure of the two legs plus that list, one model: the choice never reads the
  second corpus);
measured in-corpus (held-out half), cross-corpus (every question of the corpus it never saw)
and on the keyword-style set, each beside the shipped recipe question by question.
Writes bench/results/quality-fourth-list.json and prints the tables.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.quality import cross_corpus, fusion_fit, third_leg
from bench.quality.crosslingual import list_columns
from bench.quality.legs import LEG_DEPTH
from retrieval.search.fusion import FEATURES

OUT = common.RESULTS / "quality-fourth-list.json"
CORPORA = third_leg.CORPORA
# The dictionary's variants (`crosslingual.DICT_GRID`, ungated): translations per word, weight.
DICT_VARIANTS = tuple((per_word, w) for per_word in (2, 5) for w in (0.25, 0.5, 1.0))


def side_file(name: str) -> Path:
    return common.RESULTS / f"{name}-legs-fourth.json"


def dict_name(per_word: int, w: float) -> str:
    return f"dict per_word={per_word} w={w:g}"


# --- the pass (one corpus, in a process of its own: Django is set up on its database) -----------


FieldRow = tuple[int, str, str, str, str]  # chunk id, document key, title, heading path, text


def field_text(title: str, heading_path: str) -> str:
    """A chunk's title-and-headings field: the heading path, after the document's title unless
    the path already starts with it."""
    if not title or heading_path.startswith(title):
        return heading_path
    return f"{title}\n{heading_path}" if heading_path else title


def live_fields(version_id: int) -> list[FieldRow]:
    """The live chunks of the index version, as Field reads them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.id, d.key, d.title, c.heading_path, c.text FROM kb_chunk c "
            "JOIN kb_publication p ON p.build_id = c.build_id AND p.index_version_id = %s "
            "JOIN kb_document d ON d.id = p.document_id "
            "WHERE c.index_version_id = %s AND d.deleted_at IS NULL ORDER BY c.id",
            [version_id, version_id],
        )
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4])) for r in cursor]


class Field:
    """The chunks' title-and-headings field: postings, lengths, statistics, and BM25."""

    def __init__(self, rows: Sequence[FieldRow]) -> None:
        from textkit import analysis
        from textkit.text import cjk_share

        self.ids = [r[0] for r in rows]
        self.docs = {r[0]: r[1] for r in rows}
        self.cjk = {r[0]: cjk_share(r[4]) for r in rows}
        self.row = {cid: i for i, cid in enumerate(self.ids)}
        self.postings: dict[str, list[tuple[int, int]]] = {}
        lengths = []
        self.sample: list[str] = []
        for i, (_, _, title, path, _) in enumerate(rows):
            text = field_text(title, path)
            if len(self.sample) < 5 and path and title and not path.startswith(title):
                self.sample.append(text.replace("\n", " | "))
            tfs, length = analysis.term_frequencies(text)
            lengths.append(length)
            for term, tf in tfs.items():
                self.postings.setdefault(term, []).append((i, tf))
        self.lengths = np.array(lengths, dtype=float)
        self.avg = float(self.lengths.mean()) if lengths and self.lengths.mean() > 0 else 1.0
        self.empty = int((self.lengths == 0).sum())

    def scores(self, query: str) -> tuple[np.ndarray[Any, Any], float]:
        """Every chunk's field BM25 for `query` (Canon's formula, the field's statistics) and
        the query's bound ((k1 + 1) x the IDF of every query term, as `QueryWeights.bound`)."""
        from retrieval.search.lexical.bm25 import idf
        from textkit import analysis

        k1, b = float(analysis.K1), float(analysis.B)
        n = len(self.ids)
        out = np.zeros(n)
        bound = 0.0
        for term in dict.fromkeys(analysis.query_terms(query)):
            listed = self.postings.get(term, [])
            weight = idf(chunks=n, df=len(listed))
            bound += (k1 + 1) * weight
            if not listed:
                continue
            rows = np.array([r for r, _ in listed])
            tf = np.array([t for _, t in listed], dtype=float)
            norm = k1 * (1 - b + b * self.lengths[rows] / self.avg)
            out[rows] += weight * tf * (k1 + 1) / (tf + norm)
        return out, bound

    def leg(self, query: str, named: set[int]) -> dict[str, Any]:
        scores, bound = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        order = sorted(hits.tolist(), key=lambda r: (-scores[r], self.ids[r]))[:LEG_DEPTH]
        rows = [[self.ids[r], self.docs[self.ids[r]], round(float(scores[r]), 6)] for r in order]
        score_of = {
            str(c): round(float(scores[self.row[c]]), 6)
            for c in named
            if c in self.row and scores[self.row[c]] > 0
        }
        return {"rows": rows, "bound": round(bound, 6), "scores": score_of}


def english_matrix(version_id: int, ids: Sequence[int]) -> tuple[dict[int, int], Any]:
    """The live chunks' stored English vectors (unit rows), by chunk id."""
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(common.database_url()) as conn:
        register_vector(conn)
        got = conn.execute(
            "SELECT id, embedding_en FROM kb_chunk WHERE index_version_id = %s "
            "AND embedding_en IS NOT NULL AND id = ANY(%s)",
            [version_id, list(ids)],
        ).fetchall()
    row = {int(cid): i for i, (cid, _) in enumerate(got)}
    matrix = np.array([np.asarray(v.to_list(), dtype=float) for _, v in got])
    if len(got):
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return row, matrix


def read(name: str) -> dict[str, Any]:
    from bench.quality import crosslingual, ingest

    db, redis_db, legs_path = CORPORA[name]
    dump = json.loads(legs_path.read_text(encoding="utf-8"))
    ingest.setup(db, redis_db, fresh=False)
    from kb.models import IndexVersion, KnowledgeBase
    from retrieval.search.english import english_query
    from retrieval.search.fusion import ZH_SHARE
    from textkit.text import cjk_share

    kb = KnowledgeBase.objects.get(slug=ingest.KB_SLUG)
    about = dump["about"]
    version_id = int(about["index_version"])
    if kb.active_index_version_id != version_id:
        raise SystemExit(f"{legs_path} is not of {db}'s live index: run B8 on {name} again")
    version = IndexVersion.objects.get(pk=version_id)
    started = time.perf_counter()
    field = Field(live_fields(version_id))
    if len(field.ids) != int(about["chunks"]):
        raise SystemExit(f"{legs_path} counts {about['chunks']} chunks, {db} {len(field.ids)}")
    en_row, en_matrix = english_matrix(version_id, field.ids)
    index = crosslingual.Index(
        version_id=version_id, cache_path=common.RESULTS / f"{name}-fourth-dict-cache.json"
    )
    book = crosslingual.dictionary()
    variants = [
        crosslingual.Variant("dict", (("per_word", float(p)), ("w", w))) for p, w in DICT_VARIANTS
    ]
    out: dict[str, Any] = {}
    for n, q in enumerate(dump["questions"], start=1):
        named = {
            e["chunk"]
            for k, listed in q.items()
            if k in ("vector", "english") or k.startswith("keyword")
            for e in listed
        }
        lists: dict[str, Any] = {"headings": field.leg(q["question"], named)}
        for variant, (per_word, w) in zip(variants, DICT_VARIANTS, strict=True):
            rows, bound = index.leg(crosslingual.terms_of(variant, q, index), LEG_DEPTH)
            lists[dict_name(per_word, w)] = {
                "rows": [[c, d, round(s, 6)] for c, d, s in rows],
                "bound": round(bound, 6),
            }
        added = {int(r[0]) for got in lists.values() for r in got["rows"]} - named
        en_cos: dict[str, float] = {}
        if version.english_list and cjk_share(q["question"]) < ZH_SHARE and added:
            vector = english_query(version, q["question"])
            if vector is not None:
                v = np.asarray(vector, dtype=float)
                v /= np.linalg.norm(v)
                have = sorted(c for c in added if c in en_row)
                if have:
                    coses = en_matrix[[en_row[c] for c in have]] @ v
                    en_cos = {str(c): round(float(s), 6) for c, s in zip(have, coses, strict=True)}
        cjk = {str(c): round(field.cjk[c], 4) for c in added}
        out[f"{q['set']}/{q['id']}"] = {"fourth": lists, "fourth_en_cos": en_cos, "fourth_cjk": cjk}
        if n % 100 == 0:
            print(f"[fourth] {name}: {n} of {len(dump['questions'])} questions", flush=True)
    index.save()
    result = {
        "about": {
            "corpus": name,
            "index_version": version_id,
            "chunks": len(field.ids),
            "field": {
                "terms": len(field.postings),
                "average_length": round(field.avg, 2),
                "empty": field.empty,
                "examples": field.sample,
            },
            "dictionary": {"version": book.version, "entries": book.entries},
            "pass_s": round(time.perf_counter() - started, 1),
        },
        "questions": out,
    }
    side_file(name).write_text(json.dumps(result, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"[fourth] {name}: wrote {side_file(name)} in {result['about']['pass_s']}s", flush=True)
    return result


# --- the features ------------------------------------------------------------------------------

# A fourth list's columns after FEATURES (and ENGLISH's), as crosslingual's third list had them.
FOURTH = (
    "in_fourth",
    "fourth_reciprocal_rank",
    "fourth_share",
    "fourth_of_best",
    "fourth_best_share",
    "cross_x_fourth_share",
    "cross_x_fourth_reciprocal_rank",
    "query_zh_x_fourth_share",
)
FOURTH_SIGNS = {"in_fourth": 1, "fourth_reciprocal_rank": 1, "fourth_share": 1, "fourth_of_best": 1}
_ROWS: dict[tuple[Any, ...], fusion_fit.Examples] = {}


def _fourth_rows(
    q: dict[str, Any], depth: int, *, name: str, english: bool, add: bool
) -> fusion_fit.Examples:
    """The question's examples with the fourth list `name`: its first `depth` chunks as
    candidates too when `add` (else only its scores of the other lists' candidates), the
    English list's candidates and ENGLISH's columns when `english`, then FOURTH's columns."""
    key = (q["corpus"], q["set"], q["id"], depth, name, english, add)
    if key in _ROWS:
        return _ROWS[key]
    from retrieval.search.fusion import ZH_SHARE, english_columns, learned_features

    vector, keyword, query_cjk, bound = fusion_fit._legs(q, depth, fusion_fit.CHUNKS[0])
    fourth = q["fourth"][name]
    listed = [(int(c), str(d), float(s)) for c, d, s in fourth["rows"][:depth]]
    english_list = q.get("english", [])[:depth] if english else []
    cjk = {int(c): float(s) for c, s in q["fourth_cjk"].items()}
    others = [(e["chunk"], e["cos"], 0.0) for e in english_list]
    if add:
        others += [(c, s, cjk.get(c, 0.0)) for c, _, s in listed]
    features = learned_features(
        query_cjk=query_cjk, vector=vector, keyword=keyword, keyword_bound=bound, others=others
    )
    legs = [leg for k, leg in q.items() if k == "vector" or k.startswith("keyword")]
    docs = {e["chunk"]: e["doc"] for leg in (*legs, english_list) for e in leg}
    docs.update({c: d for c, d, _ in listed})
    ids = list(features)
    columns: dict[int, list[float]] = {cid: [] for cid in ids}
    if english:
        en_cos = {int(c): s for c, s in q.get("en_cos", {}).items()}
        en_cos.update({int(c): s for c, s in q["fourth_en_cos"].items()})
        columns = english_columns(ids, [(e["chunk"], e["cos"]) for e in english_list], en_cos)
    bound_ = float(fourth["bound"])
    if add:
        ranks = {c: (r, s) for r, (c, _, s) in enumerate(listed, start=1)}
    else:  # re-scoring: the field's score of every candidate, no rank
        ranks = {int(c): (0, float(s)) for c, s in fourth.get("scores", {}).items()}
    if add:
        top = listed[0][2] if listed else 0.0
    else:  # the best of the candidates' own scores
        top = max((ranks[c][1] for c in ids if c in ranks), default=0.0)
    zh = 1.0 if query_cjk >= ZH_SHARE else 0.0
    rows = []
    for cid in ids:
        rank, score = ranks.get(cid, (0, 0.0))
        cross = abs(zh - features[cid][FEATURE_CHUNK_ZH])
        more = list_columns(
            rank, score, bound_, top, cross=cross, zh=zh, listed=not add and score > 0
        )
        rows.append(features[cid] + columns[cid] + more)
    _ROWS[key] = (ids, np.array(rows, dtype=float), docs)
    return _ROWS[key]


FEATURE_CHUNK_ZH = FEATURES.index("chunk_zh")  # the candidate's language, in its features


def register(name: str) -> tuple[str, str]:
    """EXTRAS for the fourth list `name`: with the two legs, and with the English list too."""
    for english in (False, True):
        extra = f"english+{name}" if english else name
        names = (*third_leg.ENGLISH, *FOURTH) if english else FOURTH
        signs = {**(third_leg.ENGLISH_SIGNS if english else {}), **FOURTH_SIGNS}
        add = not name.endswith("re-score")
        listed = name.removesuffix(" re-score")
        rows = functools.partial(_fourth_rows, name=listed, english=english, add=add)
        fusion_fit.EXTRAS[extra] = fusion_fit.Extra(names, signs, rows)
    return name, f"english+{name}"


SHIPPED = third_leg.SHIPPED_ENGLISH  # the three lists as search reads them
GATE = third_leg.SHIPPED_GATE


def with_fourth(title: str, name: str) -> fusion_fit.Recipe:
    """The shipped recipe with the fourth list `name` in both of its models."""
    two, three = register(name)
    chinese = fusion_fit.Recipe(f"{title} (Chinese part)", monotone=True, gate=GATE, extra=two)
    return replace(SHIPPED, name=title, extra=three, chinese=chinese)


def choose_dictionary(tuning: list[dict[str, Any]]) -> tuple[str, dict[str, float]]:
    """The dictionary's variant with the best CV MRR@10 (fusion_fit's rule) of the two legs and
    its list, one model, on `tuning`."""
    figures = {}
    for per_word, w in DICT_VARIANTS:
        two, _ = register(dict_name(per_word, w))
        recipe = fusion_fit.Recipe(two, monotone=True, gate=GATE, extra=two)
        choice = fusion_fit.choose(
            tuning, signs=recipe.signs(), gate=recipe.keyword_gate(), extra=two
        )
        figures[two] = round(choice["cv_mrr"], 4)
        print(f"[fourth] {two}: CV MRR@10 {figures[two]}", flush=True)
    return max(figures, key=lambda k: figures[k]), figures


# --- the run -----------------------------------------------------------------------------------


def load(name: str) -> cross_corpus.Corpus:
    corpus = cross_corpus.load(name, CORPORA[name][2])
    side = json.loads(side_file(name).read_text(encoding="utf-8"))
    about = json.loads(CORPORA[name][2].read_text(encoding="utf-8"))["about"]
    if (side["about"]["index_version"], side["about"]["chunks"]) != (
        about["index_version"],
        about["chunks"],
    ):
        raise SystemExit(f"{side_file(name)} is of another B8 run: read {name} again")
    if any("english" not in q for q in corpus.questions):
        raise SystemExit(f"{CORPORA[name][2]} has no English list: run B8 on {name} again")
    extra = side["questions"]
    for q in (*corpus.questions, *corpus.keyword_style):
        q.update(extra[f"{q['set']}/{q['id']}"])
    return corpus


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("step", nargs="?", choices=["read", "fit"], default=None)
    parser.add_argument("corpora", nargs="*", default=list(CORPORA))
    parser.add_argument("--out", type=Path, default=OUT)
    a = parser.parse_args(argv)
    sys.path.insert(0, str(common.ROOT))
    if a.step == "read":
        for name in a.corpora:
            read(name)
        return 0
    if a.step is None:
        for name in CORPORA:
            if not side_file(name).exists():
                cmd = [sys.executable, "-m", "bench.quality.fourth_list", "read", name]
                subprocess.run(cmd, cwd=common.ROOT, check=True)
    started = time.perf_counter()
    corpora = {name: load(name) for name in CORPORA}
    first = next(iter(corpora))
    chosen, dictionary_cv = choose_dictionary(corpora[first].tuning)
    print(f"[fourth] the dictionary's variant, chosen on {first}'s tuning half: {chosen}")
    recipes = (
        replace(SHIPPED, name="shipped recipe"),
        with_fourth("+ headings", "headings"),
        with_fourth("+ headings, re-score only", "headings re-score"),
        with_fourth("+ dictionary", chosen),
    )
    results = cross_corpus.run(corpora, recipes, cross_corpus.fixed)
    names = [r.name for r in recipes]
    shown = [*cross_corpus.fixed(), *names]
    fixed = list(cross_corpus.fixed())
    cross_corpus.print_blocks(results, list(corpora), shown, fixed, names)
    blocks = ("cross-corpus", "in-corpus")
    comparisons = cross_corpus.paired_against(results, corpora, names, blocks)
    summary = {
        "id": "B8 fourth list",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "lists": {
            name: json.loads(side_file(name).read_text(encoding="utf-8"))["about"]
            for name in corpora
        },
        "dictionary_variant": {"chosen": chosen, "cv_mrr": dictionary_cv, "on": first},
        "recipes": [{**vars(r), "chinese": r.chinese and vars(r.chinese)} for r in recipes],
        "results": cross_corpus.stored(results),
        "paired": comparisons,
        "run_s": round(time.perf_counter() - started, 1),
    }
    a.out.write_text(json.dumps(summary, indent=1, ensure_ascii=False, default=str) + "\n")
    print(f"\n[fourth] took {summary['run_s']}s; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
