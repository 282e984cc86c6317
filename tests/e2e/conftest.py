"""The `browser` fixture for every end-to-end test (tests/e2e/browser.py)."""

from tests.e2e.browser import browser

__all__ = ["browser"]
