"""Evaluation's writes: question sets and their questions, and asking for runs."""
