"""Evaluation's API under /api/v1/ (config/urls.py)."""
