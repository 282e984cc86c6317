"""B8 with its corpus split over two knowledge bases: how `search_several` ranks (issue 25, item 3).

    python -m bench.quality.several_kbs [--reuse] [--db canon_xkb] [--limit-docs N]
                                        [--limit-questions N] [--json FILE]

What it measures. `retrieval.search.several.search_several` merges the knowledge bases' lists by
score where the scores measure the same thing and by reciprocal rank elsewhere
(`several.merge_for`: vector search by score over one embedding model; keyword search by BM25
weighed with the statistics of all the versions together; hybrid by the learned fusion's
probability). This bench asks B8's questions (`natural.jsonl`, per split of `splits.json`, and
the keyword-style `questions.jsonl`) in vector, keyword and hybrid mode, top 10, of:

- **one KB**: one knowledge base holding the whole corpus, searched with `search` exactly as B8
  does (`contenders.canon_ranker`): B8's own figures, measured in the same run;
- **one model**: the same corpus split by document over two knowledge bases, A and B, both on
  the default model (`use`, use-multilingual-v3, 512 dimensions), searched with
  `search_several` in one request;
- **two models**: A again, with B's documents in a knowledge base on a second model
  (`--other-provider`, by default Canon's `hash` embedding: feature-hashed words and trigrams,
  256 dimensions; its cosines sit on another scale than USE's and it ranks worse, which is
  what a knowledge base left on an older or cheaper model looks like).

Each pair is searched once per merge (`several.MERGES`, forced with `merge=`): **by score**
and **by rank** (reciprocal rank, 1 / (60 + rank)). Every list is Canon's own answer for that
merge; the default call (`merge=None`) is timed and its `merged_by` recorded, and the table
marks the merge Canon took. The keyword lists of the two pairs are the same: BM25 does not
read the model.

The split: a document goes to knowledge base A when sha256("canon-b8-several-kbs:" + key) is
even, else to B (693 / 732 of B8's 1,425 documents). The request lists A before B, which breaks
reciprocal-rank ties (A's first hit before B's first hit).

Figures: B8's own definitions (`bench.quality.metrics`): MRR@10 and hit@10 over the distinct
documents of the first 10 hits. `metrics` has no interval, so the difference of each two-KB
setting against one KB gets a paired bootstrap here (2,000 resamples of the questions, seeded,
as `bench.quality.embedders.paired` does): the mean difference and its 95 % interval.

How it is built. Every document goes through Canon's real path as B8's (`ingest.ingest`: the
API's upload service -> outbox -> relay -> a real Celery worker -> switch) into a database of its
own (`canon_xkb` unless `--db`, dropped and recreated unless `--reuse`; Redis db 7), one tenant,
four knowledge bases: `xkb-whole` (the whole corpus, ingested first), `xkb-a` and `xkb-b` (the
halves) and `xkb-b-other` (B's documents on the second model). The embedding cache is per
database, so the halves' chunks reuse the whole one's vectors (the same text and heading path
gives the same content hash): the second ingest costs parsing, chunking and writing, not the
model, and both sides hold the same vectors. `ingest` numbers its idempotency keys per call
(b8-0, b8-1, ...), so this bench deletes the tenant's upload idempotency records before each
knowledge base's ingest. The whole corpus is used (no subset): on this 2-core machine, nothing
else running, the whole knowledge base took 358 s (49,229 chunks), the halves 60 s and 64 s
(23,081 and 26,148 chunks, from the cache), B on the hash model 75 s, the questions 246 s:
14 minutes in all (2026-12-04). `--reuse` keeps the database of an earlier run and ingests
only a knowledge base that is not there yet. `--limit-docs` (B8's own selection: the answers'
documents first) is for trying it.

Read with care: vector search over two halves is planned like vector search over one
knowledge base since kb migration 0021 (extended statistics; before it, each half was sorted
exactly, so the one-model vector figures compared exact search with the whole knowledge base's
HNSW walk). Both halves now walk their HNSW index, as the whole does.

Prints one table per question set: setting x mode, n, MRR@10, hit@10 and the differences against
one KB; `--json FILE` writes every figure (per split, kind and language too) and the latencies.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.quality import splits
from bench.quality.corpus import CORPUS, Corpus, ensure_corpus, load_corpus
from bench.quality.ingest import ingest, principal_for, settled_summary, setup
from bench.quality.metrics import TOP_K, hit_at, reciprocal_rank, summarize, summarize_natural
from bench.quality.report import markdown

DB_NAME = "canon_xkb"
REDIS_DB = 7
TENANT_SLUG = "xkb"
WHOLE, HALF_A, HALF_B = "xkb-whole", "xkb-a", "xkb-b"
# Half B again, on the second embedding model (--other-*): the two-model pair is A + this.
HALF_B_OTHER = "xkb-b-other"
SPLIT_SEED = "canon-b8-several-kbs"
MODES = ("vector", "keyword", "hybrid")
BOOTSTRAP = 2000
BOOTSTRAP_SEED = 25

# The settings compared, in report order: one KB, then each pair of halves merged each way
# (`several.MERGES`). "one model": A + B, both on --provider; "two models": A + B on --other-*.
ONE = "one KB"
PAIRS = ("one model", "two models")
HOWS = ("score", "rank")  # several.MERGES
SETTINGS = (ONE, *(f"{pair}, by {how}" for pair in PAIRS for how in HOWS))
# The merge Canon takes by default, per (pair, mode), as its answers said (`merged_by`).
CANON: dict[tuple[str, str], str] = {}


def half(key: str) -> str:
    """The knowledge base a document goes to: A when sha256(seed:key) is even, else B."""
    digest = hashlib.sha256(f"{SPLIT_SEED}:{key}".encode()).digest()
    return HALF_A if digest[-1] % 2 == 0 else HALF_B


def subset(corpus: Corpus, slug: str) -> Corpus:
    """The corpus of one half: its documents, the same questions (scored on the whole)."""
    side = HALF_B if slug == HALF_B_OTHER else slug
    docs = (
        corpus.documents
        if slug == WHOLE
        else [d for d in corpus.documents if half(d["key"]) == side]
    )
    return Corpus(directory=corpus.directory, documents=docs, questions=corpus.questions)


def canon_setting(pair: str, mode: str) -> str:
    """The setting Canon itself took for `pair` in `mode` (`several.merge_for`)."""
    return f"{pair}, by {CANON.get((pair, mode), '?')}"


# --- building ----------------------------------------------------------------------------------


SLUGS = (WHOLE, HALF_A, HALF_B, HALF_B_OTHER)


def knowledge_bases(corpus: Corpus, a: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The four knowledge bases, ingested (or, with --reuse, found) in order: whole, A, B and
    B on the other model.
    Returns them by slug and each one's ingest figures."""
    from kb.models import Build, Document, KnowledgeBase, Tenant
    from kb.services.index_versions import knowledge_base_create
    from retrieval.models import IdempotencyRecord

    tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "Several KBs"})
    model = {
        slug: (a.other_provider, a.other_model, a.other_dimensions)
        if slug == HALF_B_OTHER
        else (a.provider, a.model, a.dimensions)
        for slug in SLUGS
    }
    kbs: dict[str, Any] = {}
    summaries: dict[str, Any] = {}
    missing = [
        slug
        for slug in SLUGS
        if not KnowledgeBase.objects.filter(tenant=tenant, slug=slug).exists()
    ]
    worker = common.Worker(concurrency=a.concurrency) if missing else None

    def alive() -> bool:
        return worker is not None and worker.proc.poll() is None

    try:
        for slug in SLUGS:
            part = subset(corpus, slug)
            wanted = model[slug]
            kb = KnowledgeBase.objects.filter(tenant=tenant, slug=slug).first()
            if kb is not None:
                version = kb.active_index_version
                if (
                    version is None
                    or (version.provider, version.model, version.dimensions) != wanted
                ):
                    raise SystemExit(
                        f"--reuse: {slug} in {a.db} is not on {wanted}; run without --reuse"
                    )
                open_builds = Build.objects.filter(
                    kb=kb, state__in=[Build.State.PENDING, Build.State.BUILDING]
                ).count()
                if open_builds or Document.objects.filter(kb=kb).count() != len(part.documents):
                    raise SystemExit(
                        f"--reuse: {slug} in {a.db} is incomplete; run without --reuse"
                    )
                summaries[slug] = settled_summary(part, kb)
                print(f"[xkb] --reuse: {slug} as an earlier run left it", flush=True)
            else:
                kb = knowledge_base_create(
                    tenant=tenant,
                    name=slug,
                    slug=slug,
                    provider=wanted[0],
                    model=wanted[1],
                    dimensions=wanted[2],
                )
                kb.refresh_from_db()
                # ingest() numbers its idempotency keys b8-<i> per call; the records of the
                # knowledge base before would answer these uploads as replays.
                IdempotencyRecord.objects.filter(tenant_id=tenant.pk).delete()
                print(f"[xkb] ingesting {slug}: {len(part.documents)} documents", flush=True)
                summaries[slug] = ingest(part, kb, timeout=a.timeout, worker_alive=alive)
            s = summaries[slug]
            print(
                f"[xkb] {slug}: {s['live']}/{s['documents']} live, {s['failed']} failed, "
                f"{s['chunks']} chunks, ingest {s['ingest_s']} s ({s['chunks_per_s']} chunks/s)",
                flush=True,
            )
            kb.refresh_from_db()
            kbs[slug] = kb
    finally:
        if worker is not None:
            worker.stop()
    return kbs, summaries


