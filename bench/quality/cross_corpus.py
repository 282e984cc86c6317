"""B8 across corpora (issue 38): every fusion and each leg fitted on one corpus and measured on
the other, both ways, beside the in-corpus held-out half, from one run.

    python -m bench.quality.cross_corpus          # after `python -m bench.quality` and
    python -m bench.quality.cross_corpus --all    #   `python -m bench.quality2`; --all: every
                                                  #   recipe's rows, not only the main ones

No database: it reads the two B8 runs' per-leg dumps (`bench/results/quality-legs.json`, the
first corpus, and `quality2-legs.json`, the second; `bench.quality.legs` says what they hold)
and fits every recipe with `bench.quality.fusion_fit`'s own machinery (its features, Newton fit,
5-fold CV over depth x L2 and one-standard-error rule). The systems:

- `vector`, `keyword`: Canon's legs alone, as its vector and keyword modes answered in the run
  (each question's top 10, kept in the dump); nothing is fitted;
- `convex 0.15` (the fusion before the learned one) and `rrf 60`: fixed, nothing fitted;
  `convex, weight fitted`: its vector weight chosen on the fitting corpus's tuning half;
- `shipped`: `retrieval/search/fusion_model.json` as search runs it (`fusion_fit.learned`),
  in the block of the corpus it was fitted on (its `fitted_on`);
- every recipe of RECIPES (`fusion_fit.Recipe`): the learned model as first fitted, with sign
  constraints (`monotone`), one model per query language, the "only one leg found it"
  features, and keyword gates (`retrieval.search.fusion.KeywordGate`), fitted on each
  corpus's tuning half and on both halves together.

Three blocks per measured corpus C: **in-corpus** (fitted on C's tuning half, measured on C's
held-out half), **cross-corpus** (fitted on the other corpus's tuning half, measured on every
natural question of C: it never saw that corpus) and **both** (fitted on both tuning halves,
measured on C's held-out half; a recipe's cross-corpus rows are then its corpus-level
cross-validation). Per kind x system: MRR@10 and hit@10 (`bench.quality.metrics`), and on the
English questions (en-paraphrase, en-fact, en-to-zh) the **keyword drop**: how many lose an
answer document that the keyword leg has in its top 10. The first corpus's keyword-style set
is measured too (no fit ever read it).

The bars (issue 38, item 2), checked on the cross-corpus rows of each direction: MRR@10 at least
each leg's overall, in English and in Chinese, and a keyword drop of at most 5 %. The choice, on
those rows only (never a held-out figure): the recipes that miss the fewest bars both ways
(none, when one meets them all); among them, one whose keyword gate keeps a strong keyword
match's rank if there is one (the issue's test asks that an English answer only the keyword leg
finds stays first: a requirement, not a tuning choice); then the best mean cross-corpus MRR@10.
The run then says whether `fusion_model.json` is that recipe (`fusion_fit.SHIPPED`) as
`python -m bench.quality.fusion_fit` fits it on these dumps (a new ingest moves the legs a
little, so a refit can differ in the last digits: it prints by how much). Writes
bench/results/quality-cross-corpus.json and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from bench.quality import fusion_fit, offline
from bench.quality.metrics import KINDS, LANGS, TOP_K, distinct_documents, figures, reciprocal_rank
from bench.quality.report import markdown

FIRST = ("quality", common.RESULTS / "quality-legs.json")
SECOND = ("quality2", common.RESULTS / "quality2-legs.json")
OUT = common.RESULTS / "quality-cross-corpus.json"
BOTH = "both"
BLOCKS = ("in-corpus", "cross-corpus", BOTH)
DROP_BAR = 0.05
CONVEX_WEIGHTS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

Recipe = fusion_fit.Recipe
# The keyword gates tried: `fusion.KeywordGate`'s fields (ranks, share, of_best, at_rank[,
# chinese]); a gate for queries not in Chinese unless said.
GATES: tuple[tuple[Any, ...], ...] = (
    (10, 0.1, 0.0, None),
    (3, 0.1, 0.0, None),
    *((10, 0.1, of_best, None) for of_best in (0.7, 0.8, 0.9)),
    *((10, share, 0.0, share) for share in (0.1, 0.2, 0.3)),
    *((10, 0.1, 0.8, at_rank) for at_rank in (0.25, 0.3, 0.4)),
    (10, 0.1, 0.8, None, True),
    (10, 0.1, 0.8, 0.3, True),
)


def gate_name(gate: tuple[Any, ...]) -> str:
    """A gate in short words: what keeps a place in the top 10, what keeps its keyword rank."""
    from retrieval.search.fusion import KeywordGate

    g = KeywordGate(*gate)
    words = []
    if g.at_rank is None or g.at_rank > g.share:
        best = f" & >={g.of_best:g} of best" if g.of_best else ""
        first = f" of kw top {g.ranks}" if g.ranks != 10 else ""
        words.append(f"top 10 if >={g.share:g} of bound{best}{first}")
    if g.at_rank is not None:
        words.append(f"rank if >={g.at_rank:g}")
    return "gate " + ", ".join(words) + (", zh too" if g.chinese else "")


RECIPES: tuple[Recipe, ...] = (
    Recipe("learned"),
    Recipe("learned, monotone", monotone=True),
    Recipe("learned, per language", by_language=True),
    Recipe("learned, per language, monotone", monotone=True, by_language=True),
    Recipe("learned, one-leg features", extra="one-leg"),
    Recipe("learned, one-leg features, monotone", monotone=True, extra="one-leg"),
    *(Recipe(f"learned + {gate_name(g)}", gate=g) for g in GATES),
    *(Recipe(f"learned, monotone + {gate_name(g)}", monotone=True, gate=g) for g in GATES),
)
FIXED = ("vector", "keyword", "convex 0.15", "rrf 60")
# The rows printed without --all (every recipe's bars are printed either way).
MAIN = (
    *FIXED,
    "convex, weight fitted",
    "shipped",
    "learned",
    "learned, monotone",
    "learned, per language, monotone",
    "learned, one-leg features, monotone",
    f"learned + {gate_name((10, 0.1, 0.8, 0.3))}",
)

Ranker = Callable[[dict[str, Any]], list[str]]


@dataclass
class Corpus:
    name: str
    questions: list[dict[str, Any]]  # the natural set, each told its corpus and chunk count
    keyword_style: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tuning(self) -> list[dict[str, Any]]:
        return [q for q in self.questions if q["split"] == "tuning"]

    @property
    def heldout(self) -> list[dict[str, Any]]:
        return [q for q in self.questions if q["split"] == "heldout"]


def load(name: str, path: Path) -> Corpus:
    if not path.exists():
        raise SystemExit(
            f"no per-leg dump {path}: run B8 on that corpus first "
            "(`python -m bench.quality`, `python -m bench.quality2`)"
        )
    questions = fusion_fit.annotate(json.loads(path.read_text(encoding="utf-8")), name)
    return Corpus(
        name,
        [q for q in questions if q["set"] == "natural"],
        [{**q, "kind": None} for q in questions if q["set"] == "keyword"],
    )


# --- systems -------------------------------------------------------------------------------------


def mode_documents(mode: str) -> Ranker:
    """Canon's own answer in one mode, as the run got it (its top 10 chunks' documents)."""

    def ranker(q: dict[str, Any]) -> list[str]:
        listed = q.get("canon", {}).get(mode)
        if listed is None:  # a dump without Canon's lists: the deep leg's first TOP_K
            return [e["doc"] for e in q[mode][:TOP_K]]
        return [doc for _chunk, doc, *_ in listed]

    return ranker


def fused_documents(fusion: offline.Fusion) -> Ranker:
    def ranker(q: dict[str, Any]) -> list[str]:
        return offline.ranked_documents(q, fusion(offline._blind(q)))

    return ranker


def mean_mrr(ranker: Ranker, questions: Sequence[dict[str, Any]]) -> float:
    return statistics.fmean(reciprocal_rank(ranker(q), q["answers"]) for q in questions)


def convex_fitted(tuning: Sequence[dict[str, Any]]) -> tuple[float, Ranker]:
    """The convex fusion's vector weight with the best MRR@10 on `tuning` (ties: the smaller)."""
    best = max(
        CONVEX_WEIGHTS, key=lambda w: (mean_mrr(fused_documents(offline.convex(w)), tuning), -w)
    )
    return best, fused_documents(offline.convex(best))


