"""The HTTP API (`/api/v1/`): views that authenticate a key, validate with small serializers and
call `retrieval.search` or `uploads`; JSON errors in both DEBUG modes (`errors`)."""
