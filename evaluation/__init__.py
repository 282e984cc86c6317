"""Evaluation: a knowledge base's own questions, asked of its index versions (docs/ARCHITECTURE.md,
"Evaluation"). A floor above retrieval and sources, below the admin."""
