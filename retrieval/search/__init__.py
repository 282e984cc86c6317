"""Search: the visibility rule, tenant scope and access groups in the same SQL statement.

Each query joins the Publication pointer to its chunks and checks, in the statement's one MVCC
snapshot, that the pointer's index version is the knowledge base's active one. A concurrent
switch is therefore seen entirely or not at all; a concurrent swap of the active index version
is detected in the same snapshot and the search starts again against the new version
(`engine`). The rule is `visibility`; the legs are `vector` and `lexical`, fused by `fusion`
and, when a reranker is configured, reordered by `rerank` after the snapshot;
`snapshot` says what one snapshot means; `history` searches as of a past time and `explain`
says why a chunk is or is not visible.
"""