def fixed() -> dict[str, Ranker]:
    return {
        "vector": mode_documents("vector"),
        "keyword": mode_documents("keyword"),
        "convex 0.15": fused_documents(offline.convex(0.15)),
        "rrf 60": fused_documents(offline.rrf(60.0)),
    }


def fit_everything(
    corpora: dict[str, Corpus], recipes: Sequence[Recipe] = RECIPES
) -> dict[str, dict[str, Any]]:
    """Every fitted system per fitting set (each corpus's name, and BOTH): name -> its ranker
    and what its fit chose."""
    fitted: dict[str, dict[str, Any]] = {}
    halves = {name: c.tuning for name, c in corpora.items()}
    halves[BOTH] = [q for c in corpora.values() for q in c.tuning]
    for fit_on, tuning in halves.items():
        t0 = time.perf_counter()
        weight, ranker = convex_fitted(tuning)
        systems: dict[str, Any] = {
            "convex, weight fitted": {"ranker": ranker, "chosen": {"weight": weight}}
        }
        for recipe in recipes:
            model = fusion_fit.fit_recipe(recipe, tuning)
            systems[recipe.name] = {
                "ranker": model.rank,
                "chosen": {
                    part: {"depth": p["depth"], "l2": p["l2"], "cv_mrr": round(p["cv_mrr"], 4)}
                    for part, p in model.parts.items()
                },
            }
        fitted[fit_on] = systems
        print(
            f"[cross] fitted {len(systems)} systems on {fit_on}'s tuning half ({len(tuning)} "
            f"questions) in {time.perf_counter() - t0:.0f}s",
            flush=True,
        )
    return fitted


