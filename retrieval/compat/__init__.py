"""API shapes other tools already speak, as thin adapters over Canon's one search
(`retrieval.api.searching.run_search`): Dify's External Knowledge API (`dify`) and the OpenAI
vector-store list, retrieve and search (`vector_stores`). Each builds the body a REST search
would send, validates it with the REST API's SearchInput and answers in its own shape, errors
included; the same API keys, knowledge bases, access groups and read budget as the REST API."""
