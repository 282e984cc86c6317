"""The Celery app. Periodic tasks are declared here, once; beat's scheduler (`config.beat`, a
django-celery-beat DatabaseScheduler) copies them into its tables when a definition changes and
records every run in its row, so a restarted or second beat keeps each job's clock."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("canon")
app.config_from_object("config.celery_settings")  # read lazily; see that module
app.autodiscover_tasks()

# No `expires` on these sends: the jobs share the workers' queue with builds, and behind a backlog
# a job must run late, not be dropped (an expired relay or sweep would not run at all until the
# queue is short again). Late sends that pile up are harmless: each job is single-flight, and a run
# with nothing to do is cheap.
app.conf.beat_schedule = {
    "outbox-relay": {
        "task": "ingestion.tasks.relay_outbox",
        "schedule": float(os.environ.get("CANON_RELAY_INTERVAL_SECONDS", "1.0")),
    },
    "lease-sweeper": {
        "task": "ingestion.tasks.sweep_leases",
        "schedule": float(os.environ.get("CANON_SWEEP_INTERVAL_SECONDS", "15.0")),
    },
    "reconciler": {
        "task": "ingestion.tasks.reconcile",
        "schedule": float(os.environ.get("CANON_RECONCILE_INTERVAL_SECONDS", "60.0")),
    },
    "retention-gc": {
        "task": "ingestion.tasks.collect_garbage",
        "schedule": float(os.environ.get("CANON_GC_INTERVAL_SECONDS", "300.0")),
    },
    "idempotency-expiry": {
        "task": "retrieval.tasks.expire_idempotency_records",
        "schedule": float(os.environ.get("CANON_GC_INTERVAL_SECONDS", "300.0")),
    },
    "source-syncs": {
        "task": "sources.tasks.start_due_syncs",
        "schedule": float(os.environ.get("CANON_SOURCES_INTERVAL_SECONDS", "60.0")),
    },
    "ann-indexes": {
        "task": "ingestion.tasks.build_ann_indexes",
        "schedule": float(os.environ.get("CANON_ANN_INDEX_INTERVAL_SECONDS", "60.0")),
    },
    # Nightly evaluations due (each knowledge base's quality gate says when) and runs whose
    # worker gave up (evaluation.services.schedule, evaluation.services.runs).
    "evaluation-runs": {
        "task": "evaluation.tasks.scheduled_runs",
        "schedule": float(os.environ.get("CANON_EVALUATION_INTERVAL_SECONDS", "300.0")),
    },
}
