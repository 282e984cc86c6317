"""The soak's checker flags each kind of bad result set, and stays quiet on good ones, so a soak
that reports 0 violations has been looking."""

from __future__ import annotations

import pytest

from tests.soak.checker import Checker, Hit, Ledger, ResultSet

STAFF = frozenset({"staff"})


@pytest.fixture
def ledger() -> Ledger:
    ledger = Ledger()
    ledger.created("open-1", [])
    ledger.created("open-2", ["staff"])
    return ledger


def result(*hits: Hit, sent: float = 10.0, groups: frozenset[str] | None = STAFF) -> ResultSet:
    return ResultSet(searcher="api-staff", groups=groups, sent=sent, received=sent + 0.1, hits=hits)


def test_a_good_result_set_passes(ledger: Ledger) -> None:
    checker = Checker(ledger)
    good = result(Hit("open-1", 11, 2), Hit("open-1", 11, 2), Hit("open-2", 12, 1))
    assert checker.check(good, published={11, 12}, failed=()) == []
    assert (checker.checked, checker.violations) == (1, [])


def test_two_builds_of_one_document_in_one_result_set(ledger: Ledger) -> None:
    checker = Checker(ledger)
    found = checker.check(
        result(Hit("open-1", 11, 2), Hit("open-1", 13, 3)), published={11, 13}, failed=()
    )
    assert len(found) == 1 and "several builds [11, 13]" in found[0]
    assert checker.violations == found


def test_a_document_the_key_may_not_read(ledger: Ledger) -> None:
    bad = result(Hit("open-2", 12, 1), groups=frozenset())
    assert "needs ['staff']" in Checker(ledger).check(bad, published={12}, failed=())[0]
    # the tenant's admin reads every group
    assert (
        Checker(ledger).check(result(Hit("open-2", 12, 1), groups=None), published={12}, failed=())
        == []
    )


def test_a_document_deleted_before_the_search_began(ledger: Ledger) -> None:
    ledger.delete_returned("open-1", 5.0)
    checker = Checker(ledger)
    found = checker.check(result(Hit("open-1", 11, 2), sent=10.0), published={11}, failed=())
    assert "deleted before this search began" in found[0]
    # once a restore has begun, or for a search that began before the delete returned: no finding
    ledger.restore_started("open-1", 20.0)
    assert checker.check(result(Hit("open-1", 11, 2), sent=19.95), published={11}, failed=()) == []
    assert checker.check(result(Hit("open-1", 11, 2), sent=4.95), published={11}, failed=()) == []
    assert checker.check(result(Hit("open-1", 11, 2), sent=20.5), published={11}, failed=()) == []
    assert checker.check(result(Hit("open-1", 11, 2), sent=15.0), published={11}, failed=())


def test_a_failed_or_never_published_build(ledger: Ledger) -> None:
    checker = Checker(ledger)
    found = checker.check(
        result(Hit("open-1", 11, 2), Hit("open-2", 14, 1)), published={11}, failed={11}
    )
    assert [f.split(": ", 1)[1] for f in found] == [
        "open-1 served from failed build 11",
        "open-2 served from build 14, never published",
    ]


def test_an_older_revision_than_one_already_seen(ledger: Ledger) -> None:
    checker = Checker(ledger)
    assert checker.check(result(Hit("open-1", 13, 3), sent=10.0), published={13}, failed=()) == []
    found = checker.check(result(Hit("open-1", 11, 2), sent=11.0), published={11}, failed=())
    assert "went back from r3 to r2" in found[0]
    # another searcher's view is its own
    other = ResultSet("api-public", frozenset(), 12.0, 12.1, (Hit("open-1", 11, 2),))
    assert checker.check(other, published={11}, failed=()) == []


def test_an_older_revision_after_a_rollback_is_allowed(ledger: Ledger) -> None:
    checker = Checker(ledger)
    assert checker.check(result(Hit("open-1", 13, 3), sent=10.0), published={13}, failed=()) == []
    ledger.rewind("open-1", 10.5, 10.6)
    assert checker.check(result(Hit("open-1", 11, 2), sent=11.0), published={11}, failed=()) == []
    # but a rollback before the newer revision was seen excuses nothing
    assert checker.check(result(Hit("open-1", 13, 3), sent=12.0), published={13}, failed=()) == []
    assert checker.check(result(Hit("open-1", 11, 2), sent=13.0), published={11}, failed=())


def test_a_document_nobody_uploaded(ledger: Ledger) -> None:
    found = Checker(ledger).check(result(Hit("stray", 99, 1)), published={99}, failed=())
    assert "no document the driver made" in found[0]
