"""The keyword leg: BM25 over postings (`bm25`) and, for p1 versions, the tsvector (`tsvector`);
`leg` picks one under the visibility rule it is given."""
