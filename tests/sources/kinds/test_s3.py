"""The S3 kind against a real S3-compatible server (moto in server mode, tests/s3server.py):
prefix, patterns and pagination, tags and user metadata, versions, limits, and every failure a
readable message that holds no part of a credential."""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import httpx
import pytest

from sources.kinds.base import (
    ConfigInvalid,
    Item,
    ItemProblem,
    Limits,
    ListingFailed,
    Problem,
    SourceError,
    SourceUnavailable,
)
from sources.kinds.s3 import S3Kind
from sources.patterns import Patterns
from tests.s3server import ACCESS_KEY, REGION, SECRET_KEY


def _kind(
    s3_server: Any,
    bucket: str,
    *,
    prefix: str = "",
    include: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    credentials: dict[str, str] | None = None,
    allow_private: bool = True,
    max_item_bytes: int = 1000,
    max_items: int = 1000,
    page_size: int = 1000,
    endpoint: str | None = None,
    **config: str,
) -> S3Kind:
    kind = S3Kind(
        config={
            "endpoint_url": endpoint or s3_server.endpoint,
            "bucket": bucket,
            "prefix": prefix,
            **config,
        },
        credentials=(
            {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}
            if credentials is None
            else credentials
        ),
        patterns=Patterns.of(include, exclude),
        limits=Limits(
            max_item_bytes=max_item_bytes,
            max_items=max_items,
            timeout=2.0,
            allow_private=allow_private,
        ),
    )
    kind._page_size = page_size
    kind._max_attempts = 1  # an outage is told at once, not after backing off
    return kind


@functools.cache
def _admin(s3_server: Any) -> Any:
    """One client of the bucket's owner per server (making a boto3 client takes a while)."""
    return s3_server.client()


def _put(s3_server: Any, bucket: str, key: str, body: bytes = b"text", **extra: Any) -> None:
    _admin(s3_server).put_object(Bucket=bucket, Key=key, Body=body, **extra)


def _items(kind: S3Kind) -> dict[str, Item]:
    return {found.path: found for found in kind.listing({}) if isinstance(found, Item)}


def _holds_no_secret(message: str) -> None:
    """No 8-character run of the secret or of the key id appears in the message."""
    for secret in (SECRET_KEY, ACCESS_KEY):
        for start in range(len(secret) - 7):
            assert secret[start : start + 8] not in message, message


@contextmanager
def _auth_enforced(s3_server: Any) -> Iterator[None]:
    """The server checks signatures and IAM policies (moto accepts anything otherwise)."""
    url = f"{s3_server.endpoint}/moto-api/reset-auth"
    httpx.post(url, content=b"0").raise_for_status()
    try:
        yield
    finally:
        httpx.post(url, content=b"inf").raise_for_status()


def _iam_user(s3_server: Any, name: str, actions: list[str]) -> dict[str, str]:
    """A user allowed `actions` on every bucket; its credentials as a source holds them."""
    iam = boto3.client(
        "iam",
        endpoint_url=s3_server.endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    iam.create_user(UserName=name)
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
    }
    iam.put_user_policy(UserName=name, PolicyName="sources", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}


