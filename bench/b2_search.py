"""B2 search: p50/p95 and QPS of POST /api/v1/search served by gunicorn on loopback (wrk at
concurrency 1 and 2), against the same query as raw prepared SQL on the same HNSW index and
langchain-postgres similarity_search_by_vector. Needs the corpus from B1."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from bench import common

QUERY = "kalo miten rasovu eldor anis quka tenra"


def _wrk(url: str, body: str | None, key: str, connections: int, seconds: float) -> dict[str, Any]:
    """wrk POSTing `body` with the key, or (body None) GETting the URL."""
    script = (
        (
            'wrk.method = "POST"\n'
            f"wrk.body = {json.dumps(body)}\n"
            'wrk.headers["Content-Type"] = "application/json"\n'
            f'wrk.headers["Authorization"] = "Bearer {key}"\n'
        )
        if body is not None
        else 'wrk.method = "GET"\n'
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    out = subprocess.run(
        [
            "wrk",
            "-t",
            str(connections),
            "-c",
            str(connections),
            "-d",
            f"{int(seconds)}s",
            "--latency",
            "-s",
            f.name,
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    os.unlink(f.name)

    def ms(label: str) -> float:
        m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)", out, re.M)
        if not m:
            return float("nan")
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    qps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "p50_ms": ms("50"),
        "p90_ms": ms("90"),
        "p99_ms": ms("99"),
        "qps": qps,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "raw": out,
    }


def _concurrent(make: Callable[[], Callable[[], Any]], n: int, seconds: float) -> dict[str, Any]:
    """n threads, each with its own connection (made by `make`), for `seconds`."""
    results: list[list[float]] = [[] for _ in range(n)]
    fns = [make() for _ in range(n)]

    def run(i: int) -> None:
        results[i], _ = common.timed_loop(fns[i], seconds)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return common.latency_summary([x for r in results for x in r], wall)


def _over_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One contender's rounds as one figure: the median of the rounds' p50 and p90, the mean of
    their QPS (rounds of equal length); the rounds' own figures kept beside."""
    return {
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p90_ms": statistics.median(r["p90_ms"] for r in runs),
        "qps": round(statistics.fmean(r["qps"] for r in runs), 1),
        "rounds": [{k: r[k] for k in ("p50_ms", "p90_ms", "qps")} for r in runs],
        "non_2xx": sum(r.get("non_2xx", 0) for r in runs),
    }


