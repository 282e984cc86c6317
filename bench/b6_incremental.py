"""B6 incremental: re-upload a 200-chunk document of the corpus with one paragraph changed;
report the share of chunks re-embedded (the embed stage's own count of cache misses)."""

from __future__ import annotations

import random
import time

from bench import common


def main() -> None:
    a = common.args(__doc__ or "", paragraph=100)
    common.setup()
    from ingestion.models import StageResult
    from kb.models import Build, Document

    kb = common.tenant_kb(common.CORPUS_SLUG)
    document = Document.objects.filter(kb=kb).order_by("key").first()
    assert document is not None, "run B1 first"
    seed = int(document.key.split("-")[1])
    paragraphs = common.document_paragraphs(seed=seed)
    paragraphs[a.paragraph] = common.paragraph(random.Random(time.time_ns()))
    with common.worker(concurrency=1):
        common.upload(kb, document.key, common.join(paragraphs))
        common.wait_settled(kb)
    build = Build.objects.filter(document=document).order_by("-pk").first()
    assert build is not None and build.state == Build.State.LIVE, build
    embed = StageResult.objects.get(task__build=build, stage=StageResult.Stage.EMBED).output
    total = embed["embedded"] + embed["cached"]
    share = embed["embedded"] / total
    common.report(
        "B6",
        {"chunks": total, **embed, "share_reembedded": round(share, 4)},
        [
            ("chunks", "re-embedded", "cache hits", "share"),
            (total, embed["embedded"], embed["cached"], f"{share:.2%}"),
        ],
    )


if __name__ == "__main__":
    main()
