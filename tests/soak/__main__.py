"""`python -m tests.soak [--minutes 5] [--seed N]` (`make soak`, SOAK_ARGS): a bounded, randomised
soak (docs/SOAK.md). Not part of `make test`.

It takes a database of its own (`canon_soak`, dropped and created again, on the server of
DATABASE_URL), a Redis server of its own on `--redis-port` (never the shared one), two Celery
workers and a beat, all started here. A driver uploads, revises, deletes, restores, approves,
rolls back and swaps index versions; a chaos thread kills, stops and restarts the workers, the
beat and Redis; searchers check every result set against the visibility rule. Then the chaos
stops, the soak waits for everything to converge, reports, and runs kb_verify. Exit status 0
only with no violation, convergence in time, no upload lost and kb_verify clean.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg

from devtools.devstack import ROOT, _redis_answers

SOAK_DIR = ROOT / ".data" / "soak"
QUEUE = "soak"
LEASE_TTL = 4.0
SWEEP_INTERVAL = 3.0


def database_urls(database: str) -> tuple[str, str]:
    """(the server's maintenance database, the soak's database), on DATABASE_URL's server."""
    base = urlsplit(os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:54329/")
    return (
        urlunsplit(base._replace(path="/postgres")),
        urlunsplit(base._replace(path=f"/{database}")),
    )


def database_recreate(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def environment(*, database_url: str, redis_port: int) -> dict[str, str]:
    """What the soak process and every process it starts run with."""
    return {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": database_url,
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "CANON_CACHE_URL": f"redis://127.0.0.1:{redis_port}/1",
        "CANON_QUEUE": QUEUE,
        "CANON_STORAGE_ROOT": str(SOAK_DIR / "storage"),
        "CANON_EMBEDDING_PROVIDER": "hash",
        "CANON_EMBEDDING_MODEL": "canon-hash-v1",
        "CANON_EMBEDDING_DIMENSIONS": "384",
        "CANON_PRELOAD_EMBEDDING_MODELS": "",
        # Short leases and a quick sweeper, so a stopped worker's task moves on within seconds;
        # slow chunk batches, so kills and stops land in the middle of builds.
        "CANON_LEASE_TTL_SECONDS": str(LEASE_TTL),
        "CANON_SWEEP_INTERVAL_SECONDS": str(SWEEP_INTERVAL),
        "CANON_RELAY_INTERVAL_SECONDS": "1",
        "CANON_RECONCILE_INTERVAL_SECONDS": "10",
        "CANON_GC_INTERVAL_SECONDS": "30",
        "CANON_CHUNK_WRITE_BATCH": "1",
        "CANON_FAULT_CHUNK_BATCH_DELAY": "0.15",
        "CANON_API_RATE": "1000000/min",
        "LOG_FORMAT": "plain",
        "PYTHONUNBUFFERED": "1",
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0, help="of chaos (default 5)")
    parser.add_argument("--seed", type=int, default=None, help="repeat a run (default: random)")
    parser.add_argument("--redis-port", type=int, default=6395)
    parser.add_argument("--database", default="canon_soak")
    parser.add_argument("--converge-timeout", type=float, default=600.0)
    parser.add_argument(
        "--volatile-redis",
        action="store_true",
        help="Redis without its append-only file: a kill loses the queued messages",
    )
    args = parser.parse_args(argv)
    if not args.database.startswith("canon_soak"):
        parser.error("the soak drops its database; its name must start with canon_soak")
    if _redis_answers("127.0.0.1", args.redis_port):
        parser.error(f"something answers on port {args.redis_port}; choose --redis-port")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)

    admin_url, database_url = database_urls(args.database)
    database_recreate(admin_url, args.database)
    shutil.rmtree(SOAK_DIR, ignore_errors=True)
    logs = SOAK_DIR / "logs"
    logs.mkdir(parents=True)
    os.environ.update(environment(database_url=database_url, redis_port=args.redis_port))

    import warnings

    import django

    warnings.filterwarnings("ignore", message="No directory at")  # static files: no server here

    django.setup()
    # The soak's own log (warnings while Redis is down, say) goes to a file; stdout is the report.
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    to_file = logging.FileHandler(logs / "soak.log")
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(to_file)
    from django.core.management import call_command

    from tests.soak import processes, runner, world

    call_command("migrate", verbosity=0, interactive=False)
    env = dict(os.environ)
    services = {
        "redis": processes.redis_service(
            args.redis_port, SOAK_DIR / "redis", logs / "redis.log", durable=not args.volatile_redis
        ),
        "worker-1": processes.worker_service(1, queue=QUEUE, env=env, log=logs / "worker-1.log"),
        "worker-2": processes.worker_service(2, queue=QUEUE, env=env, log=logs / "worker-2.log"),
        "beat": processes.beat_service(env=env, log=logs / "beat.log"),
    }
    try:
        services["redis"].start(wait=30)
        for service in services.values():
            service.start()
        deadline = time.monotonic() + 120
        for name in ("worker-1", "worker-2"):
            while "ready." not in (logs / f"{name}.log").read_text(errors="replace"):
                if time.monotonic() > deadline or not services[name].running:
                    raise RuntimeError(f"{name} did not start; see {logs / name}.log")
                time.sleep(0.2)
        settings = world.Settings(
            minutes=args.minutes,
            seed=seed,
            lease_ttl=LEASE_TTL,
            sweep_interval=SWEEP_INTERVAL,
            converge_timeout=args.converge_timeout,
            logs=logs,
        )
        return runner.run(settings, services)
    finally:
        for service in services.values():
            if service.name != "redis":
                service.terminate(timeout=20)
        services["redis"].terminate(timeout=10)
        print(f"[soak] processes stopped; database {args.database} kept for inspection")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
