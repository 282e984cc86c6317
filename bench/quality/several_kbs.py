"""B8 with its corpus split over two knowledge bases: how `search_several` ranks (issue 25, item 3).

    python -m bench.quality.several_kbs [--reuse] [--db canon_xkb] [--limit-docs N]
                                        [--limit-questions N] [--json FILE]

What it measures. `retrieval.search.several.search_several` merges the knowledge bases' lists by
score when their versions embed with one provider, model and dimensions (vector and hybrid
search), and by reciprocal rank, 1 / (60 + rank), otherwise: keyword search always, and any
search over versions on different models. This bench asks B8's questions (`natural.jsonl`, per
split of `splits.json`, and the keyword-style `questions.jsonl`) in vector, keyword and hybrid
mode, top 10, of:

- **one KB**: one knowledge base holding the whole corpus, searched with `search` exactly as B8
  does (`contenders.canon_ranker`): B8's own figures, measured in the same run;
- **two KBs**: the same corpus split by document over two knowledge bases, both on the default
  model (`use`, use-multilingual-v3, 512 dimensions), searched with `search_several` in one
  request. Each search's per-knowledge-base lists (what `several._merged` is given) are caught
  and merged both ways with Canon's own `_merged`: **by score** (what Canon does for vector and
  hybrid over one model) and **by rank** (what Canon does for keyword search, and for every mode
  over knowledge bases whose versions use different models). The list Canon itself answered is
  checked to be the one its `merged_by` names (a mismatch is reported). Retrieval code is not
  changed; keyword by score is not a path Canon takes and is marked so.

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
three knowledge bases: `xkb-whole` (the whole corpus, ingested first), `xkb-a` and `xkb-b` (the
halves). The embedding cache is per database, so the halves' chunks reuse the whole one's
vectors (the same text and heading path gives the same content hash): the second ingest costs
parsing, chunking and writing, not the model, and both sides hold the same vectors. `ingest`
numbers its idempotency keys per call (b8-0, b8-1, ...), so this bench deletes the tenant's
upload idempotency records before each knowledge base's ingest. The whole corpus is used (no
subset): on this 2-core machine, with a test suite running beside it (load 4-6), the whole
knowledge base took 889 s (49,229 chunks, 55 chunks/s), the halves 133 s and 141 s (23,081 and
26,148 chunks, from the cache), the questions 210 s: 23 minutes in all (2026-12-04).
`--reuse` keeps the database of an earlier run and ingests only a knowledge base that is not
there yet. `--limit-docs` (B8's own selection: the answers' documents first) is for trying it.

Read with care: in this database (98,458 chunks in kb_chunk) PostgreSQL plans the vector leg
of each half (23-26 k chunks) as an exact scan through the publications, not a walk of its HNSW
index (EXPLAIN shows it; ANALYZE does not change it), while the whole knowledge base's goes
through its index. So the two-KB vector lists are exact and the one-KB list approximate: two KBs
merged by score in vector mode give exactly exact dense retrieval over the whole corpus (the
same MRR@10 on the held-out half, checked apart), and what they gain over one KB is the HNSW
approximation's loss, not the merge's doing. It is also why search_several is slower here.
The comparison that matters, by score against by rank, reads the same per-KB lists.

Prints one table per question set: setting x mode, n, MRR@10, hit@10 and the differences against
one KB; `--json FILE` writes every figure (per split, kind and language too) and the latencies.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
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
SPLIT_SEED = "canon-b8-several-kbs"
MODES = ("vector", "keyword", "hybrid")
BOOTSTRAP = 2000
BOOTSTRAP_SEED = 25

# The settings compared, in report order.
ONE = "one KB"
BY_SCORE = "two KBs, by score"
BY_RANK = "two KBs, by rank"
SETTINGS = (ONE, BY_SCORE, BY_RANK)


def half(key: str) -> str:
    """The knowledge base a document goes to: A when sha256(seed:key) is even, else B."""
    digest = hashlib.sha256(f"{SPLIT_SEED}:{key}".encode()).digest()
    return HALF_A if digest[-1] % 2 == 0 else HALF_B


def subset(corpus: Corpus, slug: str) -> Corpus:
    """The corpus of one half: its documents, the same questions (scored on the whole)."""
    docs = (
        corpus.documents
        if slug == WHOLE
        else [d for d in corpus.documents if half(d["key"]) == slug]
    )
    return Corpus(directory=corpus.directory, documents=docs, questions=corpus.questions)


def canon_merge(mode: str) -> str:
    """The setting Canon itself takes for two knowledge bases on one model."""
    return BY_RANK if mode == "keyword" else BY_SCORE


# --- building ----------------------------------------------------------------------------------


def knowledge_bases(corpus: Corpus, a: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The three knowledge bases, ingested (or, with --reuse, found) in order: whole, A, B.
    Returns them by slug and each one's ingest figures."""
    from kb.models import Build, Document, KnowledgeBase, Tenant
    from kb.services.index_versions import knowledge_base_create
    from retrieval.models import IdempotencyRecord

    tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "Several KBs"})
    wanted = (a.provider, a.model, a.dimensions)
    kbs: dict[str, Any] = {}
    summaries: dict[str, Any] = {}
    missing = [
        slug
        for slug in (WHOLE, HALF_A, HALF_B)
        if not KnowledgeBase.objects.filter(tenant=tenant, slug=slug).exists()
    ]
    worker = common.Worker(concurrency=a.concurrency) if missing else None

    def alive() -> bool:
        return worker is not None and worker.proc.poll() is None

    try:
        for slug in (WHOLE, HALF_A, HALF_B):
            part = subset(corpus, slug)
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
                    provider=a.provider,
                    model=a.model,
                    dimensions=a.dimensions,
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
    """`search_several` over A and B; each search's per-KB lists caught as `_merged` gets them,
    then merged both ways by that same `_merged`."""

    def __init__(self, kbs: list[Any]) -> None:
        from retrieval.search import several

        self.kbs = kbs
        self.principal = principal_for(kbs[0])
        self.several = several
        self.merged: Callable[..., Any] = several._merged
        self.caught: list[Any] = []
        self.mismatches: list[tuple[str, str]] = []
        self.merged_by: dict[str, set[str]] = {m: set() for m in MODES}

    def _catch(self, per_kb: Any, *, by_score: bool) -> Any:
        self.caught.append(per_kb)
        return self.merged(per_kb, by_score=by_score)

    def __call__(self, query: str, mode: str) -> dict[str, list[str]]:
        """Document keys of the first TOP_K hits, merged by score and by rank."""
        self.caught.clear()
        self.several._merged = self._catch
        try:
            result = self.several.search_several(
                principal=self.principal,
                kbs=self.kbs,
                query=query,
                top_k=TOP_K,
                mode=mode,
                rerank=False,
            )
        finally:
            self.several._merged = self.merged
        if len(self.caught) != 1:
            raise RuntimeError(f"caught {len(self.caught)} merges for one search")
        per_kb = self.caught[0]
        lists = {
            BY_SCORE: self.merged(per_kb, by_score=True)[:TOP_K],
            BY_RANK: self.merged(per_kb, by_score=False)[:TOP_K],
        }
        merged_by = str(result.merged_by)
        self.merged_by[mode].add(merged_by)
        own = BY_SCORE if merged_by == "score" else BY_RANK
        if [h.chunk_id for h in lists[own]] != [h.chunk_id for h in result.hits]:
            self.mismatches.append((mode, query))
        return {name: [h.document_key for h in hits] for name, hits in lists.items()}


