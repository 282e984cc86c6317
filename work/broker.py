"""Broker side of the outbox relay: Celery messages for `run_task`, many per Redis round trip.

`Task.apply_async` spends about 0.25 ms of Python per message before kombu sees it (eager and
argument checks, the task's execution options merged into every call, lookups through Celery's
layered configuration, an AsyncResult and its parent trail). The relay sends the same task with
the same options for every event, so `RunTaskBatch` prepares those once per batch, as
`Celery.send_task` would, routes with Celery's router (`app.amqp.router.route`: once per batch
without `task_routes`, else per message), and per event only builds the message with Celery's
protocol (`app.amqp.create_task_message`) and hands it to Celery's sender
(`app.amqp.send_task_message`: publish signals, serializer, queue declaration), inside kombu's
`Producer.batch`, whose Redis transport buffers each LPUSH in one non-transactional pipeline
until `flush`. `tests/ingestion/test_relay.py` pins that the message is the one `apply_async`
sends. Nothing here touches the database: `ingestion.relay.outbox_relay_batch` claims the
events and marks what was sent.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from celery import current_app
from django.conf import settings
from kombu.exceptions import BatchPublishError  # type: ignore[attr-defined]  # stubs predate 5.7
from kombu.exceptions import OperationalError as KombuOperationalError
from kombu.utils.uuid import uuid

logger = logging.getLogger(__name__)

# The task a `run_task` message runs (`ingestion.tasks.run_task`), by its registered name.
RUN_TASK = "ingestion.tasks.run_task"

# Messages per Redis round trip: 500 (~0.5 MB) make the round trips a small share of a pass
# (B5's profile: 13-16 %, mostly redis-py packing) and bound what one refused round trip leaves
# to send again.
ROUND_TRIP_SIZE = 500

# Options `send_task` takes out of the execution options and passes to the message builder.
_MESSAGE_OPTIONS = ("time_limit", "soft_time_limit", "expires")


@contextlib.contextmanager
def producer(app: Any) -> Iterator[Any]:
    """A producer whose broker connection is up, failing at once when it cannot be reached.

    `retry=False` on a publish only stops Celery from retrying the publish; kombu still retries
    the *connection* until `broker_connection_timeout` before raising (about 6 s per message when
    Redis refuses connections). One connection attempt is enough here: the outbox keeps the
    intent and the relay backs off.
    """
    with app.producer_or_acquire() as pooled:
        pooled.connection.ensure_connection(max_retries=0)
        yield pooled


def registered_task(name: str) -> Any:
    """The task registered as `name`, whose options shape its messages. Outside a worker Celery
    imports the apps' task modules lazily, so the first look-up of a process imports them."""
    if name not in current_app.tasks:
        current_app.loader.import_default_modules()
    return current_app.tasks[name]


def publish(name: str, *, args: tuple[Any, ...] = (), **options: Any) -> None:
    """Publish one message for the task `name` through its `apply_async`, failing at once when
    the broker is down."""
    task = registered_task(name)
    with producer(task.app) as pooled:
        task.apply_async(args=args, producer=pooled, retry=False, **options)


class RunTaskBatch:
    """`run_task` messages buffered in one kombu publish batch; `flush` sends them.

    Not thread-safe (one producer, one pipeline). `add` does no I/O but the batch's first
    declaration of the queue, and raises for that message only; `flush` raises
    `BatchPublishError` when the round trip failed, and then *every* message added since the
    last successful flush may or may not be in Redis: the caller sends them again (consumers are
    idempotent). After a failed flush the batch is unusable.
    """

    def __init__(self, pooled: Any, batch: Any) -> None:
        run_task = registered_task(RUN_TASK)
        app = run_task.app
        self._producer = pooled
        self._batch = batch
        self._task = run_task
        self._create = app.amqp.create_task_message
        self._send = app.amqp.send_task_message
        self._router = app.amqp.router
        # What `apply_async` and `send_task` compute per call, computed once: the task's
        # execution options, the message-only options, the sender's identity and parent task.
        options = {k: v for k, v in run_task._get_exec_options().items() if v is not None}
        options.setdefault("ignore_result", run_task.ignore_result)
        self._message_options = {k: options.pop(k, None) for k in _MESSAGE_OPTIONS}
        self._ignore_result = options.pop("ignore_result")
        self._options = options
        self._reply_to = app.thread_oid
        self._sent_event = app.conf.task_send_sent_event
        self._backend = None if self._ignore_result else app.backend
        parent = app.current_worker_task
        self._root_id = parent and (parent.request.root_id or parent.request.id)
        self._parent_id = parent and parent.request.id
        # With no task_routes, Celery's router sends every message of a task to the default
        # queue whatever its arguments: it is asked once per batch. With routes (which may look
        # at the arguments), once per message.
        self._route = (
            None
            if self._router.routes
            else self._router.route(dict(options), run_task.name, (), {}, run_task)
        )
        self._declared = False

    def add(self, task_id: int) -> None:
        """Buffer the message that makes a worker run `run_task(task_id)`."""
        name = self._task.name
        args = (task_id,)
        if self._route is not None:
            options = dict(self._route)
        else:
            options = self._router.route(dict(self._options), name, args, {}, self._task)
        message_id = uuid()
        message = self._create(
            message_id,
            name,
            args,
            {},
            reply_to=self._reply_to,
            create_sent_event=self._sent_event,
            root_id=self._root_id,
            parent_id=self._parent_id,
            ignore_result=self._ignore_result,
            # ready-made reprs spare Celery a saferepr per message
            argsrepr=f"({task_id},)",
            kwargsrepr="{}",
            **self._message_options,
            **options,
        )
        if self._declared:
            options["declare"] = []  # the batch's first message declared the queue
        # As send_task does: a broker error (a refused declare, say) surfaces as kombu's
        # OperationalError, which the relay reads as the broker's fault, not the event's.
        with self._producer.connection._reraise_as_library_errors():
            if self._backend is not None:
                self._backend.on_task_call(self._producer, message_id)
            self._send(self._producer, name, message, retry=False, **options)
        self._declared = True

    def flush(self) -> None:
        """Send what was added since the last flush in one round trip."""
        self._batch.flush()


@contextlib.contextmanager
def run_task_batch(*, max_size: int) -> Iterator[RunTaskBatch]:
    """A `RunTaskBatch` on a connected producer (see `producer`). Leaving the block flushes what
    is left; leaving it by an exception discards what was not flushed. `max_size` bounds the
    buffer (kombu flushes by itself past it); callers that track what was sent flush sooner."""
    with (
        producer(registered_task(RUN_TASK).app) as pooled,
        pooled.batch(max_size=max_size) as batch,
    ):
        yield RunTaskBatch(pooled, batch)


def queue_length() -> int | None:
    """Messages waiting in the task queue (None: the broker cannot be asked)."""
    try:
        with current_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)
            # Not passive: Redis keeps no key for an empty queue, and declaring creates none.
            channel: Any = connection.default_channel
            declared = channel.queue_declare(queue=settings.CELERY_TASK_DEFAULT_QUEUE)
            return int(declared.message_count)
    except Exception as exc:  # the broker is down: nothing to conclude about lost messages
        logger.warning("cannot read the task queue's length: %s", exc)
        return None


def broker_unreachable(exc: BaseException) -> bool:
    """True when `exc` says the broker could not take messages (down, refusing, a failed round
    trip of a batch): nothing about the event itself."""
    return isinstance(exc, ConnectionError | KombuOperationalError | OSError | BatchPublishError)
