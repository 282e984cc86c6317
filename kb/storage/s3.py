"""The S3 backend: stored files as objects in an S3-compatible bucket (AWS S3, MinIO, Ceph RGW,
any cloud's S3 service), under `CANON_STORAGE_URL=s3://bucket/prefix`, with the same
content-addressed names as the local directory. Endpoint, region and credentials come from
boto3's environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,
or a role); `CANON_S3_*` set the addressing style, timeouts and attempts.

Writes are put-if-absent: a HEAD, then a conditional PUT (`If-None-Match: *`); a server without
conditional writes (501) gets a plain PUT after the HEAD, harmless because the key is the
bytes' SHA-256 (a racing writer writes the same bytes). Every PUT carries the bytes' SHA-256
(`x-amz-checksum-sha256`), so a server that checks it (AWS does) refuses bytes damaged on the
way. Nothing is ever
overwritten; reads hash what they download and compare it with the key (`kb.storage`).

Orphan collection (`ingestion.reconciler.files`) reads an object's age as the later of its
LastModified and its `canon-kept` tag: an upload that reuses an object stored before writes
that tag (the time, in UNIX seconds) under the storage lock held shared, and the collector
re-reads both under the lock held exclusively before it deletes. So, as on the local directory
(where the mtime is refreshed), an object an upload is about to name is never collected before
the upload commits. A tag changes neither the bytes nor LastModified and makes no new version.
Times come from each host's clock and from the store's; the grace period
(CANON_RECONCILER_ORPHAN_GRACE_SECONDS, an hour) absorbs their skew.

No message carries a credential: errors are rebuilt from the error code and HTTP status
(`_translated`), never from boto's text, and boto's loggers are held at WARNING
(config/settings.py)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from django.conf import settings
from urllib3.exceptions import HTTPError as Urllib3Error

from kb.storage.base import StorageError, StorageUnavailable, content_sha256, file_sha256
from kb.storage_lock import deletions_held

KEPT_TAG = "canon-kept"
MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
BUSY_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "ServiceUnavailable"}
)
RACE_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})


class S3Backend:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError(f"CANON_STORAGE_URL must look like s3://bucket/prefix, not {url!r}")
        self.bucket = parts.netloc
        prefix = parts.path.strip("/")
        self.prefix = f"{prefix}/" if prefix else ""
        self.client: Any = boto3.session.Session().client(
            "s3",
            config=Config(
                connect_timeout=settings.S3_CONNECT_TIMEOUT_SECONDS,
                read_timeout=settings.S3_READ_TIMEOUT_SECONDS,
                retries={"max_attempts": settings.S3_MAX_ATTEMPTS, "mode": "standard"},
                s3={"addressing_style": settings.S3_ADDRESSING_STYLE},
            ),
        )
        self.conditional_puts = True
        endpoint = urlsplit(str(self.client.meta.endpoint_url))
        # scheme, host and port only: a URL may carry user information
        self._endpoint = f"{endpoint.scheme}://{endpoint.hostname}" + (
            f":{endpoint.port}" if endpoint.port else ""
        )

    def location(self) -> str:
        return f"s3://{self.bucket}/{self.prefix} at {self._endpoint}"

    def key(self, relative: str) -> str:
        return self.prefix + relative

    def scratch_dir(self) -> Path | None:
        return None

    # -- writes ----------------------------------------------------------------------------

    def put_file(self, spooled: Path, *, relative: str) -> None:
        if self.size_of(relative) is not None and self.keep(relative):
            return
        try:
            self._put(spooled, relative)
        except _Exists:
            # another writer put the same bytes between our HEAD and PUT: theirs is ours
            if not self.keep(relative):
                self._put(spooled, relative)

    def _put(self, source: Path, relative: str) -> None:
        sha = content_sha256(relative)
        extra: dict[str, str] = {}
        if sha is not None:
            extra["ChecksumSHA256"] = base64.b64encode(bytes.fromhex(sha)).decode()
        if self.conditional_puts:
            extra["IfNoneMatch"] = "*"
        try:
            with source.open("rb") as body:
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=self.key(relative),
                    Body=body,
                    ContentType="application/octet-stream",
                    **extra,
                )
        except ClientError as exc:
            code = _code(exc)
            if code in RACE_CODES:
                raise _Exists() from None
            if code == "NotImplemented" and self.conditional_puts:
                self.conditional_puts = False  # HEAD then PUT from now on (see the docstring)
                self._put(source, relative)
                return
            self._translated(exc, "store", relative)
        except (BotoCoreError, Urllib3Error, ConnectionError) as exc:
            self._translated(exc, "store", relative)

    def keep(self, relative: str) -> bool:
        with deletions_held():
            try:
                self.client.put_object_tagging(
                    Bucket=self.bucket,
                    Key=self.key(relative),
                    Tagging={"TagSet": [{"Key": KEPT_TAG, "Value": str(int(time.time()))}]},
                )
            except ClientError as exc:
                if _code(exc) in MISSING_CODES:
                    return False
                self._translated(exc, "keep", relative)
            except (BotoCoreError, Urllib3Error, ConnectionError) as exc:
                self._translated(exc, "keep", relative)
        return True

    def delete(self, relative: str) -> None:
        with self._calling("delete", relative):
            self.client.delete_object(Bucket=self.bucket, Key=self.key(relative))

    def restore_file(self, source: Path, *, relative: str, sha256: str, move: bool) -> None:
        """Put-if-absent, after hashing the source (a store that checks the PUT's SHA-256
        checksum, as AWS does, refuses bytes damaged on the way, too)."""
        if content_sha256(relative) != sha256 or file_sha256(source)[0] != sha256:
            raise StorageError(f"{source} is not the bytes of {relative}; restore again")
        if self.size_of(relative) is not None:
            return
        with contextlib.suppress(_Exists):
            self._put(source, relative)

    # -- reads -----------------------------------------------------------------------------

    def size_of(self, relative: str) -> int | None:
        head = self._head(relative)
        return None if head is None else int(head["ContentLength"])

    def _head(self, relative: str) -> dict[str, Any] | None:
        try:
            return dict(self.client.head_object(Bucket=self.bucket, Key=self.key(relative)))
        except ClientError as exc:
            if _code(exc) in MISSING_CODES:
                return None
            self._translated(exc, "read", relative)
        except (BotoCoreError, Urllib3Error, ConnectionError) as exc:
            self._translated(exc, "read", relative)

    @contextlib.contextmanager
    def fetched(self, relative: str, *, digest: bool) -> Iterator[tuple[Path, str | None]]:
        """Downloads into a temporary file (hashing on the way), removed when the context ends."""
        fd, name = tempfile.mkstemp(prefix="canon-fetched-")
        try:
            hasher = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, self._calling("read", relative):
                body = self.client.get_object(Bucket=self.bucket, Key=self.key(relative))["Body"]
                for block in body.iter_chunks(1 << 20):
                    hasher.update(block)
                    out.write(block)
            yield Path(name), hasher.hexdigest() if digest else None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def read_bytes(self, relative: str) -> bytes:
        with self._calling("read", relative):
            body = self.client.get_object(Bucket=self.bucket, Key=self.key(relative))["Body"]
            return bytes(body.read())

    def list_files(self, kind: str) -> Iterator[tuple[str, float]]:
        with self._calling("list", f"{kind}/"):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.key(f"{kind}/")
            )
            for page in pages:
                for item in page.get("Contents", []):
                    yield item["Key"][len(self.prefix) :], item["LastModified"].timestamp()

    def kept_at(self, relative: str) -> float | None:
        head = self._head(relative)
        if head is None:
            return None
        written = float(head["LastModified"].timestamp())
        with self._calling("read the tags of", relative):
            try:
                tags = self.client.get_object_tagging(Bucket=self.bucket, Key=self.key(relative))
            except ClientError as exc:
                if _code(exc) in MISSING_CODES:
                    return None
                raise
        kept = [t["Value"] for t in tags.get("TagSet", []) if t["Key"] == KEPT_TAG]
        return max([written, *(float(v) for v in kept if v.isdigit())])

    # -- errors ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _calling(self, what: str, relative: str) -> Iterator[None]:
        try:
            yield
        except ClientError as exc:
            if _code(exc) in MISSING_CODES:
                raise FileNotFoundError(relative) from None
            self._translated(exc, what, relative)
        except (BotoCoreError, Urllib3Error, ConnectionError) as exc:
            self._translated(exc, what, relative)

    def _translated(self, exc: Exception, what: str, relative: str) -> NoReturn:
        """Canon's error for a failed call, from codes only (boto's text may quote a request),
        chained to nothing, so a logged traceback carries no boto frame text either."""
        where = f"the object store s3://{self.bucket}/{self.prefix} at {self._endpoint}"
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            raise StorageError(
                f"no credentials for {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "(or give the host a role)"
            ) from None
        if isinstance(exc, ClientError):
            code = _code(exc)
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if status >= 500 or code in BUSY_CODES:
                raise StorageUnavailable(
                    f"{where} could not {what} {relative} now ({code or status}); try again later"
                ) from None
            raise StorageError(
                f"{where} refused to {what} {relative}: {code or 'error'} (HTTP {status})"
            ) from None
        raise StorageUnavailable(
            f"{where} is unreachable ({type(exc).__name__} while trying to {what} {relative}); "
            "try again later"
        ) from None


class _Exists(Exception):
    """A conditional PUT found the key taken."""


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
