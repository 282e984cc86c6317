"""B1 ingest: upload -> live through outbox, relay, a real Celery worker, chunk write and switch,
against raw binary COPY into an equally indexed table and langchain-postgres add_embeddings.
Builds the corpus (knowledge base `corpus`) that B2, B3, B6 and B7 search."""

from __future__ import annotations

import time
from typing import Any

from bench import common


class CopyContender:
    """Raw binary COPY into a table shaped like Canon's chunks, with the same HNSW index (the
    physical limit) or with none (what the index costs)."""

    def __init__(self, table: str, *, hnsw: bool) -> None:
        import psycopg
        from pgvector.psycopg import register_vector

        self.table = table
        self.conn = psycopg.connect(common.database_url())
        register_vector(self.conn)
        self.conn.execute(f"DROP TABLE IF EXISTS {table}")
        self.conn.execute(
            f"CREATE TABLE {table} (id bigserial PRIMARY KEY, doc int NOT NULL, "
            f"ordinal int NOT NULL, text text NOT NULL, embedding vector({common.DIMS}))"
        )
        if hnsw:
            self.conn.execute(
                f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops) "
                "WITH (m = 16, ef_construction = 64)"
            )
        self.conn.commit()

    def __call__(self, docs: list[tuple[int, list[dict[str, Any]]]]) -> float:
        import numpy as np

        start = time.perf_counter()
        with (
            self.conn.cursor() as cur,
            cur.copy(
                f"COPY {self.table} (doc, ordinal, text, embedding) FROM STDIN WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["int4", "int4", "text", "vector"])
            for d, doc in docs:
                for c in doc:
                    copy.write_row(
                        (d, c["ordinal"], c["text"], np.asarray(c["vector"], dtype=np.float32))
                    )
        self.conn.commit()
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


class LangchainContender:
    def __init__(self) -> None:
        self.store = langchain_store(pre_delete=True)

    def __call__(self, docs: list[tuple[int, list[dict[str, Any]]]]) -> float:
        start = time.perf_counter()
        for d, doc in docs:  # one call per document, as an app would
            self.store.add_embeddings(
                texts=[c["text"] for c in doc],
                embeddings=[list(c["vector"]) for c in doc],
                metadatas=[{"doc": d, "ordinal": c["ordinal"]} for c in doc],
                ids=[f"{d}-{c['ordinal']}" for c in doc],
            )
        return time.perf_counter() - start


class CanonContender:
    """The product's path: upload services -> outbox -> relay -> a real worker -> switch."""

    def __init__(self, kb: Any, texts: list[str]) -> None:
        self.kb, self.texts = kb, texts
        self.upload_s = 0.0

    def __call__(self, docs: list[tuple[int, list[dict[str, Any]]]]) -> float:
        start = time.perf_counter()
        for i, _ in docs:
            common.upload(self.kb, f"doc-{i:05d}", self.texts[i], common.access_groups(i))
        self.upload_s += time.perf_counter() - start
        common.wait_settled(self.kb)
        return time.perf_counter() - start


def main() -> None:
    a = common.args(__doc__ or "", rounds=4)
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

    contenders: dict[str, Any] = {
        "copy": CopyContender("bench_copy", hnsw=True),
        "copy_no_index": CopyContender("bench_copy_plain", hnsw=False),
        "canon": CanonContender(kb, texts),
        "langchain": LangchainContender(),
    }
    seconds = dict.fromkeys(contenders, 0.0)
    numbered = list(enumerate(docs))
    step = -(-len(numbered) // a.rounds)
    with common.worker(concurrency=2):
        # Interleaved: each round gives every contender the next slice of the same rows, the
        # order rotating so that no contender always runs first (or last) on a drifting machine.
        for r, s in enumerate(range(0, len(numbered), step)):
            names = list(contenders)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                seconds[name] += contenders[name](numbered[s : s + step])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:.0f}s" for k, v in seconds.items()))
    live_chunks = Chunk.objects.filter(kb=kb).count()
    assert live_chunks == total, (live_chunks, total)
    upload_s = contenders["canon"].upload_s

    cps = {k: total / v for k, v in seconds.items()}
    summary = {
        "documents": n_docs,
        "chunks": total,
        "dims": common.DIMS,
        "seconds": {**seconds, "canon_uploads": upload_s},
        "chunks_per_s": {k: round(v, 1) for k, v in cps.items()},
        "canon_over_copy": common.ratio(cps["canon"], cps["copy"]),
        "canon_over_langchain": common.ratio(cps["canon"], cps["langchain"]),
        "order": f"interleaved in {a.rounds} rounds, rotating (one run, same rows and vectors)",
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
            (
                "COPY, no vector index",
                round(cps["copy_no_index"]),
                common.ratio(cps["canon"], cps["copy_no_index"]),
            ),
            ("langchain", round(cps["langchain"]), common.ratio(cps["canon"], cps["langchain"])),
        ],
    )


if __name__ == "__main__":
    main()
