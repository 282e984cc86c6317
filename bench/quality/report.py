"""B8's report: the tables it prints and the targets it checks."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from bench import common
from bench.quality.metrics import (
    LANGS,
)

RESULTS = common.RESULTS / "quality.json"
DETAILS = common.RESULTS / "quality-details.json"


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


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def print_report(summary: dict[str, Any]) -> None:
    metrics, lat, ing = summary["metrics"], summary["latency"], summary["ingest"]
    prov = summary["provider"]
    print(
        f"\n== B8 retrieval quality ({prov['provider']} {prov['model']} {prov['dimensions']}-d; "
        f"{summary['corpus']['documents']} documents, {ing['chunks']} chunks, "
        f"{summary['corpus']['questions']} questions {summary['corpus']['questions_by_lang']}) =="
    )
    print(
        f"\ningest: {ing['live']} live, {ing['failed']} failed of {ing['documents']}; "
        f"{ing['chunks']} chunks in {ing['ingest_s']} s = {ing['chunks_per_s']} chunks/s\n"
    )
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
    print(markdown(rows))
    vector_p95 = lat.get("canon vector", {}).get("p95_ms") or float("nan")
    lrows: list[list[Any]] = [["system", "p50 ms", "p95 ms", "p95 / canon vector p95"]]
    for name, v in lat.items():
        lrows.append([name, v["p50_ms"], v["p95_ms"], common.ratio(v["p95_ms"], vector_p95)])
    print()
    print(markdown(lrows))
    t = summary["targets"]
    print()
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
    print(f"\n[B8] run took {summary['run_s']} s; wrote {RESULTS} and {DETAILS}")
    sys.stdout.flush()
