"""A knowledge base whose answers a worse chunking loses, for the quality gate's tests and its
browser test: each answering document spreads its question's words over several sentences
between filler, so a chunk of the whole document holds them all; a short memo beside each
holds a few of them in one line. Chunked in 50 characters (`tiny_candidate`), no chunk of the
answer holds more than one of the words and the memos come first."""

from __future__ import annotations

from typing import Any

from kb.models import IndexVersion, KnowledgeBase
from kb.services.index_versions import index_version_create
from tests.helpers import run_pending
from tests.retrieval.factories import publish
from work.models import IngestionTask

FILLER = (
    " The rest of this section repeats what the handbook's introduction says about the"
    " office, its history and the people who keep it running every single day."
)


def spread(*sentences: str) -> str:
    return FILLER.join(sentences) + FILLER


ANSWERS = {
    "parking": spread(
        "Staff may apply for a space.",
        "The garage is underground.",
        "Permits cost nothing.",
        "They are renewed every January.",
    ),
    "lockers": spread(
        "Employees get a locker.",
        "Keys are issued by reception.",
        "Padlocks are not allowed.",
        "Lockers are emptied in August.",
    ),
    "bikes": spread(
        "Cyclists are welcome.",
        "The shed has showers.",
        "Helmets stay on the hooks.",
        "Repairs happen on Fridays.",
    ),
    "visitors": spread(
        "Guests sign the book.",
        "A badge is printed at the desk.",
        "Escorts are required upstairs.",
        "Badges are returned at six.",
    ),
}
MEMOS = {
    "memo-parking": "Garage permits renewed in January.",
    "memo-lockers": "Locker keys, padlocks, August.",
    "memo-bikes": "Shed showers, helmets, repairs Friday.",
    "memo-visitors": "Guest badge printed, escorts, returned.",
}
QUESTIONS: list[dict[str, Any]] = [
    {
        "id": "parking",
        "question": "staff space underground garage permits cost renewed January",
        "expected_documents": ["parking"],
    },
    {
        "id": "lockers",
        "question": "employees locker keys reception padlocks allowed emptied August",
        "expected_documents": ["lockers"],
    },
    {
        "id": "bikes",
        "question": "cyclists welcome shed showers helmets hooks repairs Fridays",
        "expected_documents": ["bikes"],
    },
    {
        "id": "visitors",
        "question": "guests sign book badge printed desk escorts required returned",
        "expected_documents": ["visitors"],
    },
]


def publish_world(kb: KnowledgeBase) -> None:
    for key, text in {**ANSWERS, **MEMOS}.items():
        publish(kb, key, text)


def tiny_candidate(kb: KnowledgeBase) -> IndexVersion:
    """A new index version of `kb` chunked in 50 characters, built here as a worker would."""
    active = kb.active_index_version
    assert active is not None
    version = index_version_create(
        kb_id=kb.pk,
        provider=active.provider,
        model=active.model,
        dimensions=active.dimensions,
        chunk_size=50,
        chunk_overlap=0,
    )
    # Inside a test's transaction the database clock stands still at the test's start.
    IngestionTask.objects.filter(status="queued").update(available_at=None)
    outcomes = run_pending()
    assert outcomes and set(outcomes) == {"published"}, outcomes
    return version