def live_keys(kb: Any) -> set[str]:
    """The keys of the documents live in `kb`'s active version."""
    from kb.models import Publication

    return set(
        Publication.objects.filter(kb=kb, index_version=kb.active_index_version).values_list(
            "document__key", flat=True
        )
    )


# --- searching ---------------------------------------------------------------------------------


class TwoKbs:
    """`search_several` over two knowledge bases, once per merge (`several.MERGES`, forced):
    each list is Canon's own answer for that merge."""

    def __init__(self, pair: str, kbs: list[Any]) -> None:
        from retrieval.search import several

        self.pair = pair
        self.kbs = kbs
        self.principal = principal_for(kbs[0])
        self.several = several
        self.merged_by: dict[str, set[str]] = {m: set() for m in MODES}

    def __call__(self, query: str, mode: str) -> tuple[dict[str, list[str]], float]:
        """Document keys of the first TOP_K hits per merge, and the milliseconds the merge
        Canon takes by default (`merge=None`, its `merged_by` recorded) took."""
        lists: dict[str, list[str]] = {}
        took = 0.0
        for how in ("default", *self.several.MERGES):
            t0 = time.perf_counter()
            result = self.several.search_several(
                principal=self.principal,
                kbs=self.kbs,
                query=query,
                top_k=TOP_K,
                mode=mode,
                rerank=False,
                merge=None if how == "default" else how,
            )
            if how == "default":
                took = (time.perf_counter() - t0) * 1000
                self.merged_by[mode].add(str(result.merged_by))
                CANON[(self.pair, mode)] = str(result.merged_by)
                continue
            lists[f"{self.pair}, by {how}"] = [h.document_key for h in result.hits]
        return lists, took


