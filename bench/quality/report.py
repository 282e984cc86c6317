"""B8's report: the tables it prints and the targets it checks."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from bench import common
from bench.quality.metrics import KINDS, LANGS, SPLITS

RESULTS = common.RESULTS / "quality.json"
DETAILS = common.RESULTS / "quality-details.json"
LEGS = common.RESULTS / "quality-legs.json"


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3f}"
    return str(x)


def markdown(rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def targets(metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Canon keyword >= bm25s, and Canon hybrid >= every contender, on MRR@10 per language; and
    hybrid against the better of Canon's own legs."""
    out: dict[str, Any] = {"keyword_ge_bm25s": {}, "hybrid_ge_every_contender": {}, "legs": {}}
    contenders = [n for n in metrics if not n.startswith("canon ")]
    for lang in LANGS:
        if not metrics["canon hybrid"][lang].get("n"):
            continue

        def mrr(name: str, lang: str = lang) -> float:
            return float(metrics[name][lang]["mrr@10"])

        if "bm25s" in metrics:
            out["keyword_ge_bm25s"][lang] = {
                "canon_keyword": mrr("canon keyword"),
                "bm25s": mrr("bm25s"),
                "met": mrr("canon keyword") >= mrr("bm25s"),
            }
        best = max(contenders, key=mrr) if contenders else None
        out["hybrid_ge_every_contender"][lang] = {
            "canon_hybrid": mrr("canon hybrid"),
            "best_contender": best,
            "best_contender_mrr": mrr(best) if best else None,
            "met": all(mrr("canon hybrid") >= mrr(c) for c in contenders),
            "below": [c for c in contenders if mrr("canon hybrid") < mrr(c)],
        }
        leg = max(("canon vector", "canon keyword"), key=mrr)
        out["legs"][lang] = {
            "hybrid": mrr("canon hybrid"),
            "best_leg": leg,
            "best_leg_mrr": mrr(leg),
            "hybrid_minus_best_leg": round(mrr("canon hybrid") - mrr(leg), 4),
        }
    return out


