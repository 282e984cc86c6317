"""An S3-compatible bucket (AWS S3, MinIO, Ceph RGW, any cloud's S3 service): every object under
the prefix is an item, its path the key after the prefix. The prefix is a folder: `docs` is read
as `docs/`.

The client is built from the source alone, never from the process's environment: Canon's own
storage may be configured through AWS_ENDPOINT_URL and AWS_ACCESS_KEY_ID, and a source must not
reach that bucket with those keys. With no credentials the requests are unsigned (a public
bucket). The endpoint's host passes `sources.network.host_check` before every listing.

An item's version is the ETag and the size. Tags can change without changing the ETag, so by
default a tag change alone makes no new version: the tags are read again when the bytes change.
With `tags_each_sync` set to "yes", every listing also reads each object's tags (one more request
an object) and a digest of them joins the version, so a tag change alone is fetched and the
document's mapped metadata updated (the same bytes make no new revision); an object whose tags
cannot be read is an incomplete Problem (the run then deletes nothing).

No message carries a credential: errors are rebuilt from the error code and HTTP status, never
from boto's text (which may quote a request), and chained to nothing (as kb/storage/s3.py)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, ClassVar
from urllib.parse import urlsplit

import boto3
from botocore import UNSIGNED
from botocore.awsrequest import AWSHTTPConnectionPool, AWSHTTPSConnectionPool
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    HTTPClientError,
    ReadTimeoutError,
)
from django.utils.translation import gettext_noop
from urllib3.exceptions import HTTPError as Urllib3Error

from sources.kinds.base import (
    ITEM_GONE,
    ITEM_LIMIT,
    ITEM_OVER_LIMIT,
    ITEM_TOO_LARGE,
    LISTED_TOO_LARGE,
    ConfigInvalid,
    Fetched,
    Item,
    ItemProblem,
    Kind,
    ListingFailed,
    Problem,
    SourceError,
    SourceUnavailable,
)
from sources.kinds.front_matter import item_front_matter
from sources.network import AddressRefused, host_check, peer_checked_pools, url_check
from textkit.reasons import Reason, Words, reason

MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
CREDENTIAL_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "AuthorizationHeaderMalformed",
        "InvalidClientTokenId",
    }
)
DENIED_CODES = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem", "403"})
BUSY_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "ServiceUnavailable"}
)
# ContentTypes that say nothing about the bytes (S3's default is the first).
UNTYPED = frozenset({"binary/octet-stream", "application/octet-stream"})
NETWORK_ERRORS = (BotoCoreError, Urllib3Error, ConnectionError)

_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
_REGION = re.compile(r"[a-z0-9-]{1,40}")

# What a bucket source says. `bucket` and `endpoint` (scheme, host and port only, or "AWS S3")
# name where; `code` is the error code S3 answered (or its HTTP status), `error` the class name
# of what failed on the way. Never a credential, nor boto's text.
SETTING_NOT_TEXT = reason(
    "s3.setting_not_text", gettext_noop("The %(name)s of an S3 bucket source must be text.")
)
BAD_BUCKET = reason(
    "s3.bad_bucket",
    gettext_noop(
        "%(bucket)s is not a bucket name: 3 to 63 lowercase letters, digits, dots, hyphens or "
        "underscores, starting and ending with a letter or digit."
    ),
)
BAD_REGION = reason(
    "s3.bad_region", gettext_noop("%(region)s is not a region name (e.g. eu-west-1).")
)
TAGS_YES_OR_NO = reason(
    "s3.tags_yes_or_no", gettext_noop("The 'tags_each_sync' of an S3 bucket source is yes or no.")
)
ENDPOINT_INVALID = reason(
    "s3.endpoint_invalid", gettext_noop("The endpoint URL is not a valid URL.")
)
ENDPOINT_USERINFO = reason(
    "s3.endpoint_userinfo",
    gettext_noop(
        "The endpoint URL may not hold a user name, password, query or fragment; credentials go "
        "in access_key_id and secret_access_key."
    ),
)
ONE_CREDENTIAL = reason(
    "s3.one_credential",
    gettext_noop(
        "The S3 bucket source has only one of access_key_id and secret_access_key; give both, or "
        "neither for a public bucket."
    ),
)
BAD_KEY = reason(
    "s3.bad_key", gettext_noop("the key is not a usable path (an empty, '.' or '..' part)")
)
# `detail`: why the tags could not be read (one of the reasons below).
TAGS_UNREADABLE = reason(
    "s3.tags_unreadable", gettext_noop("its tags could not be read: %(detail)s")
)
ITEM_REFUSED = reason("s3.item_refused", gettext_noop("%(path)s: %(detail)s"))
CREDENTIALS_REFUSED = reason(
    "s3.credentials_refused",
    gettext_noop("The bucket %(bucket)s at %(endpoint)s refused the credentials (%(code)s)."),
)
NO_SUCH_BUCKET = reason(
    "s3.no_such_bucket",
    gettext_noop("The bucket %(bucket)s does not exist at %(endpoint)s (NoSuchBucket)."),
)
TIMED_OUT = reason(
    "s3.timed_out",
    gettext_noop("The bucket %(bucket)s at %(endpoint)s did not answer in time (%(error)s)."),
)
UNREACHABLE = reason(
    "s3.unreachable",
    gettext_noop("The bucket %(bucket)s at %(endpoint)s cannot be reached (%(error)s)."),
)
# What a call was refused or failed to do, one reason per call: listing the bucket, reading an
# object, reading an object's tags.
LIST, READ, READ_TAGS = "list", "read", "tags"
DENIED: dict[str, Words] = {
    LIST: reason(
        "s3.list_denied",
        gettext_noop(
            "The bucket %(bucket)s at %(endpoint)s refused access (%(code)s): the credentials "
            "may not list it."
        ),
    ),
    READ: reason(
        "s3.read_denied",
        gettext_noop(
            "The bucket %(bucket)s at %(endpoint)s refused access (%(code)s): the credentials "
            "may not read it."
        ),
    ),
    READ_TAGS: reason(
        "s3.read_tags_denied",
        gettext_noop(
            "The bucket %(bucket)s at %(endpoint)s refused access (%(code)s): the credentials "
            "may not read the tags of it."
        ),
    ),
}
FAILED: dict[str, Words] = {
    LIST: reason(
        "s3.list_failed",
        gettext_noop(
            "The bucket %(bucket)s at %(endpoint)s failed to list (%(code)s); try again later."
        ),
    ),
    READ: reason(
        "s3.read_failed",
        gettext_noop(
            "The bucket %(bucket)s at %(endpoint)s failed to read (%(code)s); try again later."
        ),
    ),
    READ_TAGS: reason(
        "s3.read_tags_failed",
        gettext_noop(
            "The bucket %(bucket)s at %(endpoint)s failed to read the tags of (%(code)s); try "
            "again later."
        ),
    ),
}
REFUSED: dict[str, Words] = {
    LIST: reason(
        "s3.list_refused",
        gettext_noop(
            "The bucket %(bucket)s at %(endpoint)s refused to list: %(code)s (HTTP %(status)s)."
        ),
    ),
    READ: reason(
        "s3.read_refused",
        gettext_noop(
            "The bucket %(bucket)s at %(endpoint)s refused to read: %(code)s (HTTP %(status)s)."
        ),
    ),
    READ_TAGS: reason(
        "s3.read_tags_refused",
        gettext_noop(
            "The bucket %(bucket)s at %(endpoint)s refused to read the tags of: %(code)s "
            "(HTTP %(status)s)."
        ),
    ),
}


class S3Kind(Kind):
    name = "s3"
    label = "S3 bucket"
    CONFIG_FIELDS = ("endpoint_url", "bucket", "prefix", "region", "tags_each_sync")
    CONFIG_HELP: ClassVar[dict[str, str]] = {
        "tags_each_sync": "yes: read every object's tags at each sync (one more request an "
        "object), so a tag change alone updates the document's metadata. Empty or no: tags "
        "are read when the bytes change.",
    }
    REQUIRED_FIELDS = ("bucket",)
    SECRET_FIELDS = ("access_key_id", "secret_access_key")

    # Keys per listing request (S3's maximum); the tests make it small to exercise pagination.
    _page_size = 1000
    # Attempts per request, the retries backing off (botocore's "standard" mode).
    _max_attempts = 3

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._s3: Any = None

    @classmethod
    def check_config(cls, config: Mapping[str, Any], *, allow_private: bool) -> dict[str, Any]:
        """Strings only; `endpoint_url` (optional, AWS when empty) an http(s) URL whose host a
        source may reach, with no user information; a valid bucket name; `prefix` stored as a
        folder ('docs/'); `region` like 'eu-west-1'; `tags_each_sync` "yes" or "no" (kept only
        when "yes")."""
        checked = super().check_config(config, allow_private=allow_private)
        for field in cls.CONFIG_FIELDS:
            if not isinstance(checked.get(field, ""), str):
                raise ConfigInvalid(SETTING_NOT_TEXT(name=repr(field)))
        endpoint = checked.get("endpoint_url", "").strip()
        if endpoint:
            _endpoint_check(endpoint, allow_private=allow_private)
            checked["endpoint_url"] = endpoint.rstrip("/")
        if not _BUCKET.fullmatch(checked["bucket"]) or ".." in checked["bucket"]:
            raise ConfigInvalid(BAD_BUCKET(bucket=repr(checked["bucket"])))
        if "prefix" in checked:
            checked["prefix"] = _folder(checked["prefix"])
        if checked.get("region") and not _REGION.fullmatch(checked["region"]):
            raise ConfigInvalid(BAD_REGION(region=repr(checked["region"])))
        if "tags_each_sync" in checked:
            answer = checked.pop("tags_each_sync").strip().lower()
            if answer not in ("", "yes", "no"):
                raise ConfigInvalid(TAGS_YES_OR_NO())
            if answer == "yes":
                checked["tags_each_sync"] = "yes"
        return checked

    @property
    def bucket(self) -> str:
        return str(self.config["bucket"])

    @property
    def prefix(self) -> str:
        return _folder(str(self.config.get("prefix") or ""))

    @property
    def endpoint(self) -> str:
        """Scheme, host and port only (a URL may carry user information); "AWS S3" for AWS."""
        url = str(self.config.get("endpoint_url") or "")
        if not url:
            return "AWS S3"
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}"

    # -- listing -----------------------------------------------------------------------------

    def listing(self, previous: Mapping[str, Mapping[str, Any]]) -> Iterator[Item | Problem]:
        """Objects under the prefix in key order. Raises ListingFailed when the bucket cannot
        be listed or stops answering part-way (after what was already yielded)."""
        client = self._client(ListingFailed)
        self._host_check(ListingFailed)  # again, each run: the name may point elsewhere now
        prefix = self.prefix
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": self._page_size}
        )
        listed = 0
        try:
            for page in pages:
                for entry in page.get("Contents", []):
                    path = str(entry["Key"])[len(prefix) :]
                    if not path or path.endswith("/"):
                        continue  # a "folder" marker, not a document
                    if not self.patterns.admits(path):
                        continue
                    found = self._listed(entry, path)
                    if isinstance(found, Item) and self.config.get("tags_each_sync") == "yes":
                        found = self._with_tags(client, found, str(entry["Key"]))
                    listed += 1
                    if listed > self.limits.max_items:
                        yield Problem(
                            path, ITEM_LIMIT(limit=self.limits.max_items), incomplete=True
                        )
                        return
                    yield found
        except (ClientError, *NETWORK_ERRORS) as exc:
            raise ListingFailed(self._told(exc, LIST)) from None

    def _listed(self, entry: Mapping[str, Any], path: str) -> Item | Problem:
        if any(part in ("", ".", "..") for part in path.split("/")):
            return Problem(path, BAD_KEY())
        size = int(entry.get("Size") or 0)
        if size > self.limits.max_item_bytes:
            return Problem(path, LISTED_TOO_LARGE(size=size, limit=self.limits.max_item_bytes))
        etag = str(entry.get("ETag") or "").strip('"')
        return Item(
            path=path,
            version=f"{etag}-{size}",
            size=size,
            modified=entry.get("LastModified"),
        )

    def _with_tags(self, client: Any, item: Item, key: str) -> Item | Problem:
        """`item` with a digest of the object's tags in its version (none without tags, so an
        untagged object keeps the version it had without the option)."""
        try:
            tags = self._tags(client, key, None)
        except SourceUnavailable as exc:
            return Problem(item.path, TAGS_UNREADABLE(detail=exc.why), incomplete=True)
        if not tags:
            return item
        digest = hashlib.sha256(json.dumps(tags, sort_keys=True).encode()).hexdigest()[:16]
        return replace(item, version=f"{item.version}-tags:{digest}")

    # -- fetch -------------------------------------------------------------------------------

    def fetch(self, item: Item) -> Fetched:
        """The object's bytes; metadata a Markdown object's front matter, its user metadata
        (x-amz-meta-*) over that and its tags over both. The object may have changed since the
        listing: the bytes read now are returned, and the next run lists the new ETag and
        fetches again (same bytes, no new revision)."""
        client = self._client(SourceUnavailable)
        key = self.prefix + item.path
        limit = self.limits.max_item_bytes
        try:
            response = client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            raise self._fetch_error(exc, item.path) from None
        except NETWORK_ERRORS as exc:
            raise SourceUnavailable(self._told(exc, READ)) from None
        body = response["Body"]
        try:
            length = int(response.get("ContentLength") or 0)
            if length > limit:
                raise ItemProblem(ITEM_TOO_LARGE(path=item.path, size=length, limit=limit))
            data = _read_at_most(body, limit + 1)
        except NETWORK_ERRORS as exc:
            raise SourceUnavailable(self._told(exc, READ)) from None
        finally:
            body.close()
        if len(data) > limit:
            raise ItemProblem(ITEM_OVER_LIMIT(path=item.path, limit=limit))
        metadata = item_front_matter(item, data)
        metadata.update(response.get("Metadata") or {})
        metadata.update(self._tags(client, key, response.get("VersionId")))
        content_type = str(response.get("ContentType") or "").strip()
        media_type = "" if content_type.split(";")[0].strip().lower() in UNTYPED else content_type
        return Fetched(data=data, media_type=media_type, metadata=metadata)

    def _tags(self, client: Any, key: str, version_id: str | None) -> dict[str, str]:
        """The object's tags; none when the bucket refuses or does not do tagging."""
        extra = {"VersionId": version_id} if version_id and version_id != "null" else {}
        try:
            tagging = client.get_object_tagging(Bucket=self.bucket, Key=key, **extra)
        except ClientError as exc:
            if _status(exc) >= 500 or _code(exc) in BUSY_CODES:
                raise SourceUnavailable(self._told(exc, READ_TAGS)) from None
            return {}  # AccessDenied, NotImplemented, gone a moment ago: the bytes stand
        except NETWORK_ERRORS as exc:
            raise SourceUnavailable(self._told(exc, READ_TAGS)) from None
        return {str(tag["Key"]): str(tag["Value"]) for tag in tagging.get("TagSet", [])}

    def _fetch_error(self, exc: ClientError, path: str) -> SourceError:
        code = _code(exc)
        if code in MISSING_CODES:
            return ItemProblem(ITEM_GONE(path=path))
        if (
            code in CREDENTIAL_CODES
            or code in BUSY_CODES
            or code == "NoSuchBucket"
            or _status(exc) >= 500
        ):
            return SourceUnavailable(self._told(exc, READ))
        return ItemProblem(ITEM_REFUSED(path=path, detail=self._told(exc, READ)))

    # -- the client --------------------------------------------------------------------------

    def _client(self, error: type[SourceError]) -> Any:
        """The boto3 client, built once, after the endpoint's host is checked. Raises `error`
        when the host is refused or only one of the two credentials is set."""
        if self._s3 is not None:
            return self._s3
        self._host_check(error)
        key_id = self.credentials.get("access_key_id", "")
        secret = self.credentials.get("secret_access_key", "")
        if bool(key_id) != bool(secret):
            raise error(ONE_CREDENTIAL())
        endpoint = str(self.config.get("endpoint_url") or "") or None
        config = Config(
            connect_timeout=min(self.limits.timeout, 10.0),
            read_timeout=self.limits.timeout,
            retries={"max_attempts": self._max_attempts, "mode": "standard"},
            s3={"addressing_style": "path" if endpoint else "auto"},
            # the process's AWS_ENDPOINT_URL is Canon's own storage, never a source's
            ignore_configured_endpoint_urls=True,
            **({} if key_id else {"signature_version": UNSIGNED}),
        )
        session = boto3.session.Session(
            aws_access_key_id=key_id or None,
            aws_secret_access_key=secret or None,
            region_name=str(self.config.get("region") or "") or "us-east-1",
        )
        self._s3 = session.client("s3", endpoint_url=endpoint, config=config)
        if not self.limits.allow_private:
            _check_peers(self._s3)
        return self._s3

    def _host_check(self, error: type[SourceError]) -> None:
        url = str(self.config.get("endpoint_url") or "")
        if not url and self._s3 is not None:
            url = str(self._s3.meta.endpoint_url)
        if not url:
            return  # AWS's own endpoint, checked once the client names it
        try:
            host_check(urlsplit(url).hostname or "", allow_private=self.limits.allow_private)
        except AddressRefused as exc:
            raise error(exc.why) from None

    def _told(self, exc: Exception, what: str) -> str | Reason:
        """Why a call (`what`: LIST, READ or READ_TAGS) failed, from codes and class names
        only."""
        where = {"bucket": self.bucket, "endpoint": self.endpoint}
        refused = exc.kwargs.get("error") if isinstance(exc, HTTPClientError) else None
        if isinstance(refused, AddressRefused):
            return refused.why  # a connection that reached a refused address
        if isinstance(exc, ClientError):
            code, status = _code(exc), _status(exc)
            if code in CREDENTIAL_CODES:
                return CREDENTIALS_REFUSED(**where, code=code)
            if code == "NoSuchBucket":
                return NO_SUCH_BUCKET(**where)
            if code in DENIED_CODES or status == 403:
                return DENIED[what](**where, code=code or str(status))
            if status >= 500 or code in BUSY_CODES:
                return FAILED[what](**where, code=code or str(status))
            return REFUSED[what](**where, code=code or "error", status=str(status))
        if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
            return TIMED_OUT(**where, error=type(exc).__name__)
        return UNREACHABLE(**where, error=type(exc).__name__)

    def close(self) -> None:
        if self._s3 is not None:
            self._s3.close()
            self._s3 = None