def run_questions(
    questions: Sequence[dict[str, Any]], whole: Any, pairs: list[TwoKbs], *, warmup: int = 3
) -> tuple[dict[tuple[str, str], list[list[str]]], dict[str, dict[str, list[float]]]]:
    """Every question in every mode: one KB (B8's own search) and each pair (every merge).
    Returns the ranked document keys per (setting, mode), and latencies per mode."""
    from bench.quality.contenders import canon_ranker

    one = {m: canon_ranker(whole, m, {}) for m in MODES}
    for q in questions[:warmup]:
        for m in MODES:
            one[m](q["question"])
            for pair in pairs:
                pair(q["question"], m)
    ranked: dict[tuple[str, str], list[list[str]]] = {(s, m): [] for s in SETTINGS for m in MODES}
    latency: dict[str, dict[str, list[float]]] = {
        "one KB (search)": {m: [] for m in MODES},
        **{f"{pair.pair} (search_several)": {m: [] for m in MODES} for pair in pairs},
    }
    for i, q in enumerate(questions):
        for m in MODES:
            t0 = time.perf_counter()
            ranked[(ONE, m)].append(one[m](q["question"]))
            latency["one KB (search)"][m].append((time.perf_counter() - t0) * 1000)
            for pair in pairs:
                lists, took = pair(q["question"], m)
                latency[f"{pair.pair} (search_several)"][m].append(took)
                for name, keys in lists.items():
                    ranked[(name, m)].append(keys)
        if (i + 1) % 100 == 0:
            print(f"[xkb] {i + 1}/{len(questions)} questions", flush=True)
    return ranked, latency