def shipped_fit_on() -> str:
    """The corpus `fusion_model.json` was fitted on (its `fitted_on`)."""
    model = json.loads(fusion_fit.MODEL.read_text(encoding="utf-8"))
    return str(model.get("fitted_on", FIRST[0]))


# --- figures -------------------------------------------------------------------------------------


def keyword_drop(
    questions: Sequence[dict[str, Any]], ranked: Sequence[Sequence[str]]
) -> dict[str, Any]:
    """On the English questions: how many lose an answer document the keyword leg has in its
    top 10 (Canon's keyword mode in the run), their share, and which."""
    keyword = mode_documents("keyword")
    english = [(q, r) for q, r in zip(questions, ranked, strict=True) if q["lang"] == "en"]
    dropped = []
    for q, r in english:
        found = set(distinct_documents(keyword(q)[:TOP_K])) & set(q["answers"])
        if found - set(distinct_documents(list(r)[:TOP_K])):
            dropped.append(q["id"])
    n = len(english)
    rate = round(len(dropped) / n, 4) if n else 0.0
    return {"n": n, "dropped": len(dropped), "rate": rate, "ids": dropped}


def measure(ranker: Ranker, questions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per kind, per language and overall: n, hit@1/5/10, MRR@10; the keyword drop; and each
    question's reciprocal rank (for paired comparisons)."""
    rows = [(q, ranker(q)) for q in questions]
    out: dict[str, Any] = {
        kind: figures([(q["answers"], r) for q, r in rows if q["kind"] == kind]) for kind in KINDS
    }
    for lang in LANGS:
        mine = [(q["answers"], r) for q, r in rows if lang == "all" or q["lang"] == lang]
        out[lang] = figures(mine)
    out["keyword_drop"] = keyword_drop(questions, [r for _, r in rows])
    out["rr"] = {q["id"]: reciprocal_rank(r, q["answers"]) for q, r in rows}
    return out


def run(
    corpora: dict[str, Corpus],
    recipes: Sequence[Recipe] = RECIPES,
    fixed_systems: Callable[[], dict[str, Ranker]] = fixed,
) -> dict[str, Any]:
    """Every system in every block of every measured corpus, and on the keyword-style set:
    `recipes` fitted, `fixed_systems` (nothing fitted) as they are."""
    fitted = fit_everything(corpora, recipes)
    shipped_on = shipped_fit_on()
    shipped = fused_documents(fusion_fit.learned)
    results: dict[str, Any] = {}
    for name, corpus in corpora.items():
        other = next(n for n in corpora if n != name)
        measured = {"in-corpus": corpus.heldout, "cross-corpus": corpus.questions}
        measured[BOTH] = corpus.heldout
        fit_on = {"in-corpus": name, "cross-corpus": other, BOTH: BOTH}
        blocks: dict[str, dict[str, Any]] = {block: {} for block in BLOCKS}
        for system, ranker in fixed_systems().items():
            for block in BLOCKS:
                blocks[block][system] = measure(ranker, measured[block])
        for block in BLOCKS:
            if fit_on[block] == shipped_on:
                blocks[block]["shipped"] = measure(shipped, measured[block])
            for system, made in fitted[fit_on[block]].items():
                figs = measure(made["ranker"], measured[block])
                blocks[block][system] = {**figs, "chosen": made["chosen"]}
        if corpus.keyword_style:
            kw = corpus.keyword_style
            blocks["keyword-style"] = {s: measure(r, kw) for s, r in fixed_systems().items()}
            blocks["keyword-style"]["shipped"] = measure(shipped, kw)
            for fit_corpus in (name, other):
                for system, made in fitted[fit_corpus].items():
                    key = f"{system} (fitted on {fit_corpus})"
                    blocks["keyword-style"][key] = measure(made["ranker"], kw)
        results[name] = blocks
    return results


def bars(
    results: dict[str, Any], legs: Sequence[str] = ("vector", "keyword")
) -> dict[str, dict[str, Any]]:
    """Per system and measured corpus, on its cross-corpus rows: each bar, met or not (at
    least each of `legs` alone, the keyword drop)."""
    out: dict[str, dict[str, Any]] = {}
    for corpus, blocks in results.items():
        rows = blocks["cross-corpus"]
        for system, figs in rows.items():
            if system in legs:
                continue
            checks = {}
            for group in ("all", "en", "zh"):
                if not figs[group].get("n"):
                    continue
                for leg in legs:
                    ours, theirs = figs[group]["mrr@10"], rows[leg][group]["mrr@10"]
                    checks[f"{group} >= {leg}"] = ours >= theirs
            checks[f"keyword drop <= {DROP_BAR:.0%}"] = figs["keyword_drop"]["rate"] <= DROP_BAR
            out.setdefault(system, {})[corpus] = {
                "checks": checks,
                "missed": [k for k, ok in checks.items() if not ok],
                "mrr@10": figs["all"]["mrr@10"],
            }
    return out


def keeps_first(recipe: Recipe) -> bool:
    """Whether a recipe's gate keeps a strong keyword match's rank: the issue's test (an
    English answer only the keyword leg finds stays first) asks that of the default."""
    gate = recipe.keyword_gate()
    return gate is not None and gate.at_rank is not None


def choose(
    verdicts: dict[str, dict[str, Any]], candidates: Sequence[Recipe] = RECIPES
) -> dict[str, Any]:
    """The recipe the cross-corpus rows choose (see the module's doc)."""
    recipes = {r.name: r for r in candidates}
    scored = []
    for system, per_corpus in verdicts.items():
        if system not in recipes or len(per_corpus) < 2:
            continue
        missed = sum(len(v["missed"]) for v in per_corpus.values())
        mean = statistics.fmean(v["mrr@10"] for v in per_corpus.values())
        scored.append((missed, not keeps_first(recipes[system]), -mean, system))
    missed, _, negative_mean, system = min(scored)
    return {
        "recipe": system,
        "missed_bars": missed,
        "keeps_first": keeps_first(recipes[system]),
        "mean_cross_mrr@10": round(-negative_mean, 4),
        "best_mean_of_those": round(-min(m for n, _, m, _ in scored if n == missed), 4),
    }


def paired(
    a: dict[str, float], b: dict[str, float], langs: dict[str, str], lang: str
) -> dict[str, Any]:
    """Reciprocal ranks `a` against `b`, question by question, in one language (or "all")."""
    diffs = [a[i] - b[i] for i in a if lang == "all" or langs[i] == lang]
    n = len(diffs)
    return {
        "n": n,
        "mrr_diff": round(statistics.fmean(diffs), 4) if n else 0.0,
        "se": round(statistics.stdev(diffs) / math.sqrt(n), 4) if n > 1 else 0.0,
        "better": sum(d > 0 for d in diffs),
        "worse": sum(d < 0 for d in diffs),
    }


def reproduction(corpora: dict[str, Corpus], choice: dict[str, Any]) -> dict[str, Any]:
    """Whether fusion_model.json is `fusion_fit.SHIPPED` as fitted on its corpus's tuning half
    of these dumps, and whether SHIPPED is the recipe the cross-corpus rows chose."""
    from retrieval.search import fusion

    shipped = fusion.model.__wrapped__(fusion_fit.MODEL)
    on = shipped_fit_on()
    tuning = (
        corpora[on].tuning if on in corpora else [q for c in corpora.values() for q in c.tuning]
    )
    refit = fusion_fit.fit_recipe(fusion_fit.SHIPPED, tuning).parts["all"]
    chosen = next(r for r in RECIPES if r.name == choice["recipe"])
    weights = max(abs(a - b) for a, b in zip(shipped.weights, refit["weights"], strict=True))
    return {
        "shipped_is_the_choice": (chosen.monotone, chosen.keyword_gate(), chosen.by_language)
        == (fusion_fit.SHIPPED.monotone, shipped.gate, False)
        and not chosen.extra,
        "max_weight_difference": round(float(weights), 6),
        "same_depth": refit["depth"] == shipped.depth,
        "reproduced": float(weights) < 1e-5 and refit["depth"] == shipped.depth,
    }


# --- tables --------------------------------------------------------------------------------------

BLOCK_TITLES = {
    "in-corpus": "in-corpus: fitted on this corpus's tuning half, measured on its held-out half",
    "cross-corpus": "cross-corpus: fitted on the other corpus's tuning half, every question here",
    BOTH: "fitted on both corpora's tuning halves, measured on this corpus's held-out half",
}


def table(rows: dict[str, Any], systems: Sequence[str], groups: Sequence[str]) -> str:
    some = next(iter(rows.values()))
    header = ["system"] + [f"{g} ({some[g]['n']})" for g in groups] + ["en keyword drop"]
    lines: list[list[Any]] = [header]
    for system in systems:
        if system not in rows:
            continue
        figs, drop = rows[system], rows[system]["keyword_drop"]
        lines.append(
            [system]
            + [
                f"{figs[g]['mrr@10']:.3f} ({figs[g]['hit@10']:.2f})" if figs[g]["n"] else "-"
                for g in groups
            ]
            + [f"{drop['dropped']}/{drop['n']} ({drop['rate']:.1%})"]
        )
    return markdown(lines)


def bars_table(
    verdicts: dict[str, dict[str, Any]],
    corpora: Sequence[str],
    systems: Sequence[str] | None = None,
) -> str:
    if systems is None:
        systems = [r.name for r in RECIPES] + ["convex, weight fitted", *FIXED[2:]]
    lines: list[list[Any]] = [["system", *(f"{c} MRR@10" for c in corpora), "bars missed"]]
    for system in systems:
        v = verdicts.get(system, {})
        missed = "; ".join(
            f"{c}: {', '.join(v[c]['missed'])}" for c in corpora if v.get(c, {}).get("missed")
        )
        figures_ = [f"{v[c]['mrr@10']:.3f}" if c in v else "-" for c in corpora]
        lines.append([system, *figures_, missed or "none"])
    return markdown(lines)


def print_blocks(
    results: dict[str, Any],
    corpora: Sequence[str],
    shown: Sequence[str],
    fixed_names: Sequence[str],
    fitted_names: Sequence[str],
) -> None:
    """Each corpus's blocks (the `shown` systems, per kind and language) and its keyword-style
    set (`fixed_names` as they are, `fitted_names` fitted on each corpus)."""
    for name in corpora:
        for block in BLOCKS:
            print(f"\n{name}, {BLOCK_TITLES[block]}: MRR@10 (hit@10)\n")
            print(table(results[name][block], shown, (*KINDS, *LANGS)))
        if "keyword-style" in results[name]:
            listed = [*fixed_names]
            listed += [f"{s} (fitted on {n})" for s in fitted_names for n in corpora]
            print(f"\n{name}, keyword-style set (no fit read it): MRR@10 (hit@10)\n")
            print(table(results[name]["keyword-style"], listed, LANGS))


def paired_against(
    results: dict[str, Any],
    corpora: dict[str, Corpus],
    names: Sequence[str],
    blocks: Sequence[str] = ("cross-corpus",),
) -> dict[str, Any]:
    """Each of `names[1:]` against `names[0]`, question by question (`paired`), per corpus,
    block and language; printed as they come."""
    comparisons = {}
    for corpus in corpora:
        langs = {q["id"]: q["lang"] for q in corpora[corpus].questions}
        for block in blocks:
            rows = results[corpus][block]
            for lang in ("en", "zh", "all"):
                for system in names[1:]:
                    what = f"{corpus} {block} {lang}: {system} vs {names[0]}"
                    comparisons[what] = paired(
                        rows[system]["rr"], rows[names[0]]["rr"], langs, lang
                    )
                    print(f"  {what}: {comparisons[what]}")
    return comparisons


def stored(results: dict[str, Any]) -> dict[str, Any]:
    """`run`'s results as a summary stores them (without each question's reciprocal rank)."""
    return {
        name: {
            block: {s: {k: v for k, v in f.items() if k != "rr"} for s, f in rows.items()}
            for block, rows in blocks.items()
        }
        for name, blocks in results.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--first", type=Path, default=FIRST[1], help="corpus 1's per-leg dump")
    parser.add_argument("--second", type=Path, default=SECOND[1], help="corpus 2's per-leg dump")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--all", action="store_true", help="print every recipe's rows")
    a = parser.parse_args(argv)
    sys.path.insert(0, str(common.ROOT))
    started = time.perf_counter()
    corpora = {c.name: c for c in (load(FIRST[0], a.first), load(SECOND[0], a.second))}
    for c in corpora.values():
        print(
            f"[cross] {c.name}: {len(c.questions)} natural questions ({len(c.tuning)} tuning, "
            f"{len(c.heldout)} held-out), {len(c.keyword_style)} keyword-style",
            flush=True,
        )
    results = run(corpora)
    verdicts = bars(results)
    choice = choose(verdicts)
    chosen = choice["recipe"]
    shown = list(dict.fromkeys([*MAIN, chosen, *([r.name for r in RECIPES] if a.all else [])]))
    print_blocks(results, list(corpora), shown, [*FIXED, "shipped"], shown[len(FIXED) :])
    print("\nthe bars on the cross-corpus rows (each measured on the corpus it never saw):\n")
    print(bars_table(verdicts, list(corpora)))
    print(f"\n[cross] chosen by the cross-corpus rows: {choice}")
    comparisons = {}
    for corpus in corpora:
        rows = results[corpus]["cross-corpus"]
        langs = {q["id"]: q["lang"] for q in corpora[corpus].questions}
        for lang in ("en", "zh", "all"):
            for leg in ("keyword", "vector"):
                what = f"{corpus} {lang}: chosen vs {leg}"
                comparisons[what] = paired(rows[chosen]["rr"], rows[leg]["rr"], langs, lang)
                print(f"  {what}: {comparisons[what]}")
    check = reproduction(corpora, choice)
    print(f"[cross] fusion_model.json against the choice and a refit: {check}")
    if not check["reproduced"] or not check["shipped_is_the_choice"]:
        print(
            "[cross] NOTE: fusion_model.json is not what these dumps choose and fit: run "
            "`python -m bench.quality.fusion_fit` (and set fusion_fit.SHIPPED to the choice)"
        )
    summary = {
        "id": "B8 cross-corpus",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "corpora": {
            n: {"natural": len(c.questions), "tuning": len(c.tuning), "dump": str(p)}
            for (n, c), p in zip(corpora.items(), (a.first, a.second), strict=True)
        },
        "recipes": [vars(r) for r in RECIPES],
        "shipped_fitted_on": shipped_fit_on(),
        "results": stored(results),
        "bars": verdicts,
        "choice": choice,
        "paired": comparisons,
        "reproduction": check,
        "run_s": round(time.perf_counter() - started, 1),
    }
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(summary, indent=1, ensure_ascii=False, default=str) + "\n")
    print(f"\n[cross] took {summary['run_s']}s; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
