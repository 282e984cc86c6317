"""The sources' API under /api/v1/ (`urls`): a knowledge base's sources, their syncs and runs,
behind `Principal.can_manage_sources`. Authentication, errors, throttling and the schema are the
search API's (`retrieval.api`)."""
