"""B8CAL: how many of a knowledge base's own questions it takes for a calibration to beat the
shipped fusion there (issue 39, item 6).

    python -m bench.quality.calibration          # after `python -m bench.quality2` (its dump)

No database: it reads B8C2's per-leg dump (`bench/results/quality2-legs.json`: the second
corpus, which the shipped parameters never saw) and calibrates with the product's own code
(`retrieval.search.fusion_fitting.calibrate`: the shipped model refitted toward its own
weights, the strength chosen by cross-validation, the default kept unless the held-out folds
beat it by more than noise) from random draws of the corpus's tuning half at each size, every
draw measured on the held-out half (MRR@10 of the documents, `bench.quality.metrics`) against
the shipped default. Each question's legs are read at the shipped depth from the dump, and its
features are `fusion.learned_features`, as a calibration in the product computes them from
the search service's legs (`evaluation.calibration`). Writes
bench/results/quality-calibration.json and prints the table docs/BENCHMARKS.md quotes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.quality import fusion_fit
from bench.quality.metrics import reciprocal_rank
from bench.quality.report import markdown

DUMP = common.RESULTS / "quality2-legs.json"
OUT = common.RESULTS / "quality-calibration.json"
SIZES = (5, 10, 20, 40)  # and the whole tuning half
DRAWS = 20
SEED = 39


def examples(path: Path) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """The dump's natural questions as the product's examples (tuning half, held-out half),
    their legs at the shipped depth; for a dump of a version with the English list (its
    questions hold `english`, `bench.quality.legs`), with the list's candidates and
    ENGLISH_FEATURES too, at the three lists' depth, as `fusion_fitting.example_of_hits` makes
    them in the product."""
    from retrieval.search import fusion, fusion_fitting

    dump = json.loads(path.read_text(encoding="utf-8"))
    chunks = int(dump["about"]["chunks"])
    three = any("english" in q for q in dump["questions"])
    depth = (fusion.english_model() if three else fusion.model()).depth
    halves: dict[str, list[Any]] = {"tuning": [], "heldout": []}
    for q in dump["questions"]:
        if q["set"] != "natural":
            continue
        vector, keyword, query_cjk, bound = fusion_fit._legs(q, depth, chunks)
        english = q.get("english", [])[:depth]
        docs = {
            e["chunk"]: e["doc"]
            for k, leg in q.items()
            if k in ("vector", f"keyword_{depth}", "keyword", "english")
            for e in leg
        }
        example = fusion_fitting.example_of_legs(
            id=q["id"],
            query_cjk=query_cjk,
            vector=vector,
            keyword=keyword,
            keyword_bound=bound,
            documents=docs,
            answers=q["answers"],
            english=[(e["chunk"], e["cos"]) for e in english] if three else None,
            en_cos={int(c): v for c, v in q.get("en_cos", {}).items()},
        )
        halves[q["split"]].append(example)
    return halves["tuning"], halves["heldout"], dump["about"]


def served(example: Any, model: Any = None) -> Any:
    """The model search ranks `example`'s question by: `model` (a calibration; None: the
    shipped default, for a version with the English list, an example of three lists, the three
    lists' model), except that a question in Chinese on such a version is ranked by the two
    legs' default whatever was calibrated (`fusion.model_for`)."""
    from retrieval.search import fusion

    three = example.x.shape[1] > len(fusion.FEATURES)
    if three and example.query_cjk >= fusion.ZH_SHARE:
        return fusion.model()
    if model is not None:
        return model
    return fusion.english_model() if three else fusion.model()


def mrr(model: Any, questions: Sequence[Any]) -> float:
    """MRR@10 of `questions` as search ranks them with `model` (None: no calibration)."""
    from retrieval.search.fusion_fitting import ranked_documents

    return statistics.fmean(
        reciprocal_rank(ranked_documents(e, served(e, model)), e.answers) for e in questions
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dump", type=Path, default=DUMP)
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--out", type=Path, default=OUT)
    a = parser.parse_args(argv)
    sys.path.insert(0, str(common.ROOT))
    if not a.dump.exists():
        raise SystemExit(f"no per-leg dump {a.dump}: run `python -m bench.quality2` first")
    from retrieval.search import fusion
    from retrieval.search.fusion_fitting import calibrate

    started = time.perf_counter()
    tuning, heldout, about = examples(a.dump)
    three = bool(tuning) and tuning[0].x.shape[1] > len(fusion.FEATURES)
    # What a calibration refits: the three lists' model for a version with the English list,
    # measured against what search serves (its Chinese questions by the two legs' model).
    prior = fusion.english_model() if three else fusion.model()
    base = mrr(None, heldout)
    print(
        f"[cal] {len(tuning)} tuning and {len(heldout)} held-out questions; the default's "
        f"held-out MRR@10 {base:.4f}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    rng = random.Random(SEED)
    for size in (*SIZES, len(tuning)):
        draws = 1 if size >= len(tuning) else a.draws
        outcomes: list[dict[str, Any]] = []
        for _ in range(draws):
            drawn = rng.sample(tuning, size) if draws > 1 else list(tuning)
            result = calibrate(drawn, prior, default=fusion.model() if three else None)
            outcomes.append(
                {
                    "mrr@10": float(mrr(result.model, heldout)),
                    "l2": result.l2,
                    "teaching": result.teaching,
                }
            )
        scores = [float(o["mrr@10"]) for o in outcomes]
        gains = [m - base for m in scores]
        row = {
            "size": size,
            "draws": draws,
            "mrr@10": round(statistics.fmean(scores), 4),
            "gain": round(statistics.fmean(gains), 4),
            "worst_gain": round(min(gains), 4),
            "best_gain": round(max(gains), 4),
            "better": sum(g > 1e-9 for g in gains),
            "same": sum(abs(g) <= 1e-9 for g in gains),
            "worse": sum(g < -1e-9 for g in gains),
            "kept_default": sum(o["l2"] is None for o in outcomes),
            "l2": dict(Counter("default" if o["l2"] is None else f"{o['l2']:g}" for o in outcomes)),
        }
        rows.append(row)
        print(f"[cal] {row}", flush=True)
    table = [
        [
            "questions calibrated from",
            "draws",
            "held-out MRR@10 (mean)",
            "vs default",
            "worst draw",
            "better / same / worse",
            "default kept",
        ]
    ]
    for row in rows:
        table.append(
            [
                row["size"],
                row["draws"],
                f"{row['mrr@10']:.3f}",
                f"{row['gain']:+.3f}",
                f"{row['worst_gain']:+.3f}",
                f"{row['better']} / {row['same']} / {row['worse']}",
                f"{row['kept_default']}/{row['draws']}",
            ]
        )
    print(f"\nthe default's held-out MRR@10: {base:.3f} ({len(heldout)} questions)\n")
    print(markdown(table))
    summary = {
        "id": "B8CAL",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "dump": str(a.dump),
        "chunks": about.get("chunks"),
        "tuning": len(tuning),
        "heldout": len(heldout),
        "default_mrr@10": round(base, 4),
        "english_list": three,
        "rows": rows,
        "run_s": round(time.perf_counter() - started, 1),
    }
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(f"\n[cal] took {summary['run_s']}s; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
