"""B3 recall: recall@10 of Canon's vector search (the selector's HNSW path) against exact numpy
brute force over the same visible rows, at hnsw.ef_search 40/100/200 and with every / 10 % / 1 %
of documents visible (access groups); and rows returned under those filters. Needs B1's corpus."""

from __future__ import annotations

from typing import Any

from bench import common


def main() -> None:
    a = common.args(__doc__ or "", queries=50, noise=0.3)
    common.setup()
    import numpy as np
    from django.db import connection, transaction

    from retrieval.principals import Principal
    from retrieval.search.vector import approximate_rows, exact_rows
    from retrieval.search.visibility import search_params

    kb = common.tenant_kb(common.CORPUS_SLUG)
    version = kb.active_index_version
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.id, c.embedding::text, d.access_groups FROM kb_chunk c "
            "JOIN kb_publication p ON p.build_id = c.build_id "
            "JOIN kb_document d ON d.id = c.document_id WHERE c.kb_id = %s",
            [kb.pk],
        )
        rows = cursor.fetchall()
    ids = np.array([r[0] for r in rows])
    matrix = np.array(
        [np.array(r[1][1:-1].split(","), dtype=np.float32) for r in rows], dtype=np.float32
    )
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12
    groups = [set(r[2]) for r in rows]
    rng = np.random.default_rng(3)
    scopes: dict[str, tuple[Principal, np.ndarray]] = {}
    for name, group in (("100%", None), ("10%", "g10"), ("1%", "g1")):
        mask = np.array([group is None or group in g for g in groups])
        principal = Principal(
            tenant_id=kb.tenant_id,
            kb_ids=None,
            access_groups=frozenset([group] if group else []),
            all_groups=group is None,
        )
        scopes[name] = (principal, mask)
    dims = common.DIMS
    raw_sql = (
        f"SELECT id FROM kb_chunk WHERE index_version_id = {int(version.pk)} "  # noqa: S608
        f"ORDER BY embedding::vector({dims}) <=> %s::vector({dims}) LIMIT 10"
    )
    # Queries: a visible chunk's vector plus noise (so the nearest neighbour is not trivial).
    results: dict[str, Any] = {}
    table: list[tuple[Any, ...]] = [
        ("scope", "visible", "ef_search", "recall@10", "raw SQL", "min rows", "short results")
    ]
    for scope, (principal, mask) in scopes.items():
        visible = np.flatnonzero(mask)
        picks = rng.choice(visible, size=min(a.queries, len(visible)), replace=False)
        queries = matrix[picks] + rng.normal(
            0, a.noise / np.sqrt(matrix.shape[1]), size=(len(picks), matrix.shape[1])
        )
        queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
        exact = []
        for q in queries:
            scores = matrix[visible] @ q
            exact.append(set(ids[visible[np.argsort(-scores)[:10]]].tolist()))
        params = search_params(principal=principal, kb=kb)
        for ef in (40, 100, 200):
            recalls, counts = [], []
            for q, truth in zip(queries, exact, strict=True):
                # The vector search's statements at this ef_search (the session's is 100): the
                # approximate one, and the exact form when it comes back short.
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
                    got = approximate_rows(params, version, q.tolist(), 10)
                    if len(got) < 10:
                        got = exact_rows(params, version, q.tolist(), 10)
                counts.append(len(got))
                recalls.append(len({r[0] for r in got} & truth) / len(truth))
            recall = float(np.mean(recalls))
            raw_recall = None
            if scope == "100%":  # the same queries as bare SQL on the same HNSW index
                raw = []
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
                    for q, truth in zip(queries, exact, strict=True):
                        cursor.execute(raw_sql, ["[" + ",".join(map(str, q.tolist())) + "]"])
                        raw.append(len({r[0] for r in cursor.fetchall()} & truth) / len(truth))
                raw_recall = round(float(np.mean(raw)), 4)
            short = sum(1 for c in counts if c < 10)
            results[f"{scope}_ef{ef}"] = {
                "visible_rows": int(mask.sum()),
                "recall_at_10": round(recall, 4),
                "raw_sql_recall_at_10": raw_recall,
                "min_rows_returned": min(counts),
                "short_results": short,
            }
            table.append(
                (
                    scope,
                    int(mask.sum()),
                    ef,
                    round(recall, 4),
                    raw_recall or "-",
                    min(counts),
                    short,
                )
            )
    common.report(
        "B3",
        {"queries_per_cell": a.queries, "noise_norm": a.noise, "chunks": len(ids), **results},
        table,
    )


if __name__ == "__main__":
    main()