def main() -> None:
    a = common.args(__doc__ or "", workers=2, rounds=4)
    common.setup()
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector

    import embeddings
    from bench.b1_ingest import langchain_store
    from retrieval.principals import api_key_create

    kb = common.tenant_kb(common.CORPUS_SLUG)
    version = kb.active_index_version
    provider = embeddings.get_provider(
        provider=version.provider, model=version.model, dimensions=version.dimensions
    )
    vector = provider.embed([QUERY])[0]
    # The API embeds the query on every request (raw SQL and langchain take the vector): its
    # cost, in process, is part of the API's gap and reported on its own.
    embed_ms, _ = common.timed_loop(lambda: provider.embed([QUERY]), 1.0)
    embed_p50 = common.percentile(embed_ms, 50)
    # A key that sees every document (each corpus document carries an access group), so the API
    # and raw SQL rank the same rows.
    _, key = api_key_create(
        tenant=kb.tenant, name=f"bench-{time.time()}", access_groups=["g1", "g10", "rest"]
    )
    iv = int(version.pk)
    raw_sql = (
        f"SELECT id, text FROM kb_chunk WHERE index_version_id = {iv} "  # noqa: S608 (ints)
        f"ORDER BY embedding::vector({common.DIMS}) <=> %s::vector({common.DIMS}) LIMIT 10"
    )
    qvec = np.asarray(vector, dtype=np.float32)

    def make_raw() -> Callable[[], Any]:
        conn = psycopg.connect(common.database_url(), autocommit=True)
        register_vector(conn)
        conn.execute("SET hnsw.ef_search = 100")
        return lambda: conn.execute(raw_sql, [qvec], prepare=True).fetchall()

    store = langchain_store()

    def make_lc() -> Callable[[], Any]:
        return lambda: store.similarity_search_by_vector(list(vector), k=10)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The production web server as the Procfile starts it (config/gunicorn.conf.py: gthread
    # workers, CANON_WEB_THREADS threads each, the database pool, access log), a.workers
    # processes, on loopback.
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--config",
            "config/gunicorn.conf.py",
            "--workers",
            str(a.workers),
            "--bind",
            f"127.0.0.1:{port}",
            "config.wsgi:application",
        ],
        cwd=common.ROOT,
        # Production settings (README: DEBUG=0), plain HTTP on loopback as behind a TLS proxy.
        env={
            **os.environ,
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "0",
            "LOG_LEVEL": "WARNING",
        },
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/api/v1/search"
    floor_url = f"http://127.0.0.1:{port}/healthz"
    body = json.dumps({"kb": kb.slug, "query": QUERY, "top_k": 10, "mode": "vector"})
    try:
        import httpx

        deadline = time.monotonic() + 180  # a worker's first request loads the app
        while True:
            try:
                r = httpx.post(
                    url,
                    content=body,
                    headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                    timeout=60,
                )
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not answer")
            time.sleep(0.3)
        api_ids = [h["chunk_id"] for h in r.json()["hits"]]
        raw_ids = [row[0] for row in make_raw()()]
        results: dict[str, Any] = {"same_top10": sorted(api_ids) == sorted(raw_ids)}
        # This machine's speed drifts by up to 2x over seconds, so raw SQL, the API and the
        # floor run in a.rounds short rounds (the order rotating each round) and each is
        # summarised over its rounds: p50 and p90 the median of the rounds', QPS their mean.
        # The floor is what no API request can beat: GET /healthz through the same server
        # (Django's middleware and a JSON answer; no key, no database). langchain, 100x
        # slower, runs once per concurrency.
        step = max(1, int(a.seconds // a.rounds))  # whole seconds: wrk takes no fractions
        run = {
            "raw": lambda c: _concurrent(make_raw, c, step),
            "api": lambda c: _wrk(url, body, key, c, step),
            "floor": lambda c: _wrk(floor_url, None, key, c, step),
        }
        order = list(run)
        for c in (1, 2):
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in run}
            for i in range(a.rounds):
                for name in order[i % 3 :] + order[: i % 3]:
                    rounds[name].append(run[name](c))
            for name, runs in rounds.items():
                results[f"{name}_c{c}"] = _over_rounds(runs)
            results[f"langchain_c{c}"] = _concurrent(make_lc, c, a.seconds)
    finally:
        server.terminate()
        server.wait(30)
    rows: list[tuple[Any, ...]] = [("contender", "c", "p50 ms", "p90 ms", "QPS", "p50 ratio")]
    for c in (1, 2):
        raw = results[f"raw_c{c}"]
        for name in ("raw", "api", "floor", "langchain"):
            r = results[f"{name}_c{c}"]
            rows.append(
                (
                    name,
                    c,
                    round(r["p50_ms"], 2),
                    round(r["p90_ms"], 2),
                    r["qps"],
                    common.ratio(r["p50_ms"], raw["p50_ms"]),
                )
            )
        results[f"c{c}"] = {
            "api_p50_minus_raw_ms": round(results[f"api_c{c}"]["p50_ms"] - raw["p50_ms"], 2),
            "api_p50_minus_raw_minus_embedding_ms": round(
                results[f"api_c{c}"]["p50_ms"] - raw["p50_ms"] - embed_p50, 2
            ),
            "api_qps_over_raw": common.ratio(results[f"api_c{c}"]["qps"], raw["qps"]),
            # The most any request through this server could reach: an upper bound on the
            # API's ratio (its search statement is raw SQL's statement and more).
            "floor_qps_over_raw": common.ratio(results[f"floor_c{c}"]["qps"], raw["qps"]),
            "floor_p50_ms": results[f"floor_c{c}"]["p50_ms"],
            "api_p50_over_langchain": common.ratio(
                results[f"api_c{c}"]["p50_ms"], results[f"langchain_c{c}"]["p50_ms"]
            ),
        }
    from kb.models import Chunk

    chunks = Chunk.objects.filter(kb=kb).count()
    rows.append((f"query embedding ({version.provider}), in the API", "-", round(embed_p50, 3)))
    load = tuple(round(x, 2) for x in os.getloadavg())
    rows.append(("load average (1, 5, 15 min)", "-", str(load)))
    rows = [(*r, *[""] * (len(rows[0]) - len(r))) for r in rows]
    summary = {
        "chunks": chunks,
        "gunicorn_workers": a.workers,
        "query_embedding": {"provider": version.provider, "p50_ms": round(embed_p50, 3)},
        "loadavg": load,
        **results,
    }
    common.report("B2", summary, rows)


if __name__ == "__main__":
    main()