# --- figures -----------------------------------------------------------------------------------


def paired(
    answers: Sequence[Sequence[str]], a: Sequence[Sequence[str]], b: Sequence[Sequence[str]]
) -> dict[str, Any]:
    """a minus b, question by question: MRR@10 and hit@10, each mean difference with a paired
    bootstrap 95 % interval (the same resamples for both), and how many questions a ranks
    better or worse."""
    rr = [
        reciprocal_rank(x, w) - reciprocal_rank(y, w) for w, x, y in zip(answers, a, b, strict=True)
    ]
    hit = [
        float(hit_at(x, w, TOP_K)) - float(hit_at(y, w, TOP_K))
        for w, x, y in zip(answers, a, b, strict=True)
    ]
    n = len(rr)
    if not n:
        return {"n": 0}
    rng = random.Random(BOOTSTRAP_SEED)
    rr_means, hit_means = [], []
    for _ in range(BOOTSTRAP):
        sample = rng.choices(range(n), k=n)
        rr_means.append(sum(rr[i] for i in sample) / n)
        hit_means.append(sum(hit[i] for i in sample) / n)
    lo, hi = int(0.025 * BOOTSTRAP), int(0.975 * BOOTSTRAP)
    rr_means.sort()
    hit_means.sort()
    return {
        "n": n,
        "mrr_diff": round(sum(rr) / n, 4),
        "mrr_ci95": [round(rr_means[lo], 4), round(rr_means[hi], 4)],
        "hit10_diff": round(sum(hit) / n, 4),
        "hit10_ci95": [round(hit_means[lo], 4), round(hit_means[hi], 4)],
        "better": sum(d > 0 for d in rr),
        "worse": sum(d < 0 for d in rr),
    }


def groups(questions: Sequence[dict[str, Any]]) -> dict[str, list[int]]:
    """Question indices per reported group: the natural set's held-out and tuning halves and
    the keyword-style set."""
    return {
        "natural held-out": [
            i for i, q in enumerate(questions) if q["set"] == "natural" and q["split"] == "heldout"
        ],
        "natural tuning": [
            i for i, q in enumerate(questions) if q["set"] == "natural" and q["split"] == "tuning"
        ],
        "keyword-style": [i for i, q in enumerate(questions) if q["set"] == "keyword"],
    }


