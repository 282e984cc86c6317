"""API shapes other tools already speak, as thin adapters over Canon's one search request
(`retrieval.api.search_request`): Dify's External Knowledge API (`dify`) and the OpenAI
vector-store list, retrieve and search (`vector_stores`). Each builds the body a REST search
would send, hands it to `search_request` and answers in its own shape, a refused search's
`SearchFailure` worded by its own table (`refusal`); the same API keys, knowledge bases, access
groups and read budget as the REST API."""
