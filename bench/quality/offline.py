"""Try a fusion of Canon's two legs in seconds, from B8's per-leg dump (no database, no ingest).

    python -m bench.quality.offline                                  # canon, vector, keyword
    python -m bench.quality.offline --fusion canon --fusion rrf:60 --fusion convex:0.5:30
    python -m bench.quality.offline --fusion my_fusions.py:fuse      # a function of your own
    python -m bench.quality.offline --check   # does `canon` reproduce the run's own hybrid?

A fusion is a Python function `fuse(q) -> chunk ids, best first` (the first TOP_K count) of one
question's record in `bench/results/quality-legs.json` (written by `python -m bench.quality`;
`bench.quality.legs` says what it holds). `q["vector"]` and `q["keyword"]` are the legs read
LEG_DEPTH deep, entries {rank, chunk, doc, score, cjk, cos, bm25, matched, idf_matched};
`q["keyword_hybrid"]` is the keyword leg as Canon's hybrid reads it, `fusion.depth(TOP_K)` deep
(its order can differ from `keyword`'s, which ranked more BM25 candidates exactly);
`q["query"]` holds the query's features, and `q["lang"]`, `q["kind"]`, `q["set"]`, `q["split"]`
say who asks. A fusion never sees `answers` (nor Canon's own result). Built in, by name
(`convex` and `rrf` read `vector` and `keyword`):

    canon            Canon's own `retrieval.search.fusion.fuse` with the settings the run had
                     (method, vector weight) on the legs as the hybrid reads them: `vector` and
                     `keyword_hybrid`, each cut to `fusion.depth(TOP_K)`
    convex:W[:D]     the convex method re-implemented: W * vector/best + (1 - W) * keyword/best,
                     each leg cut to D (default: the run's hybrid depth)
    rrf[:K[:D]]      reciprocal rank fusion, 1 / (K + rank) summed, K = 60, D = LEG_DEPTH
    vector, keyword, keyword_hybrid   one list alone

Figures: MRR@10 and hit@1/5/10 over the distinct documents of the first TOP_K chunks, for the
natural set per split (tuning, heldout) x kind and per language, and for the keyword-style set per
language: the same definitions as the run's (`bench.quality.metrics`). Choose on `tuning`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.quality.metrics import KINDS, LANGS, SPLITS, TOP_K, summarize, summarize_natural

LEGS = common.RESULTS / "quality-legs.json"

Fusion = Callable[[dict[str, Any]], Sequence[int]]

# What `fusion.depth(TOP_K)` was for the convex method when the dump format was made; a dump
# records the run's own (`about.settings.hybrid_depth`), which wins.
HYBRID_DEPTH = 30


def hybrid_depth(settings: dict[str, Any]) -> int:
    return int(settings.get("hybrid_depth") or HYBRID_DEPTH)


def load(path: Path = LEGS) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def use_dump(data: dict[str, Any]) -> None:
    """Replay `data` with its own chunk count (the N of its IDFs, `fusion_fit.CHUNKS`), not the
    count of the first corpus's dump, which `fusion_fit.learned` reads when none is set."""
    from bench.quality import fusion_fit

    if "chunks" in data.get("about", {}):  # every run's dump has it; hand-made ones may not
        fusion_fit.CHUNKS[0] = int(data["about"]["chunks"])


def doc_keys(q: dict[str, Any]) -> dict[int, str]:
    """chunk id -> document key for every chunk in either leg (and Canon's own lists)."""
    out = {e["chunk"]: e["doc"] for leg in ("vector", "keyword") for e in q[leg]}
    for hits in q.get("canon", {}).values():
        for chunk, doc, *_ in hits:
            out.setdefault(chunk, doc)
    return out


def ranked_documents(q: dict[str, Any], chunk_ids: Sequence[int]) -> list[str]:
    """The document key of each of the first TOP_K chunks."""
    keys = doc_keys(q)
    return [keys[c] for c in list(chunk_ids)[:TOP_K]]


def evaluate(questions: Sequence[dict[str, Any]], rankings: Sequence[Sequence[str]]) -> dict:
    """Figures of one system from each question's ranked document keys: `natural` per split
    (kinds, en, zh, all) and `keyword-style` per language."""
    natural = [
        (q["split"], q["kind"], q["lang"], q["answers"], r)
        for q, r in zip(questions, rankings, strict=True)
        if q["set"] == "natural"
    ]
    keyword = [
        (q["lang"], q["answers"], r)
        for q, r in zip(questions, rankings, strict=True)
        if q["set"] == "keyword"
    ]
    return {"natural": summarize_natural(natural), "keyword-style": summarize(keyword)}