def table(
    questions: Sequence[dict[str, Any]],
    ranked: dict[tuple[str, str], list[list[str]]],
    rows: list[int],
) -> tuple[str, dict[str, Any]]:
    """The markdown table of one group, and its figures."""
    answers = [questions[i]["answers"] for i in rows]
    out: dict[str, Any] = {}
    lines: list[list[Any]] = [
        [
            "setting",
            "mode",
            "n",
            "MRR@10",
            "hit@10",
            "ΔMRR@10 vs one KB [95% CI]",
            "Δhit@10 [95% CI]",
        ]
    ]
    for m in MODES:
        for setting in SETTINGS:
            lists = [ranked[(setting, m)][i] for i in rows]
            n = len(rows)
            mrr = sum(reciprocal_rank(r, w) for r, w in zip(lists, answers, strict=True)) / n
            hit = sum(hit_at(r, w, TOP_K) for r, w in zip(lists, answers, strict=True)) / n
            name = setting
            if setting != ONE:
                pair = setting.split(",")[0]
                name += " (Canon's)" if canon_setting(pair, m) == setting else ""
            entry: dict[str, Any] = {"n": n, "mrr@10": round(mrr, 4), "hit@10": round(hit, 4)}
            if setting == ONE:
                d_mrr = d_hit = "—"
            else:
                p = paired(answers, lists, [ranked[(ONE, m)][i] for i in rows])
                entry["vs_one_kb"] = p
                d_mrr = f"{p['mrr_diff']:+.3f} [{p['mrr_ci95'][0]:+.3f}, {p['mrr_ci95'][1]:+.3f}]"
                d_hit = (
                    f"{p['hit10_diff']:+.3f} [{p['hit10_ci95'][0]:+.3f}, {p['hit10_ci95'][1]:+.3f}]"
                )
            out[f"{setting} | {m}"] = entry
            lines.append([name, m, n, round(mrr, 3), round(hit, 3), d_mrr, d_hit])
    return markdown(lines), out


def full_figures(
    questions: Sequence[dict[str, Any]], ranked: dict[tuple[str, str], list[list[str]]]
) -> dict[str, Any]:
    """B8's own summaries of every (setting, mode): the natural set per split x kind and
    language, the keyword-style set per language."""
    rows = list(enumerate(questions))
    return {
        f"{s} | {m}": {
            "natural": summarize_natural(
                [
                    (q["split"], q["kind"], q["lang"], q["answers"], ranked[(s, m)][i])
                    for i, q in rows
                    if q["set"] == "natural"
                ]
            ),
            "keyword-style": summarize(
                [
                    (q["lang"], q["answers"], ranked[(s, m)][i])
                    for i, q in rows
                    if q["set"] == "keyword"
                ]
            ),
        }
        for s in SETTINGS
        for m in MODES
    }


def placement(questions: Sequence[dict[str, Any]], rows: list[int]) -> dict[str, int]:
    """Where a group's answers are: all in A, all in B, or some in each."""
    out = {"all in A": 0, "all in B": 0, "in both": 0}
    for i in rows:
        sides = {half(k) for k in questions[i]["answers"]}
        if sides == {HALF_A}:
            out["all in A"] += 1
        elif sides == {HALF_B}:
            out["all in B"] += 1
        else:
            out["in both"] += 1
    return out


