"""The object-store adapter's pure parts: URLs, options, error mapping (no server needed).

Its behaviour against a real S3 server is in ``integration/test_s3_store.py``.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kstream.checkpointstorage.base import StoreError
from kstream.checkpointstorage.objectstore import (
    ObjectStore,
    failure_reason,
    is_object_store_url,
    parse_store_options,
)
from kstream.cli import main

# Explicit (dummy) credentials: without them the library's credential chain would ask
# the cloud instance-metadata endpoint, an address these tests must never contact.
ENDPOINT = {
    "endpoint": "http://127.0.0.1:9",
    "region": "us-east-1",
    "access_key_id": "test",
    "secret_access_key": "test",
}


def test_urls() -> None:
    assert is_object_store_url("s3://b/p")
    assert is_object_store_url("gs://b/p")
    assert is_object_store_url("az://container/p")
    assert not is_object_store_url("file:///tmp/x")
    assert not is_object_store_url("/tmp/x")
    with pytest.raises(StoreError, match="not an object store URL"):
        ObjectStore("s3:///no-bucket")
    assert ObjectStore("s3://bucket/a/b/", ENDPOINT).url == "s3://bucket/a/b"


def test_store_options_parse_as_key_value() -> None:
    assert parse_store_options(["endpoint=http://h:1", "Region=eu", "x=a=b"]) == {
        "endpoint": "http://h:1",
        "region": "eu",
        "x": "a=b",
    }
    with pytest.raises(ValueError, match="not key=value"):
        parse_store_options(["endpoint"])
    with pytest.raises(ValueError, match="not key=value"):
        parse_store_options(["=x"])


def test_own_options_are_validated() -> None:
    s = ObjectStore("s3://b/p", {**ENDPOINT, "concurrency": "3", "part_size": str(6 << 20)})
    assert (s.concurrency, s.part_size) == (3, 6 << 20)
    with pytest.raises(StoreError, match="concurrency='x' is not an integer"):
        ObjectStore("s3://b/p", {**ENDPOINT, "concurrency": "x"})
    with pytest.raises(StoreError, match="below S3's 5 MiB minimum"):
        ObjectStore("s3://b/p", {**ENDPOINT, "part_size": "1024"})
    with pytest.raises(StoreError, match="retry_timeout='soon' is not a number of seconds"):
        ObjectStore("s3://b/p", {**ENDPOINT, "retry_timeout": "soon"})


def test_unknown_library_option_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="cannot open checkpoint store s3://b/p"):
        ObjectStore("s3://b/p", {**ENDPOINT, "no_such_key": "1"})


def test_an_unreachable_store_fails_with_the_path_not_a_hang() -> None:
    # Port 9 (discard) on loopback refuses connections: retries end within the bound.
    s = ObjectStore(
        "s3://b/p", {**ENDPOINT, "max_retries": "1", "retry_timeout": "2", "init_backoff": "0.01"}
    )
    with pytest.raises(StoreError, match=r"s3://b/p/app/x") as err:
        s.get_bytes("app/x")
    assert not isinstance(err.value.__cause__, FileNotFoundError)  # unreachable, not missing


def test_every_job_command_takes_store_options() -> None:
    for command in ("run", "worker", "coordinator"):
        result = CliRunner().invoke(main, [command, "--help"])
        assert result.exit_code == 0, result.output
        assert "--store-option KEY=VALUE" in result.output
    result = CliRunner().invoke(main, ["worker", "--help"])
    assert "--coordinator [auto|external]" in result.output


# The library's messages as S3Proxy answered them (integration/test_startup_modes.py
# runs the real ones through the CLI).
_LIST = "Generic S3 error: Error performing list request: Error performing GET http://127.0.0.1:33505/kstream?list-type=2&prefix=t%2F in 21.7ms - "


@pytest.mark.parametrize(
    ("library", "reason"),
    [
        (
            _LIST + "Server returned non-2xx status code: 403 Forbidden: <?xml version='1.0' "
            "encoding='UTF-8'?><Error><Code>SignatureDoesNotMatch</Code><Message>Forbidden"
            "</Message></Error>\n\nDebug source:\nGeneric {",
            "SignatureDoesNotMatch (403 Forbidden): the store refused the secret access key "
            "(check AWS_SECRET_ACCESS_KEY or --store-option secret_access_key=)",
        ),
        (
            _LIST + "Server returned non-2xx status code: 404 Not Found: <Error><Code>"
            "NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>",
            "NoSuchBucket (404 Not Found): the bucket does not exist (create it, or fix the "
            "store URL)",
        ),
        (
            _LIST + "Server returned non-2xx status code: 503 Service Unavailable: <Error><Code>"
            "SlowDown</Code></Error>",
            "SlowDown (503 Service Unavailable)",
        ),
        (
            "Generic S3 error: Error performing list request: Error performing GET "
            "http://10.9.9.9:9000/kstream?list-type=2 in 13s, after 6 retries, max_retries: 6, "
            "retry_timeout: 30s  - HTTP error: error sending request\n\nDebug source: ...",
            "cannot reach http://10.9.9.9:9000 (check the endpoint, AWS_ENDPOINT_URL or "
            "--store-option endpoint=)",
        ),
        ("first line\nsecond line", "first line"),
    ],
)
def test_a_store_failure_is_one_line_naming_its_cause(library: str, reason: str) -> None:
    assert failure_reason(RuntimeError(library)) == reason