def natural_targets(natural: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Issue 24's checks per split, on MRR@10: Canon hybrid against the better of Canon's own
    legs and against every contender, overall and per language; on the cross-lingual kinds,
    hybrid's hit@10 against the vector leg's."""
    out: dict[str, Any] = {}
    if "canon hybrid" not in natural:
        return out
    contenders = [n for n in natural if not n.startswith("canon ")]
    for split in SPLITS:
        rows: dict[str, Any] = {}
        for group in LANGS:
            if not natural["canon hybrid"][split][group].get("n"):
                continue

            def mrr(name: str, group: str = group, split: str = split) -> float:
                return float(natural[name][split][group]["mrr@10"])

            hybrid = mrr("canon hybrid")
            leg = max(("canon vector", "canon keyword"), key=mrr)
            best = max(contenders, key=mrr) if contenders else None
            rows[group] = {
                "hybrid": hybrid,
                "best_leg": leg,
                "best_leg_mrr": mrr(leg),
                "hybrid_ge_best_leg": hybrid >= mrr(leg),
                "best_contender": best,
                "best_contender_mrr": mrr(best) if best else None,
                "hybrid_ge_every_contender": all(hybrid >= mrr(c) for c in contenders),
            }
        for kind in ("zh-to-en", "en-to-zh"):
            figs = natural["canon hybrid"][split][kind]
            if figs.get("n"):
                vector = natural["canon vector"][split][kind]["hit@10"]
                rows[kind] = {
                    "hybrid_hit@10": figs["hit@10"],
                    "vector_hit@10": vector,
                    "hybrid_ge_vector_hit@10": figs["hit@10"] >= vector,
                }
        out[split] = rows
    return out


def natural_targets_table(targets: dict[str, Any]) -> str:
    rows: list[list[Any]] = [["split", "group", "check", "Canon hybrid", "against", "verdict"]]
    for split, groups in targets.items():
        for group, v in groups.items():
            if "best_leg" in v:
                rows.append(
                    [
                        split,
                        group,
                        "hybrid >= best leg (MRR@10)",
                        v["hybrid"],
                        f"{v['best_leg']} {v['best_leg_mrr']:.3f}",
                        "met" if v["hybrid_ge_best_leg"] else "MISSED",
                    ]
                )
                if v["best_contender"]:
                    rows.append(
                        [
                            split,
                            group,
                            "hybrid >= every contender (MRR@10)",
                            v["hybrid"],
                            f"best: {v['best_contender']} {v['best_contender_mrr']:.3f}",
                            "met" if v["hybrid_ge_every_contender"] else "MISSED",
                        ]
                    )
            else:
                rows.append(
                    [
                        split,
                        group,
                        "hybrid hit@10 >= vector hit@10",
                        v["hybrid_hit@10"],
                        f"canon vector {v['vector_hit@10']:.3f}",
                        "met" if v["hybrid_ge_vector_hit@10"] else "MISSED",
                    ]
                )
    return markdown(rows)


def keyword_table(metrics: dict[str, dict[str, Any]]) -> str:
    """Per system: hit@1/5/10 and MRR@10 per language (the keyword-style set)."""
    header = ["system"]
    for lang in LANGS:
        header += [f"{lang} hit@1", f"{lang} hit@5", f"{lang} hit@10", f"{lang} MRR@10"]
    rows: list[list[Any]] = [header]
    for name, m in metrics.items():
        row: list[Any] = [name]
        for lang in LANGS:
            if m[lang].get("n"):
                row += [m[lang]["hit@1"], m[lang]["hit@5"], m[lang]["hit@10"], m[lang]["mrr@10"]]
            else:
                row += ["-"] * 4
        rows.append(row)
    return markdown(rows)


SPLIT_TITLES = {"tuning": "tuning half", "heldout": "held-out half (the figure that counts)"}


def natural_tables(natural: dict[str, dict[str, Any]], *, full: bool = False) -> str:
    """The natural set per split: MRR@10 (hit@10) per kind and language for every system; with
    `full`, also n, hit@1, hit@5, hit@10 and MRR@10 per kind x system."""
    out: list[str] = []
    groups = (*KINDS, *LANGS)
    for split in SPLITS:
        some = next(iter(natural.values()))[split]
        header = ["system"] + [f"{g} (n={some[g]['n']})" for g in groups]
        rows: list[list[Any]] = [header]
        for name, by_split in natural.items():
            figs = by_split[split]
            rows.append(
                [name]
                + [
                    f"{figs[g]['mrr@10']:.3f} ({figs[g]['hit@10']:.2f})" if figs[g]["n"] else "-"
                    for g in groups
                ]
            )
        out.append(f"natural set, {SPLIT_TITLES[split]}: MRR@10 (hit@10)\n\n{markdown(rows)}")
        if full:
            frows: list[list[Any]] = [
                ["group", "system", "n", "hit@1", "hit@5", "hit@10", "MRR@10"]
            ]
            for g in groups:
                for name, by_split in natural.items():
                    f = by_split[split][g]
                    if f["n"]:
                        frows.append(
                            [g, name, f["n"], f["hit@1"], f["hit@5"], f["hit@10"], f["mrr@10"]]
                        )
            out.append(f"natural set, {SPLIT_TITLES[split]}, in full\n\n{markdown(frows)}")
    return "\n\n".join(out)


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def print_report(
    summary: dict[str, Any], written: Sequence[Any] = (RESULTS, DETAILS, LEGS)
) -> None:
    """The run's tables; `written`: the files it wrote (results, details, legs)."""
    metrics, lat, ing = summary["metrics"], summary["latency"], summary["ingest"]
    prov = summary["provider"]
    print(
        f"\n== B8 retrieval quality ({prov['provider']} {prov['model']} {prov['dimensions']}-d; "
        f"{summary['corpus']['documents']} documents, {ing['chunks']} chunks, "
        f"{summary['corpus']['questions']} questions {summary['corpus']['questions_by_lang']}) =="
    )
    timing = (
        "reused from an earlier run (--reuse), not timed"
        if ing.get("reused")
        else f"in {ing['ingest_s']} s = {ing['chunks_per_s']} chunks/s"
    )
    print(
        f"\ningest: {ing['live']} live, {ing['failed']} failed of {ing['documents']}; "
        f"{ing['chunks']} chunks {timing}\n"
    )
    if summary["corpus"]["questions_by_set"].get("keyword"):
        print("keyword-style set (questions.jsonl), per language:\n")
        print(keyword_table(metrics))
    if summary.get("natural"):
        print()
        print(natural_tables(summary["natural"], full=True))
        print("\nnatural set, issue 24's checks:\n")
        print(natural_targets_table(summary["natural_targets"]))
    print()
    vector_p95 = lat.get("canon vector", {}).get("p95_ms") or float("nan")
    lrows: list[list[Any]] = [["system", "p50 ms", "p95 ms", "p95 / canon vector p95"]]
    for name, v in lat.items():
        lrows.append([name, v["p50_ms"], v["p95_ms"], common.ratio(v["p95_ms"], vector_p95)])
    print()
    print(markdown(lrows))
    t = summary["targets"]
    if not summary["corpus"]["questions_by_set"].get("keyword"):
        print(f"\n[B8] run took {summary['run_s']} s; wrote " + ", ".join(map(str, written)))
        sys.stdout.flush()
        return
    print("\nkeyword-style set, checks:\n")
    trows: list[list[Any]] = [["lang", "check", "Canon", "against", "verdict"]]
    for lang, v in t["legs"].items():
        trows.append(
            [
                lang,
                "hybrid vs best leg (MRR@10)",
                v["hybrid"],
                f"{v['best_leg']} {v['best_leg_mrr']:.3f}",
                f"{v['hybrid_minus_best_leg']:+.3f}",
            ]
        )
    for lang, v in t["keyword_ge_bm25s"].items():
        trows.append(
            [
                lang,
                "keyword >= bm25s (MRR@10)",
                v["canon_keyword"],
                f"bm25s {v['bm25s']:.3f}",
                "met" if v["met"] else "MISSED",
            ]
        )
    for lang, v in t["hybrid_ge_every_contender"].items():
        trows.append(
            [
                lang,
                "hybrid >= every contender (MRR@10)",
                v["canon_hybrid"],
                f"best: {v['best_contender']} {v['best_contender_mrr']:.3f}",
                "met" if v["met"] else "MISSED (below: " + ", ".join(v["below"]) + ")",
            ]
        )
    print(markdown(trows))
    results, details, legs = written
    print(f"\n[B8] run took {summary['run_s']} s; wrote {results}, {details} and {legs}")
    sys.stdout.flush()