# --- the run -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    from bench.quality.run import NATURAL, QUESTIONS, tag_natural

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--provider", default="use")
    parser.add_argument("--model", default="use-multilingual-v3")
    parser.add_argument("--dimensions", type=int, default=512)
    parser.add_argument("--other-provider", default="hash", help="half B's second model")
    parser.add_argument("--other-model", default="hash-v1")
    parser.add_argument("--other-dimensions", type=int, default=256)
    parser.add_argument("--db", default=DB_NAME, help="its own database, dropped and recreated")
    parser.add_argument("--reuse", action="store_true", help="keep the database of an earlier run")
    parser.add_argument("--redis-db", type=int, default=REDIS_DB)
    parser.add_argument("--limit-docs", type=int, default=None, help="for trying it out")
    parser.add_argument("--limit-questions", type=int, default=None, help="per question set")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=3600.0, help="ingest timeout, seconds")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    a = parser.parse_args(argv)
    if a.db in ("canon", "canon_bench", "canon_quality") or a.db.startswith("test_"):
        parser.error(f"--db {a.db} belongs to someone else")

    wall = time.perf_counter()
    ensure_corpus(CORPUS)
    corpus = load_corpus(
        CORPUS,
        {"keyword": QUESTIONS, "natural": NATURAL},
        limit_docs=a.limit_docs,
        limit_questions=a.limit_questions,
    )
    tag_natural(corpus.questions, splits.load())
    sizes = {slug: len(subset(corpus, slug).documents) for slug in SLUGS}
    print(f"[xkb] {len(corpus.questions)} questions; documents {sizes}", flush=True)

    setup(a.db, a.redis_db, fresh=not a.reuse)
    from django.conf import settings

    if settings.RERANK_URL:
        raise SystemExit("B8 measures without a reranker: unset CANON_RERANK_URL")
    t0 = time.perf_counter()
    kbs, ingest_summary = knowledge_bases(corpus, a)
    build_s = round(time.perf_counter() - t0, 1)

    # Ask only what both sides can answer: an answer document live in the whole KB and in its half.
    whole_live = live_keys(kbs[WHOLE])
    halves_live = live_keys(kbs[HALF_A]) | live_keys(kbs[HALF_B])
    others_live = live_keys(kbs[HALF_A]) | live_keys(kbs[HALF_B_OTHER])
    both_live = whole_live & halves_live & others_live
    asked = [
        {**q, "answers": [k for k in q["answers"] if k in both_live]}
        for q in corpus.questions
        if any(k in both_live for k in q["answers"])
    ]
    left_out = len(corpus.questions) - len(asked)
    if left_out:
        print(f"[xkb] {left_out} questions left out: no answer document live on both sides")

    pairs = [
        TwoKbs("one model", [kbs[HALF_A], kbs[HALF_B]]),
        TwoKbs("two models", [kbs[HALF_A], kbs[HALF_B_OTHER]]),
    ]
    t0 = time.perf_counter()
    ranked, latency = run_questions(asked, kbs[WHOLE], pairs)
    queries_s = round(time.perf_counter() - t0, 1)

    tables: dict[str, Any] = {}
    for title, rows in groups(asked).items():
        text, figures = table(asked, ranked, rows)
        tables[title] = {"placement": placement(asked, rows), "figures": figures}
        print(f"\n{title} ({len(rows)} questions; answers {placement(asked, rows)})\n")
        print(text)
    lat = {
        who: {
            m: {
                "p50_ms": round(common.percentile(v, 50), 1),
                "p95_ms": round(common.percentile(v, 95), 1),
            }
            for m, v in per.items()
        }
        for who, per in latency.items()
    }
    print(f"\nlatency p50 / p95 ms: {json.dumps(lat)}")
    merged_by = {p.pair: {m: sorted(v) for m, v in p.merged_by.items()} for p in pairs}
    print(f"merged_by as Canon answered by default: {merged_by}")
    run_s = round(time.perf_counter() - wall, 1)
    print(
        f"[xkb] {len(asked)} questions x {len(MODES)} modes in {queries_s} s; build {build_s} s; "
        f"run {run_s} s; database {a.db}"
    )
    if a.json:
        summary = {
            "id": "B8 several KBs",
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "provider": {"provider": a.provider, "model": a.model, "dimensions": a.dimensions},
            "other_provider": {
                "provider": a.other_provider,
                "model": a.other_model,
                "dimensions": a.other_dimensions,
            },
            "database": a.db,
            "split_seed": SPLIT_SEED,
            "documents": sizes,
            "ingest": ingest_summary,
            "questions": len(asked),
            "questions_left_out": left_out,
            "tables": tables,
            "figures": full_figures(asked, ranked),
            "latency": lat,
            "merged_by": merged_by,
            "build_s": build_s,
            "queries_s": queries_s,
            "run_s": run_s,
        }
        a.json.write_text(json.dumps(summary, indent=1, ensure_ascii=False, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
