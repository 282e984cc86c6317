"""What a knowledge base's files are read for (issue 37): `ocr_mode` (off, pages without text
only — what every knowledge base did before, so existing ones keep it — or always) and
`extract_headers_footers` (DOCX page headers and footers; off, as before). Both have a database
default, so a process still running the previous code can insert a knowledge base meanwhile."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0021_visibility_statistics"),
    ]

    operations = [
        migrations.AddField(
            model_name="knowledgebase",
            name="ocr_mode",
            field=models.CharField(
                choices=[
                    ("off", "Off"),
                    ("pages_without_text", "Pages without text only"),
                    ("always", "Always, also pictures on pages with text"),
                ],
                db_default="pages_without_text",
                default="pages_without_text",
                help_text=(
                    "OCR reads the text of pictures. Pages without text only: images, and PDF "
                    "pages that have no text layer (scans). Always: also the pictures placed on "
                    "PDF pages that do have text (scanned inserts, screenshots, words in a "
                    "chart); slower. Off: an image fails its build and a PDF page without text "
                    "is skipped (the build says which). Applies to files built from now on; the "
                    "server's CANON_OCR=off turns it off for every knowledge base."
                ),
                max_length=24,
                verbose_name="OCR",
            ),
        ),
        migrations.AddField(
            model_name="knowledgebase",
            name="extract_headers_footers",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text=(
                    "Index the page headers and footers of word-processing documents (DOCX): "
                    "often a company name and page numbers repeated on every page, so off by "
                    "default. Footnotes are always indexed. Applies to files built from now on."
                ),
                verbose_name="index page headers and footers",
            ),
        ),
        migrations.AddConstraint(
            model_name="knowledgebase",
            constraint=models.CheckConstraint(
                condition=models.Q(("ocr_mode__in", ["off", "pages_without_text", "always"])),
                name="kb_ocr_mode_known",
            ),
        ),
    ]