def test_the_prefix_is_a_folder_and_folder_markers_are_skipped(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    for key in ("docs/", "docs/a.md", "docs/sub/", "docs/sub/b.pdf", "docs2/x.md", "other/c.md"):
        _put(s3_server, bucket, key)

    listed = list(_kind(s3_server, bucket, prefix="docs").listing({}))

    assert [found.path for found in listed] == ["a.md", "sub/b.pdf"]
    item = listed[0]
    assert isinstance(item, Item)
    head = _admin(s3_server).head_object(Bucket=bucket, Key="docs/a.md")
    assert item.version == f"{head['ETag'].strip(chr(34))}-4"
    assert '"' not in item.version
    assert item.size == 4
    assert item.modified == head["LastModified"] and item.modified.utcoffset() is not None


def test_patterns_filter_across_many_pages(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    keys = [f"docs/{n:02}.md" for n in range(20)] + ["docs/drafts/x.md", "docs/a.pdf", "z.md"]
    for key in keys:
        _put(s3_server, bucket, key)
    kind = _kind(s3_server, bucket, include=("**/*.md",), exclude=("drafts/",), page_size=4)
    calls: list[str] = []
    kind._client(ListingFailed).meta.events.register(
        "before-call.s3.ListObjectsV2", lambda **kw: calls.append("list")
    )

    paths = list(_items(kind))

    assert paths == [f"docs/{n:02}.md" for n in range(20)] + ["z.md"]
    assert len(calls) == 6  # 23 keys, 4 a page


def test_tags_read_each_sync_make_a_tag_change_a_new_version(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    _put(s3_server, bucket, "tagged.md", b"# A", Tagging="team=birds")
    _put(s3_server, bucket, "plain.md", b"# B")
    default = _items(_kind(s3_server, bucket))
    watching = _kind(s3_server, bucket, tags_each_sync="yes")
    before = _items(watching)
    assert before["plain.md"].version == default["plain.md"].version  # untagged: as without
    assert before["tagged.md"].version.startswith(default["tagged.md"].version + "-tags:")

    _admin(s3_server).put_object_tagging(
        Bucket=bucket, Key="tagged.md", Tagging={"TagSet": [{"Key": "team", "Value": "fish"}]}
    )
    after = _items(watching)
    assert after["tagged.md"].version != before["tagged.md"].version  # the bytes are the same
    assert after["plain.md"].version == before["plain.md"].version
    assert _items(_kind(s3_server, bucket)) == default  # without the option: unseen
    assert watching.fetch(after["tagged.md"]).metadata == {"team": "fish"}


def test_tags_each_sync_is_yes_or_no() -> None:
    config = {"bucket": "team-docs"}
    checked = S3Kind.check_config({**config, "tags_each_sync": " YES "}, allow_private=False)
    assert checked["tags_each_sync"] == "yes"
    assert "tags_each_sync" not in S3Kind.check_config(
        {**config, "tags_each_sync": "no"}, allow_private=False
    )
    with pytest.raises(ConfigInvalid, match="yes or no"):
        S3Kind.check_config({**config, "tags_each_sync": "sometimes"}, allow_private=False)


def test_fetch_brings_the_bytes_tags_and_user_metadata(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    _put(
        s3_server,
        bucket,
        "kb/herons.md",
        b"# Herons",
        ContentType="text/markdown",
        Metadata={"author": "Ann", "team": "from-metadata"},
        Tagging="team=birds&level=2",
    )
    _put(s3_server, bucket, "kb/blob", b"\x00\x01")
    kind = _kind(s3_server, bucket, prefix="kb/")
    items = _items(kind)

    fetched = kind.fetch(items["herons.md"])
    blob = kind.fetch(items["blob"])

    assert fetched.data == b"# Herons"
    assert fetched.media_type == "text/markdown"
    assert fetched.metadata == {"author": "Ann", "team": "birds", "level": "2"}
    assert blob.data == b"\x00\x01"
    assert blob.media_type == ""  # S3's binary/octet-stream says nothing
    assert blob.metadata == {}


def test_a_markdown_objects_front_matter_comes_under_its_metadata_and_tags(
    s3_server: Any,
) -> None:
    # Given a Markdown object with front matter, user metadata and tags naming the same field
    bucket = s3_server.new_bucket()
    note = b"---\ntitle: Herons\nteam: from-front-matter\nyear: soon\n---\n# Herons\n"
    _put(
        s3_server,
        bucket,
        "herons.md",
        note,
        Metadata={"author": "Ann", "team": "from-metadata"},
        Tagging="team=birds",
    )
    _put(s3_server, bucket, "herons.txt", note)
    kind = _kind(s3_server, bucket)
    items = _items(kind)
    # When both are fetched
    markdown, text = kind.fetch(items["herons.md"]), kind.fetch(items["herons.txt"])
    # Then the front matter's fields are offered, what the bucket says winning; a text file
    # offers none
    assert markdown.metadata == {
        "title": "Herons",
        "year": "soon",
        "author": "Ann",
        "team": "birds",
    }
    assert text.metadata == {}


def test_a_changed_object_has_a_new_version_and_its_new_bytes(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    _put(s3_server, bucket, "a.md", b"first")
    _put(s3_server, bucket, "b.md", b"same")
    kind = _kind(s3_server, bucket)
    before = _items(kind)

    _put(s3_server, bucket, "a.md", b"second")
    after = _items(kind)

    assert after["a.md"].version != before["a.md"].version
    assert after["b.md"].version == before["b.md"].version
    # fetched with the listing's older item: the bytes are the object's now
    assert kind.fetch(before["a.md"]).data == b"second"


def test_oversized_objects_are_problems_and_refused_when_they_grew(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    _put(s3_server, bucket, "big.pdf", b"x" * 11)
    _put(s3_server, bucket, "small.md", b"x" * 10)
    kind = _kind(s3_server, bucket, max_item_bytes=10)

    listed = list(kind.listing({}))

    assert listed[0] == Problem("big.pdf", "11 bytes, over the limit of 10 bytes")
    assert isinstance(listed[1], Item) and listed[1].path == "small.md"
    _put(s3_server, bucket, "small.md", b"x" * 50)
    with pytest.raises(ItemProblem, match=re.escape("small.md is 50 bytes, over the limit of 10")):
        kind.fetch(listed[1])


def test_the_item_limit_cuts_the_listing_and_says_so(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    for n in range(5):
        _put(s3_server, bucket, f"{n}.md")

    listed = list(_kind(s3_server, bucket, max_items=3, page_size=2).listing({}))

    assert [found.path for found in listed] == ["0.md", "1.md", "2.md", "3.md"]
    last = listed[3]
    assert isinstance(last, Problem) and last.incomplete and "item limit 3 reached" in last.reason


def test_an_object_gone_since_the_listing_is_an_item_problem(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    _put(s3_server, bucket, "p/a.md")
    kind = _kind(s3_server, bucket, prefix="p")
    item = _items(kind)["a.md"]
    _admin(s3_server).delete_object(Bucket=bucket, Key="p/a.md")

    with pytest.raises(ItemProblem, match=re.escape("a.md is gone since it was listed")):
        kind.fetch(item)


def test_a_missing_bucket_fails_the_listing(s3_server: Any) -> None:
    kind = _kind(s3_server, "canon-no-such-bucket")

    with pytest.raises(ListingFailed) as failed:
        list(kind.listing({}))

    assert str(failed.value) == (
        f"The bucket canon-no-such-bucket does not exist at {s3_server.endpoint} (NoSuchBucket)."
    )


def test_refused_credentials_fail_the_listing_without_a_trace_of_them(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    _put(s3_server, bucket, "a.md")
    reader = _iam_user(s3_server, "canon-wrong-secret", ["s3:ListBucket", "s3:GetObject"])
    wrong_secret = {**reader, "secret_access_key": SECRET_KEY}
    told: list[str] = []

    with _auth_enforced(s3_server):
        with pytest.raises(ListingFailed) as unknown:
            list(_kind(s3_server, bucket).listing({}))
        with pytest.raises(ListingFailed) as mismatch:
            list(_kind(s3_server, bucket, credentials=wrong_secret).listing({}))
        with pytest.raises(SourceUnavailable) as fetching:
            _kind(s3_server, bucket).fetch(Item(path="a.md", version="1"))
        told += [str(unknown.value), str(mismatch.value), str(fetching.value)]

    assert told[0] == (
        f"The bucket {bucket} at {s3_server.endpoint} refused the credentials (InvalidAccessKeyId)."
    )
    assert "refused the credentials (SignatureDoesNotMatch)" in told[1]
    assert "refused the credentials (InvalidAccessKeyId)" in told[2]
    for error in (unknown.value, mismatch.value, fetching.value):
        assert error.__cause__ is None and error.__suppress_context__
    for message in told:
        _holds_no_secret(message)


def test_a_user_without_the_right_is_refused_and_tags_it_may_not_read_are_left_out(
    s3_server: Any,
) -> None:
    bucket = s3_server.new_bucket()
    _put(s3_server, bucket, "a.md", b"body", Metadata={"author": "Ann"}, Tagging="team=birds")
    reader = _iam_user(s3_server, "canon-reader", ["s3:ListBucket", "s3:GetObject"])
    nobody = _iam_user(s3_server, "canon-nobody", ["s3:GetObject"])

    with _auth_enforced(s3_server):
        kind = _kind(s3_server, bucket, credentials=reader)
        fetched = kind.fetch(_items(kind)["a.md"])
        with pytest.raises(ListingFailed, match=r"refused access \(AccessDenied\)"):
            list(_kind(s3_server, bucket, credentials=nobody).listing({}))

    assert fetched.data == b"body"
    assert fetched.metadata == {"author": "Ann"}  # GetObjectTagging denied: no tags


def test_the_processs_own_aws_settings_are_never_a_sources(
    s3_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Canon's storage may be configured through AWS_* variables; a source without credentials
    makes unsigned requests, and one without an endpoint goes to AWS, not AWS_ENDPOINT_URL."""
    bucket = s3_server.new_bucket()
    _put(s3_server, bucket, "a.md")
    admin = _iam_user(s3_server, "canon-storage", ["s3:*"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", admin["access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", admin["secret_access_key"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)

    with _auth_enforced(s3_server), pytest.raises(ListingFailed):
        list(_kind(s3_server, bucket, credentials={}).listing({}))
    aws = S3Kind(
        config={"bucket": bucket},
        credentials={},
        patterns=Patterns(),
        limits=Limits(max_item_bytes=10, max_items=10),
    )
    assert "amazonaws.com" in aws._client(ListingFailed).meta.endpoint_url


def test_only_one_of_the_two_credentials_is_refused(s3_server: Any) -> None:
    kind = _kind(s3_server, "canon-x", credentials={"access_key_id": ACCESS_KEY})

    with pytest.raises(ListingFailed, match="only one of access_key_id and secret_access_key"):
        list(kind.listing({}))


def test_a_loopback_endpoint_is_refused_unless_private_addresses_are_allowed(
    s3_server: Any,
) -> None:
    bucket = s3_server.new_bucket()
    _put(s3_server, bucket, "a.md")
    kind = _kind(s3_server, bucket, allow_private=False)

    with pytest.raises(ListingFailed, match=re.escape("The host 127.0.0.1 is a loopback")):
        list(kind.listing({}))
    with pytest.raises(SourceUnavailable, match=re.escape("The host 127.0.0.1 is a loopback")):
        kind.fetch(Item(path="a.md", version="1"))
    config = {"endpoint_url": s3_server.endpoint, "bucket": bucket}
    with pytest.raises(ConfigInvalid, match="loopback"):
        S3Kind.check_config(config, allow_private=False)
    assert S3Kind.check_config(config, allow_private=True) == config


def test_a_name_that_resolves_public_then_connects_private_is_refused(
    s3_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the check before the client is made sees a public address, the
    connection reaches loopback; the address each connection reached is checked first."""
    from sources import network

    bucket = s3_server.new_bucket()
    _put(s3_server, bucket, "a.md")
    endpoint = s3_server.endpoint.replace("127.0.0.1", "localhost")
    monkeypatch.setattr(network, "_addresses", lambda host: [ipaddress.ip_address("192.0.32.10")])
    refused = "localhost led to a loopback, link-local or private address (127.0.0.1)"
    kind = _kind(s3_server, bucket, allow_private=False, endpoint=endpoint)
    with pytest.raises(ListingFailed, match=re.escape(refused)):
        list(kind.listing({}))
    with pytest.raises(SourceUnavailable, match=re.escape(refused)):
        kind.fetch(Item(path="a.md", version="1"))
    allowed = _kind(s3_server, bucket, allow_private=True, endpoint=endpoint)
    assert set(_items(allowed)) == {"a.md"}


def test_a_server_that_stops_mid_listing_fails_the_listing(s3_server: Any) -> None:
    bucket = s3_server.new_bucket()
    for n in range(6):
        _put(s3_server, bucket, f"{n}.md")
    listing = _kind(s3_server, bucket, page_size=2).listing({})
    seen = [next(listing).path, next(listing).path]  # the first page

    s3_server.stop()
    try:
        with pytest.raises(ListingFailed) as failed:
            list(listing)
        kind = _kind(s3_server, bucket)
        with pytest.raises(SourceUnavailable) as fetching:
            kind.fetch(Item(path="0.md", version="1"))
    finally:
        s3_server.start()

    assert seen == ["0.md", "1.md"]
    assert str(failed.value) == (
        f"The bucket {bucket} at {s3_server.endpoint} cannot be reached (EndpointConnectionError)."
    )
    assert "cannot be reached" in str(fetching.value)
    _holds_no_secret(str(failed.value) + str(fetching.value))


def test_the_configuration_is_checked_and_normalised() -> None:
    def check(**config: Any) -> dict[str, Any]:
        return S3Kind.check_config(config, allow_private=True)

    assert check(bucket="my.bucket-1", prefix="/docs", endpoint_url="http://127.0.0.1:9000/") == {
        "bucket": "my.bucket-1",
        "prefix": "docs/",
        "endpoint_url": "http://127.0.0.1:9000",
    }
    assert check(bucket="abc", prefix="", region="eu-west-1")["prefix"] == ""
    for bad in ("ab", "Upper", "-start", "a..b", "x" * 64, "under/slash"):
        with pytest.raises(ConfigInvalid, match="is not a bucket name"):
            check(bucket=bad)
    with pytest.raises(ConfigInvalid, match="needs 'bucket'") as missing:
        check(prefix="x")
    assert isinstance(missing.value, SourceError)
    with pytest.raises(ConfigInvalid) as userinfo:
        check(bucket="abc", endpoint_url="http://user:hunter2@127.0.0.1:9000")
    assert "hunter2" not in str(userinfo.value)
    with pytest.raises(ConfigInvalid, match="Only http and https"):
        check(bucket="abc", endpoint_url="ftp://127.0.0.1")
    with pytest.raises(ConfigInvalid, match="not a region name"):
        check(bucket="abc", region="EU WEST")
    with pytest.raises(ConfigInvalid, match="must be text"):
        check(bucket="abc", prefix=["a"])
