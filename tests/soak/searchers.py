"""The soak's searchers: every result set they get goes to the checker."""

from __future__ import annotations

import random
import time

from django.db import connection, transaction

from kb.models import Build, KnowledgeBase, PublicationEvent
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.soak.checker import Checker, Hit, ResultSet
from tests.soak.world import MODES, WORDS, Loop, Tally, World, api_client

# The actions that make a build live.
PUBLISHING = ("publish", "approve", "rollback")


def publication_facts(build_ids: set[int]) -> tuple[set[int], set[int]]:
    """Of these builds: which were ever made live, and which are failed."""
    if not build_ids:
        return set(), set()
    published = set(
        PublicationEvent.objects.filter(build_id__in=build_ids, action__in=PUBLISHING)
        .values_list("build_id", flat=True)
        .distinct()
    )
    failed = set(
        Build.objects.filter(pk__in=build_ids, state=Build.State.FAILED).values_list(
            "pk", flat=True
        )
    )
    return published, failed


class Searcher(Loop):
    answers: Tally


class ApiSearcher(Searcher):
    """Searches through the API with one key; every result set goes to the checker."""

    def __init__(
        self,
        name: str,
        key: str,
        groups: frozenset[str],
        kbs: list[str],
        checker: Checker,
        rng: random.Random,
    ) -> None:
        super().__init__(name)
        self.client = api_client(key)
        self.groups = groups
        self.kbs = kbs
        self.checker = checker
        self.rng = rng
        self.answers = Tally()

    def step(self) -> None:
        body = {
            "kb": self.rng.choice(self.kbs),
            "query": " ".join(self.rng.sample(WORDS, self.rng.randint(1, 3))),
            "top_k": 50,
            "mode": self.rng.choice(MODES),
        }
        sent = time.time()
        response = self.client.post(
            "/api/v1/search", body, content_type="application/json", secure=True
        )
        received = time.time()
        self.answers.add(str(response.status_code))
        if response.status_code == 200:
            hits = tuple(
                Hit(h["document_key"], int(h["build_id"]), int(h["revision"]))
                for h in response.json()["hits"]
            )
            published, failed = publication_facts({h.build_id for h in hits})
            self.checker.check(
                ResultSet(self.name, self.groups, sent, received, hits),
                published=published,
                failed=failed,
            )
        else:
            self.answers.add(f"body:{response.status_code}", response.content[:200].decode())
        self.halt.wait(0.02)


SNAPSHOT_CHECK = """
SELECT b.id, b.state, b.expected_chunk_count, d.deleted_at IS NOT NULL,
       EXISTS (SELECT 1 FROM kb_publication p
               WHERE p.document_id = b.document_id AND p.build_id = b.id
                 AND p.index_version_id = k.active_index_version_id),
       (SELECT count(*) FROM kb_chunk c WHERE c.build_id = b.id)
  FROM kb_build b
  JOIN kb_document d ON d.id = b.document_id
  JOIN kb_knowledgebase k ON k.id = b.kb_id
 WHERE b.id = ANY(%s)
"""


class SnapshotSearcher(Searcher):
    """Searches through the search service in a repeatable-read snapshot and checks, in that
    same snapshot, that each hit's build is the live, complete build of a document that is not
    deleted, in the active index version; every result set also goes to the checker."""

    def __init__(self, world: World, checker: Checker, rng: random.Random) -> None:
        super().__init__("snapshot")
        self.world = world
        self.checker = checker
        self.rng = rng
        self.answers = Tally()
        self.principal = Principal(
            tenant_id=world.tenant.pk, kb_ids=None, access_groups=frozenset(), all_groups=True
        )

    def step(self) -> None:
        kb_slug = self.rng.choice(list(self.world.kbs))
        query = " ".join(self.rng.sample(WORDS, self.rng.randint(1, 3)))
        sent = time.time()
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                kb = KnowledgeBase.objects.select_related("active_index_version").get(
                    tenant=self.world.tenant, slug=kb_slug
                )
                result = search(
                    principal=self.principal,
                    kb=kb,
                    query=query,
                    top_k=50,
                    mode=self.rng.choice(MODES),
                )
                hits = tuple(Hit(h.document_key, h.build_id, h.revision) for h in result.hits)
                build_ids = {h.build_id for h in hits}
                with connection.cursor() as cursor:
                    cursor.execute(SNAPSHOT_CHECK, [sorted(build_ids)])
                    rows = cursor.fetchall()
                published, failed = publication_facts(build_ids)
        except Exception as exc:
            self.answers.add("error", f"{type(exc).__name__}: {exc}"[:300])
            connection.close()
            self.halt.wait(0.5)
            return
        received = time.time()
        self.answers.add("200")
        found = self.checker.check(
            ResultSet(self.name, None, sent, received, hits), published=published, failed=failed
        )
        where = f"snapshot at {sent:.3f}"
        extra = []
        for build_id, state, expected, deleted, live, chunks in rows:
            if not live or state != Build.State.LIVE:
                extra.append(f"{where}: build {build_id} ({state}) is not the live build")
            if chunks != expected:
                extra.append(f"{where}: build {build_id} has {chunks} of {expected} chunks")
            if deleted:
                extra.append(f"{where}: build {build_id}'s document is deleted")
        if len(rows) != len(build_ids):
            extra.append(f"{where}: builds {sorted(build_ids)} not all found")
        self.checker.record(extra)
        del found
        self.halt.wait(0.05)
