from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fault.harness import RUNNING_SEARCHERS


@pytest.fixture(autouse=True)
def _stop_searchers() -> Iterator[None]:
    yield
    while RUNNING_SEARCHERS:
        RUNNING_SEARCHERS.pop().stop()