def run_questions(
    questions: Sequence[dict[str, Any]], whole: Any, two: TwoKbs, *, warmup: int = 3
) -> tuple[dict[tuple[str, str], list[list[str]]], dict[str, dict[str, list[float]]]]:
    """Every question in every mode: one KB (B8's own search) and two KBs (both merges).
    Returns the ranked document keys per (setting, mode), and latencies per mode."""
    from bench.quality.contenders import canon_ranker

    one = {m: canon_ranker(whole, m, {}) for m in MODES}
    for q in questions[:warmup]:
        for m in MODES:
            one[m](q["question"])
            two(q["question"], m)
    ranked: dict[tuple[str, str], list[list[str]]] = {(s, m): [] for s in SETTINGS for m in MODES}
    latency: dict[str, dict[str, list[float]]] = {
        "one KB (search)": {m: [] for m in MODES},
        "two KBs (search_several)": {m: [] for m in MODES},
    }
    for i, q in enumerate(questions):
        for m in MODES:
            # Alternate which goes first, so drift on a shared machine hits both alike.
            for first in (True, False) if i % 2 == 0 else (False, True):
                t0 = time.perf_counter()
                if first:
                    ranked[(ONE, m)].append(one[m](q["question"]))
                    latency["one KB (search)"][m].append((time.perf_counter() - t0) * 1000)
                else:
                    both = two(q["question"], m)
                    latency["two KBs (search_several)"][m].append((time.perf_counter() - t0) * 1000)
                    for name, keys in both.items():
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
                name += " (Canon's)" if canon_merge(m) == setting else " (forced)"
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
    sizes = {slug: len(subset(corpus, slug).documents) for slug in (WHOLE, HALF_A, HALF_B)}
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
    both_live = whole_live & halves_live
    asked = [
        {**q, "answers": [k for k in q["answers"] if k in both_live]}
        for q in corpus.questions
        if any(k in both_live for k in q["answers"])
    ]
    left_out = len(corpus.questions) - len(asked)
    if left_out:
        print(f"[xkb] {left_out} questions left out: no answer document live on both sides")

    two = TwoKbs([kbs[HALF_A], kbs[HALF_B]])
    t0 = time.perf_counter()
    ranked, latency = run_questions(asked, kbs[WHOLE], two)
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
    print(f"merged_by as Canon answered: { {m: sorted(v) for m, v in two.merged_by.items()} }")
    print(
        f"Canon's own answer vs the merge its merged_by names: {len(two.mismatches)} of "
        f"{len(asked) * len(MODES)} searches differ {two.mismatches[:5]}"
    )
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
            "database": a.db,
            "split_seed": SPLIT_SEED,
            "documents": sizes,
            "ingest": ingest_summary,
            "questions": len(asked),
            "questions_left_out": left_out,
            "tables": tables,
            "figures": full_figures(asked, ranked),
            "latency": lat,
            "merged_by": {m: sorted(v) for m, v in two.merged_by.items()},
            "mismatches": two.mismatches,
            "build_s": build_s,
            "queries_s": queries_s,
            "run_s": run_s,
        }
        a.json.write_text(json.dumps(summary, indent=1, ensure_ascii=False, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
