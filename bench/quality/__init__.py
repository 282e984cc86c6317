"""Retrieval-quality evaluation: a real-document corpus built from Debian documentation packages
(`python -m bench.quality.corpus`) and a hand-written question set (`questions.jsonl`)."""