def run_fusion(fusion: Fusion, questions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return evaluate(questions, [ranked_documents(q, fusion(_blind(q))) for q in questions])


def _blind(q: dict[str, Any]) -> dict[str, Any]:
    """The question as a fusion sees it: without its answers or Canon's own result."""
    return {k: v for k, v in q.items() if k not in ("answers", "canon", "where")}


# --- built-in fusions ------------------------------------------------------------------------


def canon_fusion(settings: dict[str, Any]) -> Fusion:
    """Canon's own fuse() on Hit objects rebuilt from the dump, each leg cut to the hybrid's
    depth as the run recorded it (`about.settings.hybrid_depth`). It reproduces the methods
    that need nothing but the legs' scores and ranks (`convex`, `rrf`); `learned` reads the
    chunks' languages and the keyword leg's bound from the dump (`bench.quality.fusion_fit`)."""
    from retrieval.search.fusion import fuse
    from retrieval.search.hits import Hit

    if settings["HYBRID_FUSION"] == "learned":
        from bench.quality.fusion_fit import learned

        return learned

    cut = hybrid_depth(settings)

    def hits(entries: list[dict[str, Any]]) -> list[Hit]:
        return [
            Hit(
                chunk_id=e["chunk"],
                score=float(e["score"]),
                text="",
                ordinal=0,
                document_key=e["doc"],
                document_title="",
                revision=0,
                build_id=0,
            )
            for e in entries[:cut]
        ]

    def fusion(q: dict[str, Any]) -> list[int]:
        fused = fuse(
            vector=hits(q["vector"]),
            keyword=hits(q.get("keyword_hybrid", q["keyword"])),
            top_k=TOP_K,
            method=settings["HYBRID_FUSION"],
            vector_weight=float(settings["HYBRID_VECTOR_WEIGHT"]),
        )
        return [h.chunk_id for h in fused]

    return fusion


def _best_normalised(entries: list[dict[str, Any]]) -> dict[int, float]:
    best = max((e["score"] for e in entries), default=0.0)
    if best <= 0:
        return {e["chunk"]: 0.0 for e in entries}
    return {e["chunk"]: max(e["score"], 0.0) / best for e in entries}


def convex(weight: float, depth: int = HYBRID_DEPTH) -> Fusion:
    """weight * vector/best + (1 - weight) * keyword/best, each leg cut to `depth`; ties by the
    better rank in either leg, then chunk id (as Canon's)."""
    cut = depth

    def fusion(q: dict[str, Any]) -> list[int]:
        vector, keyword = q["vector"][:cut], q["keyword"][:cut]
        ranks: dict[int, int] = {}
        for leg in (vector, keyword):
            for i, e in enumerate(leg):
                ranks[e["chunk"]] = min(i, ranks.get(e["chunk"], i))
        scores = dict.fromkeys(ranks, 0.0)
        for normalised, w in (
            (_best_normalised(vector), weight),
            (_best_normalised(keyword), 1 - weight),
        ):
            for chunk, value in normalised.items():
                scores[chunk] += w * value
        return sorted(scores, key=lambda c: (-scores[c], ranks[c], c))

    return fusion


def rrf(k: float = 60.0, depth: int | None = None) -> Fusion:
    def fusion(q: dict[str, Any]) -> list[int]:
        scores: dict[int, float] = {}
        best: dict[int, int] = {}
        for leg in ("vector", "keyword"):
            for e in q[leg][:depth]:
                scores[e["chunk"]] = scores.get(e["chunk"], 0.0) + 1.0 / (k + e["rank"])
                best[e["chunk"]] = min(e["rank"], best.get(e["chunk"], e["rank"]))
        return sorted(scores, key=lambda c: (-scores[c], best[c], c))

    return fusion


def leg(name: str) -> Fusion:
    def fusion(q: dict[str, Any]) -> list[int]:
        return [e["chunk"] for e in q[name]]

    return fusion


def resolve(spec: str, settings: dict[str, Any]) -> Fusion:
    """A fusion by name (the built-ins above), `path/to/file.py:function` or `module:function`."""
    name, _, rest = spec.partition(":")
    args = [a for a in rest.split(":") if a] if rest else []
    if name == "canon":
        return canon_fusion(settings)
    if name == "convex":
        return convex(float(args[0]), int(args[1]) if len(args) > 1 else hybrid_depth(settings))
    if name == "rrf":
        return rrf(float(args[0]) if args else 60.0, int(args[1]) if len(args) > 1 else None)
    if name in ("vector", "keyword", "keyword_hybrid") and not rest:
        return leg(name)
    if not rest:
        raise SystemExit(f"unknown fusion {spec!r}: a built-in name, file.py:func or module:func")
    if name.endswith(".py"):
        loader = importlib.util.spec_from_file_location(Path(name).stem, name)
        if loader is None or loader.loader is None:
            raise SystemExit(f"cannot load {name}")
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        module = importlib.import_module(name)
    function: Fusion = getattr(module, rest)
    return function


# --- reproduction check ----------------------------------------------------------------------


def check(data: dict[str, Any]) -> tuple[bool, list[str]]:
    """Whether the built-in `canon` fusion gives, from the dump's legs, the figures of Canon's
    hybrid as the timed run measured them (its top 10 kept in the dump): the figures within
    rounding (0.001) for every split x kind, language and the keyword-style set; plus how many
    questions' top-10 chunk lists differ, and which."""
    use_dump(data)
    questions = data["questions"]
    offline = run_fusion(canon_fusion(data["about"]["settings"]), questions)
    measured = evaluate(
        questions, [[doc for _chunk, doc, *_ in q["canon"]["hybrid"]] for q in questions]
    )
    fusion = canon_fusion(data["about"]["settings"])
    differing = [
        q["id"]
        for q in questions
        if list(fusion(_blind(q)))[:TOP_K] != [c for c, *_ in q["canon"]["hybrid"]]
    ]
    lines = [
        f"top-10 chunk lists that differ: {len(differing)} of {len(questions)} {differing[:20]}"
    ]
    # Each deep leg's first TOP_K against Canon's search in that mode at top_k TOP_K (the keyword
    # leg's can differ: a deeper read ranks more BM25 candidates exactly).
    for mode in ("vector", "keyword"):
        other = [
            q["id"]
            for q in questions
            if [e["chunk"] for e in q[mode][:TOP_K]] != [c for c, *_ in q["canon"].get(mode, [])]
        ]
        lines.append(
            f"{mode} leg's first {TOP_K} vs Canon's {mode} mode: {len(other)} of "
            f"{len(questions)} differ {other[:10]}"
        )
    ok = True
    for where, a, b in _pairs(offline, measured):
        for metric in ("hit@1", "hit@5", "hit@10", "mrr@10"):
            if metric in a and abs(a[metric] - b[metric]) > 0.001:
                ok = False
                lines.append(f"{where} {metric}: offline {a[metric]} vs measured {b[metric]}")
    lines.append("figures: " + ("reproduced within 0.001" if ok else "NOT reproduced"))
    return ok, lines


def _pairs(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, dict, dict]]:
    out = [
        (f"natural {s} {g}", a["natural"][s][g], b["natural"][s][g])
        for s in SPLITS
        for g in (*KINDS, *LANGS)
    ]
    out += [
        (f"keyword-style {lang}", a["keyword-style"][lang], b["keyword-style"][lang])
        for lang in LANGS
    ]
    return out


# --- tables ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    from bench.quality.report import keyword_table, natural_tables

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--legs", type=Path, default=LEGS)
    parser.add_argument("--fusion", action="append", help="repeatable; see the module's doc")
    parser.add_argument("--check", action="store_true", help="canon vs the run's own hybrid")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--full", action="store_true", help="also hit@1/5/10 per kind")
    a = parser.parse_args(argv)
    data = load(a.legs)
    use_dump(data)
    if a.check:
        ok, lines = check(data)
        print("\n".join(lines))
        return 0 if ok else 1
    specs = a.fusion or ["canon", "vector", "keyword"]
    results = {
        spec: run_fusion(resolve(spec, data["about"]["settings"]), data["questions"])
        for spec in specs
    }
    if a.json:
        print(json.dumps(results, indent=1))
        return 0
    print(natural_tables({s: r["natural"] for s, r in results.items()}, full=a.full))
    print()
    print(keyword_table({s: r["keyword-style"] for s, r in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
