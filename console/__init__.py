"""The admin, the one screen a person uses: every model admin, admin view and confirmation page,
the consistency dashboard, the knowledge-base home and the demo's bootstrap. A Django app without
models: it registers the other apps' models, so admin URLs, permissions and templates keep their
apps' names (`/admin/kb/document/`, `kb.approve_build`, `templates/admin/kb/...`)."""
