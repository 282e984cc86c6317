"""B1 ingest: upload -> live through outbox, relay, a real Celery worker, chunk write and switch,
against raw binary COPY into an equally indexed table and langchain-postgres add_embeddings.
Builds the corpus (knowledge base `corpus`) that B2, B3, B6 and B7 search."""

from __future__ import annotations

import time
from typing import Any

from bench import common


def copy_contender(docs: list[list[dict[str, Any]]]) -> float:
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(common.database_url()) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS bench_copy")
        conn.execute(
            f"CREATE TABLE bench_copy (id bigserial PRIMARY KEY, doc int NOT NULL, "
            f"ordinal int NOT NULL, text text NOT NULL, embedding vector({common.DIMS}))"
        )
        conn.execute(
            "CREATE INDEX bench_copy_hnsw ON bench_copy USING hnsw (embedding vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64)"
        )
        conn.commit()
        start = time.perf_counter()
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY bench_copy (doc, ordinal, text, embedding) FROM STDIN WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["int4", "int4", "text", "vector"])
            for d, doc in enumerate(docs):
                for c in doc:
                    copy.write_row(
                        (d, c["ordinal"], c["text"], np.asarray(c["vector"], dtype=np.float32))
                    )
        conn.commit()
        return time.perf_counter() - start


def langchain_store(pre_delete: bool = False) -> Any:
    from langchain_core.embeddings import Embeddings
    from langchain_postgres import PGVector

    class Precomputed(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise NotImplementedError("the bench passes precomputed vectors")

        def embed_query(self, text: str) -> list[float]:
            raise NotImplementedError("the bench passes precomputed vectors")

    url = common.database_url().replace("postgresql://", "postgresql+psycopg://", 1)
    return PGVector(
        embeddings=Precomputed(),
        collection_name="bench",
        connection=url,
        use_jsonb=True,
        pre_delete_collection=pre_delete,
    )


def langchain_contender(docs: list[list[dict[str, Any]]]) -> float:
    store = langchain_store(pre_delete=True)
    rows = [(d, c) for d, doc in enumerate(docs) for c in doc]
    start = time.perf_counter()
    for s in range(0, len(rows), common.CHUNKS_PER_DOC):
        batch = rows[s : s + common.CHUNKS_PER_DOC]  # one call per document, as an app would
        store.add_embeddings(
            texts=[c["text"] for _, c in batch],
            embeddings=[list(c["vector"]) for _, c in batch],
            metadatas=[{"doc": d, "ordinal": c["ordinal"]} for d, c in batch],
            ids=[f"{d}-{c['ordinal']}" for d, c in batch],
        )
    return time.perf_counter() - start


def main() -> None:
    a = common.args(__doc__ or "")
    common.setup(fresh=True)
    from kb.models import Chunk

    n_docs = max(1, a.chunks // common.CHUNKS_PER_DOC)
    kb = common.tenant_kb(common.CORPUS_SLUG)
    version = kb.active_index_version
    texts = [common.join(common.document_paragraphs(seed=i)) for i in range(n_docs)]
    t0 = time.perf_counter()
    docs = common.precompute(texts, version)
    precompute_s = time.perf_counter() - t0
    total = sum(len(d) for d in docs)
    common.cache_fill(docs, version)
    print(f"corpus: {n_docs} documents, {total} chunks; precomputed in {precompute_s:.1f}s")

    copy_s = copy_contender(docs)
    print(f"COPY: {total / copy_s:.0f} chunks/s")

    with common.worker(concurrency=2):
        start = time.perf_counter()
        for i, text in enumerate(texts):
            common.upload(kb, f"doc-{i:05d}", text, common.access_groups(i))
        upload_s = time.perf_counter() - start
        common.wait_settled(kb)
        canon_s = time.perf_counter() - start
    live_chunks = Chunk.objects.filter(kb=kb).count()
    assert live_chunks == total, (live_chunks, total)
    print(f"Canon: {total / canon_s:.0f} chunks/s (uploads took {upload_s:.1f}s)")

    lc_s = langchain_contender(docs)
    print(f"langchain-postgres: {total / lc_s:.0f} chunks/s")

    cps = {"canon": total / canon_s, "copy": total / copy_s, "langchain": total / lc_s}
    summary = {
        "documents": n_docs,
        "chunks": total,
        "dims": common.DIMS,
        "seconds": {"canon": canon_s, "canon_uploads": upload_s, "copy": copy_s, "langchain": lc_s},
        "chunks_per_s": {k: round(v, 1) for k, v in cps.items()},
        "canon_over_copy": common.ratio(cps["canon"], cps["copy"]),
        "canon_over_langchain": common.ratio(cps["canon"], cps["langchain"]),
        "order": "COPY, then Canon, then langchain (one run, same rows and vectors)",
        "notes": "Canon and COPY maintain an HNSW index while inserting; langchain-postgres "
        "creates none. Embedding excluded: vectors precomputed and put in the EmbeddingCache.",
    }
    common.report(
        "B1",
        summary,
        [
            ("contender", "chunks/s", "ratio"),
            ("canon", round(cps["canon"]), 1.0),
            ("COPY binary", round(cps["copy"]), common.ratio(cps["canon"], cps["copy"])),
            ("langchain", round(cps["langchain"]), common.ratio(cps["canon"], cps["langchain"])),
        ],
    )


if __name__ == "__main__":
    main()