# botocore's pools, made to check where each connection landed (DNS rebinding).
_CHECKED_POOLS = peer_checked_pools(http=AWSHTTPConnectionPool, https=AWSHTTPSConnectionPool)


def _check_peers(client: Any) -> None:
    """Every direct connection of `client` checks the address it reached (DNS rebinding,
    `network.PeerChecked`). botocore builds its urllib3 pool manager itself and keeps it on the
    endpoint's HTTP session (botocore is pinned; a test connects to prove it); pools for a
    proxy are left alone, the proxy resolving the names itself."""
    session = client._endpoint.http_session
    session._manager.pool_classes_by_scheme = dict(_CHECKED_POOLS)


def _endpoint_check(endpoint: str, *, allow_private: bool) -> None:
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigInvalid(ENDPOINT_INVALID()) from None
    if parts.username or parts.password or parts.query or parts.fragment:
        # not echoed: it may hold a password
        raise ConfigInvalid(ENDPOINT_USERINFO())
    try:
        url_check(endpoint, allow_private=allow_private)
    except AddressRefused as exc:
        raise ConfigInvalid(exc.why) from None


def _folder(prefix: str) -> str:
    prefix = prefix.strip().lstrip("/")
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def _read_at_most(body: Any, size: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    for chunk in body.iter_chunks(1 << 20):
        chunks.append(chunk)
        total += len(chunk)
        if total >= size:
            break
    return b"".join(chunks)[:size]


def _code(exc: ClientError) -> str:
    # server-sent text: keep it to what an error code looks like
    return re.sub(r"[^A-Za-z0-9.]", "", str(exc.response.get("Error", {}).get("Code", "")))[:64]


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
