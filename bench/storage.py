"""B14 storage: upload-to-live latency and ingest rate with the stored files in a bucket (an
S3-compatible server: moto in server mode, its own process on loopback) against the local
directory, in one run. `python -m bench.storage [--docs N] [--latency-docs N] [--rounds R]`.

Each phase starts its own real Celery worker with that backend's environment, and the phases
alternate (local, s3, s3, local, …) so a drifting machine favours neither. Latency: one upload
at a time (the file stored, the services' transaction), timed until its build is live, with
the relay run every 5 ms as beat would be nudged. Rate: N uploads at once, then until all are
live. The documents are the corpus's generated text (~12 kB each); embeddings are the hash
provider's (the default), so the figures are Canon's own path, storage included. moto keeps
objects in memory: a real bucket adds its network round trips (six per build: HEAD + PUT of the
source at upload, GET of it, HEAD + PUT + GET of the parsed text)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx

from bench import common

CHUNKS = 20  # paragraphs per document
SECRET = "bench-secret"  # noqa: S105 (moto accepts any credentials)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def moto_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(endpoint, timeout=1)
            return proc, endpoint
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def use_backend(name: str, endpoint: str, bucket: str) -> None:
    """Point this process and the next worker at the directory or the bucket."""
    from django.conf import settings

    env = {
        "CANON_STORAGE_URL": f"s3://{bucket}/bench" if name == "s3" else "",
        "CANON_S3_ADDRESSING_STYLE": "path",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
    }
    os.environ.update(env)
    settings.STORAGE_URL = env["CANON_STORAGE_URL"]
    settings.S3_ADDRESSING_STYLE = "path"


def live(document_id: int) -> bool:
    from kb.models import Publication

    return Publication.objects.filter(document_id=document_id).exists()


def latency_phase(kb: Any, texts: list[str], tag: str) -> list[float]:
    from ingestion.relay import outbox_relay_batch

    out = []
    for i, text in enumerate(texts):
        start = time.perf_counter()
        revision = common.upload(kb, f"{tag}-lat-{i}", text)
        while not live(revision.document_id):
            outbox_relay_batch()
            time.sleep(0.005)
        out.append((time.perf_counter() - start) * 1000)
    return out


def rate_phase(kb: Any, texts: list[str], tag: str) -> tuple[float, float]:
    """(seconds to store and commit every upload, seconds until all are live)."""
    start = time.perf_counter()
    for i, text in enumerate(texts):
        common.upload(kb, f"{tag}-rate-{i}", text)
    uploaded = time.perf_counter() - start
    common.wait_settled(kb)
    return uploaded, time.perf_counter() - start


def main() -> None:
    a = common.args(__doc__ or "", docs=120, latency_docs=30, rounds=2)
    common.setup(fresh=True)
    import boto3

    from kb.models import Chunk

    server, endpoint = moto_server()
    try:
        bucket = f"canon-bench-{uuid.uuid4().hex[:8]}"
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="bench",
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        results: dict[str, dict[str, list[float]]] = {
            name: {"latency_ms": [], "upload_s": [], "live_s": [], "docs": [], "chunks": []}
            for name in ("local", "s3")
        }
        order = ["local", "s3"]
        seed = 0
        for r in range(a.rounds):
            for name in order if r % 2 == 0 else order[::-1]:
                use_backend(name, endpoint, bucket)
                kb = common.tenant_kb(f"storage-{name}-{r}")
                seed += 1
                texts = [
                    common.join(common.document_paragraphs(seed * 10_000 + i, CHUNKS))
                    for i in range(a.docs + a.latency_docs)
                ]
                with common.worker(concurrency=2):
                    tag = f"{name}{r}"
                    results[name]["latency_ms"] += latency_phase(kb, texts[: a.latency_docs], tag)
                    uploaded, settled = rate_phase(kb, texts[a.latency_docs :], tag)
                results[name]["upload_s"].append(uploaded)
                results[name]["live_s"].append(settled)
                results[name]["docs"].append(a.docs)
                results[name]["chunks"].append(
                    Chunk.objects.filter(kb=kb, document__key__contains="-rate-").count()
                )
                print(f"round {r + 1} {name}: {a.docs} docs live in {settled:.1f}s")
    finally:
        server.terminate()
        server.wait(10)

    summary: dict[str, Any] = {"docs_per_round": a.docs, "rounds": a.rounds, "chunks": CHUNKS}
    rows: list[list[Any]] = [
        ["storage", "live p50 ms", "p90 ms", "p99 ms", "upload ms/doc", "docs/s", "chunks/s"]
    ]
    for name, got in results.items():
        lat = common.latency_summary(got["latency_ms"], 0)
        docs = sum(got["docs"])
        per_upload = 1000 * sum(got["upload_s"]) / docs
        rate = docs / sum(got["live_s"])
        chunk_rate = sum(got["chunks"]) / sum(got["live_s"])
        summary[name] = {
            **lat,
            "upload_ms_per_doc": round(per_upload, 2),
            "docs_per_s": round(rate, 2),
            "chunks_per_s": round(chunk_rate, 1),
        }
        rows.append(
            [
                name,
                lat["p50_ms"],
                lat["p90_ms"],
                lat["p99_ms"],
                round(per_upload, 2),
                round(rate, 1),
                round(chunk_rate),
            ]
        )
    common.report("B14_storage", summary, rows)


if __name__ == "__main__":
    main()
