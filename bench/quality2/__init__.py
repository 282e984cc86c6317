"""B8's second retrieval-quality corpus and its questions (issue 38); see corpus.py."""
