"""chunk_build_audit: (build, ordinal) INCLUDE (content_hash), so the shard summaries of kb.audit
read counts and digests of chunks from the index alone.

Built CONCURRENTLY (a non-atomic migration of its own): chunk writes go on while it is built,
at the price of two passes over the table; an interrupted build leaves an INVALID index that
must be dropped (DROP INDEX CONCURRENTLY chunk_build_audit) before the migration runs again.
At 1M chunks it took 5 s and is 100 MB.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("kb", "0012_indexversion_vector_storage"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="chunk",
            index=models.Index(
                fields=["build", "ordinal"], include=["content_hash"], name="chunk_build_audit"
            ),
        ),
    ]
