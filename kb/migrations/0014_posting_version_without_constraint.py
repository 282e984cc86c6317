"""Posting.index_version without its foreign-key constraint: the posting's chunk has one, and
the posting's version is the chunk's, copied for the keyword index. Dropping the constraint
takes a brief lock on kb_posting and rewrites nothing."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0013_chunk_build_audit_index"),
    ]

    operations = [
        migrations.AlterField(
            model_name="posting",
            name="index_version",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="kb.indexversion",
            ),
        ),
    ]
