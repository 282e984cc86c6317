"""B8 with a third list (issue 38, item 3): all-MiniLM-L6-v2 int8 (Canon's `minilm` provider,
`embeddings.minilm`) over each corpus's English chunks, beside Canon's two legs, fitted on one
corpus and measured on the other as `bench.quality.cross_corpus` does.

    python -m bench.quality.third_leg               # after B8 and B8C2: embed what is missing
                                                    # (one child process per corpus), then fit
    python -m bench.quality.third_leg embed quality2  # one corpus's pass only
    python -m bench.quality.third_leg write quality   # fit the shipped recipe on the first
                                                    # corpus's tuning half, write search's model

**The pass** (per corpus, in the database its B8 run left, as `--reuse` finds it): every live
chunk whose text is not Chinese (`fusion.ZH_SHARE`) is embedded once (cached under
.data/quality/ by `bench.quality.embedders.corpus_matrix`, resumable), shortest first so a batch
pads little; Chinese chunks get no vector (the model does not read Chinese), as the product
would store none. Per question not in Chinese: the exact cosine top LEG_DEPTH over those vectors
(`english`, in the dump's leg format) and the cosine of every chunk any of its lists names
(`en_cos`); a Chinese question gets neither. Written beside the per-leg dump as
`<name>-legs-en.json`, keyed by (set, id), checked against the dump's index version and chunk
count.

**The systems** (every fitted one by fusion_fit's machinery: its Newton fit, 5-fold CV over
depth x L2, the one-standard-error rule):
- the shipped recipe (monotone + keyword gate) on the two legs: today's default, refitted;
- `english`: the same recipe with the third list's candidates added and ENGLISH's columns
  (MiniLM's cosine, its distance below the list's best, whether and where the list has the
  chunk, the list's best): the third leg as search would read it (an HNSW walk over the second
  vector);
- `english, re-score only`: no new candidates, only MiniLM's cosine of the two legs' candidates
  (and its distance below their best): what a stored second vector gives without an index;
- contenders, nothing fitted: MiniLM's list alone, RRF (k 60) of the keyword leg and MiniLM, RRF
  of all three.
Measured in-corpus (held-out half), cross-corpus (every question of the corpus it never saw)
and on the keyword-style set; the bars of cross_corpus (at least each leg, MiniLM's list
included, overall and per language; keyword drop at most 5 %) on the cross-corpus rows.
Writes bench/results/quality-third-leg.json and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.quality import cross_corpus, fusion_fit
from bench.quality.legs import LEG_DEPTH
from bench.quality.metrics import TOP_K

OUT = common.RESULTS / "quality-third-leg.json"
# Each corpus: its B8 run's database and Redis database (bench.quality.ingest's, and
# bench.quality2's own) and its per-leg dump.
CORPORA: dict[str, tuple[str, int, Path]] = {
    "quality": ("canon_quality", 2, cross_corpus.FIRST[1]),
    "quality2": ("canon_quality2", 5, cross_corpus.SECOND[1]),
}
THREADS = 2
RRF_K = 60.0


def side_file(name: str) -> Path:
    return common.RESULTS / f"{name}-legs-en.json"


# --- the pass (one corpus, in a process of its own: Django is set up on its database) -------------


def embed(name: str) -> dict[str, Any]:
    from bench.quality import embedders, ingest
    from retrieval.search.fusion import ZH_SHARE
    from textkit.text import cjk_share

    db, redis_db, legs_path = CORPORA[name]
    dump = json.loads(legs_path.read_text(encoding="utf-8"))
    os.environ["CANON_EMBEDDING_THREADS"] = str(THREADS)  # read when Django's settings load
    ingest.setup(db, redis_db, fresh=False)
    from kb.models import KnowledgeBase

    kb = KnowledgeBase.objects.get(slug=ingest.KB_SLUG)
    chunks = ingest.live_chunks(kb)
    about = dump["about"]
    if (about["index_version"], about["chunks"]) != (kb.active_index_version_id, len(chunks.ids)):
        raise SystemExit(f"{legs_path} is not of {db}'s live index: run B8 on {name} again")
    english = [i for i, text in enumerate(chunks.texts) if cjk_share(text) < ZH_SHARE]
    sub = ingest.Chunks(
        ids=[chunks.ids[i] for i in english],
        keys=[chunks.keys[i] for i in english],
        texts=[chunks.texts[i] for i in english],
        vectors=chunks.vectors[english],
    )
    embedder = embedders.EMBEDDERS["minilm"](THREADS)
    shortest_first = sorted(range(len(sub.ids)), key=lambda r: len(sub.texts[r]))
    started, cpu = time.perf_counter(), time.process_time()
    matrix, corpus = embedders.corpus_matrix(embedder, sub, shortest_first)
    corpus["cpu_s_this_run"] = round(time.process_time() - cpu, 1)
    corpus["wall_s_this_run"] = round(time.perf_counter() - started, 1)
    matrix = embedders.unit(matrix)
    row = {cid: r for r, cid in enumerate(sub.ids)}
    out: dict[str, dict[str, Any]] = {}
    for q in dump["questions"]:
        key = f"{q['set']}/{q['id']}"
        if cjk_share(q["question"]) >= ZH_SHARE:
            out[key] = {"english": [], "en_cos": {}}
            continue
        v = embedders.unit(embedder.query(q["question"]))
        leg = [
            {"rank": rank, "chunk": sub.ids[i], "doc": sub.keys[i], "cos": round(cos, 6)}
            for rank, (i, cos) in enumerate(embedders.dense_top(matrix, v, LEG_DEPTH), start=1)
        ]
        named = {
            e["chunk"]
            for k, listed in q.items()
            if k == "vector" or k.startswith("keyword")
            for e in listed
        }
        named |= {e["chunk"] for e in leg}
        ids = sorted(c for c in named if c in row)
        coses = (matrix[[row[c] for c in ids]] @ v).tolist() if ids else []
        out[key] = {
            "english": leg,
            "en_cos": {str(c): round(float(s), 6) for c, s in zip(ids, coses, strict=True)},
        }
    result = {
        "about": {
            "corpus": name,
            "index_version": about["index_version"],
            "chunks": about["chunks"],
            "english_chunks": len(sub.ids),
            "model": embedder.model,
            "embedding": corpus,
        },
        "questions": out,
    }
    side_file(name).write_text(json.dumps(result) + "\n", encoding="utf-8")
    print(
        f"[third] {name}: {len(sub.ids)} of {len(chunks.ids)} chunks English; wrote "
        f"{side_file(name)}",
        flush=True,
    )
    return result


# --- the features ------------------------------------------------------------------------------

ENGLISH = ("en_cos", "en_cos_below_best", "in_english", "english_reciprocal_rank", "english_best")
# (search's names for them: retrieval.search.fusion.ENGLISH_FEATURES, checked in `write_model`)
ENGLISH_SIGNS = {
    "en_cos": 1,
    "en_cos_below_best": -1,
    "in_english": 1,
    "english_reciprocal_rank": 1,
}
RESCORE = ("en_cos", "en_cos_below_best", "english_best")
RESCORE_SIGNS = {"en_cos": 1, "en_cos_below_best": -1}

_ROWS: dict[tuple[str, str, str, int, bool], fusion_fit.Examples] = {}


def _english_rows(q: dict[str, Any], depth: int, *, add: bool) -> fusion_fit.Examples:
    """The question's examples with the third list: its first `depth` chunks as candidates too
    when `add`, and ENGLISH's columns (RESCORE's when not `add`)."""
    cache = (q["corpus"], q["set"], q["id"], depth, add)
    if cache in _ROWS:
        return _ROWS[cache]
    from retrieval.search.fusion import english_columns, learned_features

    vector, keyword, query_cjk, bound = fusion_fit._legs(q, depth, fusion_fit.CHUNKS[0])
    english = q.get("english", [])[:depth] if add else []
    en_cos = {int(c): s for c, s in q.get("en_cos", {}).items()}
    others = [(e["chunk"], e["cos"], 0.0) for e in english]
    features = learned_features(
        query_cjk=query_cjk, vector=vector, keyword=keyword, keyword_bound=bound, others=others
    )
    legs = [leg for k, leg in q.items() if k == "vector" or k.startswith("keyword")]
    docs = {e["chunk"]: e["doc"] for leg in (*legs, english) for e in leg}
    ids = list(features)
    if add:
        # ENGLISH's columns as search computes them (the very function it runs)
        listed = [(e["chunk"], e["cos"]) for e in english]
        columns = english_columns(ids, listed, en_cos)
        rows = [features[cid] + columns[cid] for cid in ids]
    else:
        # re-scoring only: the candidates' cosines against the candidates' best
        coses = [en_cos.get(c, 0.0) for c in ids]
        best = max(coses, default=0.0)
        rows = [
            features[cid] + [cos, best - cos if cid in en_cos else 0.0, best]
            for cid, cos in zip(ids, coses, strict=True)
        ]
    _ROWS[cache] = (ids, np.array(rows, dtype=float), docs)
    return _ROWS[cache]


fusion_fit.EXTRAS["english"] = fusion_fit.Extra(
    ENGLISH, ENGLISH_SIGNS, lambda q, depth: _english_rows(q, depth, add=True)
)
fusion_fit.EXTRAS["english-rescore"] = fusion_fit.Extra(
    RESCORE, RESCORE_SIGNS, lambda q, depth: _english_rows(q, depth, add=False)
)

SHIPPED_GATE = fusion_fit.SHIPPED.gate
TWO_LEGS = fusion_fit.Recipe("two legs (the shipped recipe)", monotone=True, gate=SHIPPED_GATE)
RECIPES = (
    TWO_LEGS,
    fusion_fit.Recipe("english: three lists", monotone=True, gate=SHIPPED_GATE, extra="english"),
    fusion_fit.Recipe("english: three lists, no gate", monotone=True, extra="english"),
    fusion_fit.Recipe(
        "english: re-score only", monotone=True, gate=SHIPPED_GATE, extra="english-rescore"
    ),
    # The third list for questions not in Chinese only: a Chinese question is ranked by the
    # two legs' model, fitted on the same questions (the legs' weights shift when the English
    # columns join them, which cost Chinese questions though their English columns are 0).
    fusion_fit.Recipe(
        "english: three lists, Chinese by two legs",
        monotone=True,
        gate=SHIPPED_GATE,
        extra="english",
        chinese=TWO_LEGS,
    ),
    fusion_fit.Recipe(
        "english: three lists, no gate, Chinese by two legs",
        monotone=True,
        extra="english",
        chinese=TWO_LEGS,
    ),
)


# What search ships for the English list (`retrieval/search/fusion_model_english.json`): the
# recipe the cross-corpus rows chose ("english: three lists, Chinese by two legs", docs/
# BENCHMARKS.md "B8 with a third list"), fitted on the first corpus's tuning half; its Chinese
# part is the two legs' model, which fusion_model.json already is.
SHIPPED_ENGLISH = RECIPES[4]
ENGLISH_MODEL = common.ROOT / "retrieval" / "search" / "fusion_model_english.json"


def write_model(corpus: cross_corpus.Corpus, out: Path = ENGLISH_MODEL) -> dict[str, Any]:
    """Fit SHIPPED_ENGLISH's English part on `corpus`'s tuning half and write it as search
    reads it (`retrieval.search.fusion.english_model`)."""
    from retrieval.search.fusion import ENGLISH_FEATURES, FEATURES, model_from

    if ENGLISH != ENGLISH_FEATURES:
        raise SystemExit("the bench's English columns are not search's: align them first")
    recipe = SHIPPED_ENGLISH
    part = fusion_fit.fit_recipe(replace(recipe, chinese=None), corpus.tuning).parts["all"]
    model: dict[str, Any] = {
        "about": (
            "Canon's learned hybrid fusion over three lists (retrieval/search/fusion.py, "
            "retrieval/search/english.py): the two legs and the English list, for queries not "
            f"in Chinese. Recipe {recipe.name!r} (chosen by bench.quality.third_leg's "
            "cross-corpus rows), fitted by `python -m bench.quality.third_leg write` on the "
            f"{len(corpus.tuning)} questions of {corpus.name}'s natural tuning half; depth and "
            f"L2 chosen by {fusion_fit.FOLDS}-fold cross-validation there (MRR@10 "
            f"{part['cv_mrr']:.4f}; best {part['best_mrr']:.4f}, within one standard error)."
        ),
        "recipe": recipe.name,
        "fitted_on": corpus.name,
        "features": [*FEATURES, *ENGLISH_FEATURES],
        "mean": [round(float(v), 6) for v in part["mean"]],
        "scale": [round(float(v), 6) for v in part["scale"]],
        "weights": [round(float(v), 6) for v in part["weights"]],
        "bias": round(float(part["bias"]), 6),
        "depth": part["depth"],
        "l2": part["l2"],
        "gate": vars(recipe.keyword_gate()),
        "monotone": sorted({**fusion_fit.MONOTONE, **ENGLISH_SIGNS}),
    }
    model_from(model, name=out.name)  # search can read it
    out.write_text(json.dumps(model, indent=2) + "\n", encoding="utf-8")
    print(f"[third] chose depth {part['depth']}, l2 {part['l2']:g}; weights:")
    for name, weight in zip(model["features"], model["weights"], strict=True):
        print(f"  {name:<34} {weight:+.3f}")
    print(f"[third] wrote {out}")
    return model


# --- the contenders ----------------------------------------------------------------------------


def _documents(order: Sequence[int], docs: dict[int, str]) -> list[str]:
    ranked: list[str] = []
    for cid in order:
        if docs[cid] not in ranked:
            ranked.append(docs[cid])
        if len(ranked) == TOP_K:
            break
    return ranked


def english_leg(q: dict[str, Any]) -> list[str]:
    return _documents([e["chunk"] for e in q.get("english", [])], _docs(q))


def _docs(q: dict[str, Any]) -> dict[int, str]:
    lists = [v for k, v in q.items() if k in ("vector", "english") or k.startswith("keyword")]
    return {e["chunk"]: e["doc"] for leg in lists for e in leg}


def rrf(*names: str) -> cross_corpus.Ranker:
    def ranker(q: dict[str, Any]) -> list[str]:
        scores: dict[int, float] = {}
        for name in names:
            for rank, e in enumerate(q.get(name, [])[:LEG_DEPTH], start=1):
                scores[e["chunk"]] = scores.get(e["chunk"], 0.0) + 1.0 / (RRF_K + rank)
        order = sorted(scores, key=lambda c: (-scores[c], c))
        return _documents(order, _docs(q))

    return ranker


def systems() -> dict[str, cross_corpus.Ranker]:
    return {
        **cross_corpus.fixed(),
        "minilm": english_leg,
        "rrf 60: keyword + minilm": rrf("keyword", "english"),
        "rrf 60: all three": rrf("vector", "keyword", "english"),
    }


# --- the run -----------------------------------------------------------------------------------


def load(name: str) -> cross_corpus.Corpus:
    corpus = cross_corpus.load(name, CORPORA[name][2])
    side = json.loads(side_file(name).read_text(encoding="utf-8"))
    dump_about = json.loads(CORPORA[name][2].read_text(encoding="utf-8"))["about"]
    if (side["about"]["index_version"], side["about"]["chunks"]) != (
        dump_about["index_version"],
        dump_about["chunks"],
    ):
        raise SystemExit(f"{side_file(name)} is of another B8 run: embed {name} again")
    extra = side["questions"]
    for q in (*corpus.questions, *corpus.keyword_style):
        q.update(extra[f"{q['set']}/{q['id']}"])
    return corpus


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("step", nargs="?", choices=["embed", "fit", "write"], default=None)
    parser.add_argument("corpora", nargs="*", default=list(CORPORA))
    parser.add_argument("--out", type=Path, default=OUT)
    a = parser.parse_args(argv)
    sys.path.insert(0, str(common.ROOT))
    if a.step == "embed":
        for name in a.corpora:
            embed(name)
        return 0
    if a.step is None:
        for name in CORPORA:
            if not side_file(name).exists():
                cmd = [sys.executable, "-m", "bench.quality.third_leg", "embed", name]
                subprocess.run(cmd, cwd=common.ROOT, check=True)
    if a.step == "write":
        write_model(load(a.corpora[0]))
        return 0
    started = time.perf_counter()
    corpora = {name: load(name) for name in CORPORA}
    results = cross_corpus.run(corpora, RECIPES, systems)
    legs = ("vector", "keyword", "minilm")
    verdicts = cross_corpus.bars(results, legs)
    names = [r.name for r in RECIPES]
    shown = [*systems(), "convex, weight fitted", *names]
    cross_corpus.print_blocks(results, list(corpora), shown, list(systems()), names)
    print("\nthe bars on the cross-corpus rows (each measured on the corpus it never saw):\n")
    print(cross_corpus.bars_table(verdicts, list(corpora), [*names, *list(systems())[2:]]))
    comparisons = cross_corpus.paired_against(results, corpora, names)
    summary = {
        "id": "B8 third leg",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "embedding": {
            name: json.loads(side_file(name).read_text(encoding="utf-8"))["about"]
            for name in corpora
        },
        "recipes": [vars(r) for r in RECIPES],
        "results": cross_corpus.stored(results),
        "bars": verdicts,
        "paired": comparisons,
        "run_s": round(time.perf_counter() - started, 1),
    }
    a.out.write_text(json.dumps(summary, indent=1, ensure_ascii=False, default=str) + "\n")
    print(f"\n[third] took {summary['run_s']}s; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
