"""Bad input for the object tier (S3, design §5n "Configuration"), against a
real MinIO: wrong keys, a missing bucket, an endpoint nobody answers at,
and a prefix that holds another pool's tier give one-line errors naming the
tier and what to check, exit 1, in seconds, at mkfs and at mount; mkfs
leaves nothing behind and mount mounts nothing. And the tier URL's
options: a pool made with `credentials_file=`/`profile=` mounts and reads
back its s3 data with no AWS_* variable set."""

import contextlib
import json
import os
import subprocess
import tempfile
import time
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path

import helpers
from helpers import (assert_clean_error, mounted_pool, sha256_file, temp_mountpoint,
                     temp_pool_path, terrace, unique_name, write_pattern_file)
from s3_fault_proxy import FaultProxy
from test_s3_tier import s3, where_tiers  # noqa: F401

# Every failure here must come well within this (the stores answer at once,
# or refuse the connection: only the few short retries of mkfs and of
# opening a tier take time).
QUICK = 15


def prefix_name(what: str = "pool") -> str:
    return unique_name(what).replace("_", "-").lower()


def s3_request(s3, method: str, path: str, data: bytes = None) -> str:
    """A signed request to MinIO (curl does SigV4), path from the endpoint."""
    endpoint = s3["url"].rsplit("/", 1)[0]
    args = ["curl", "-fsS", "-X", method, "--aws-sigv4", f"aws:amz:{os.environ['AWS_REGION']}:s3",
            "--user", f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
            f"{endpoint}/{path}"]
    with tempfile.NamedTemporaryFile() as body:
        if data is not None:
            # -T (upload a file): curl signs the payload's hash, as S3 wants.
            body.write(data)
            body.flush()
            args[1:1] = ["-T", body.name]
        cp = subprocess.run(args, capture_output=True, timeout=60)
    assert cp.returncode == 0, f"{method} {path}: {cp.stderr.decode()}"
    return cp.stdout.decode(errors="replace")


def remove_bucket(s3, bucket: str) -> None:
    """Deletes every object of `bucket`, then the bucket."""
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    root = ET.fromstring(s3_request(s3, "GET", f"{bucket}?list-type=2"))
    for c in root.findall("s3:Contents", ns):
        s3_request(s3, "DELETE", f"{bucket}/{urllib.parse.quote(c.find('s3:Key', ns).text)}")
    s3_request(s3, "DELETE", bucket)


def mkfs_args(pool, ssd, url: str) -> list:
    return ["mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:64M", "--tier", f"s3:{url}:4G"]


@contextlib.contextmanager
def made_pool(url: str):
    """A pm+ssd+s3 pool at `url` (s3 tier prefix included); yields (pool, mnt)."""
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace(*mkfs_args(pool, ssd, url))
        try:
            yield pool, mnt
        finally:
            with contextlib.suppress(FileNotFoundError):
                ssd.unlink()


def failed_mkfs(url: str, timeout: float = 60) -> tuple:
    """`terrace mkfs` of a pm+ssd+s3 pool expected to fail: (result, seconds);
    checks that it left neither the pool nor the ssd file."""
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd:
        t0 = time.monotonic()
        cp = terrace(*mkfs_args(pool, ssd, url), check=False, timeout=timeout)
        took = time.monotonic() - t0
        left = [p for p in (pool, ssd) if p.exists()]
        with contextlib.suppress(FileNotFoundError):
            ssd.unlink()
    assert not left, f"a failed mkfs left {left}"
    return cp, took


def failed_mount(pool, mnt) -> tuple:
    """`terrace mount --daemon` expected to fail: (result, seconds). Unmounts
    at once if it mounted anyway, so the test cleans up whatever happens."""
    t0 = time.monotonic()
    cp = terrace("mount", pool, mnt, "--daemon", check=False, timeout=60)
    took = time.monotonic() - t0
    if cp.returncode == 0 or helpers.is_mounted(mnt):
        helpers.unmount(helpers.Mount(Path(pool), Path(mnt)))
        raise AssertionError(f"mount succeeded: {cp.stdout}{cp.stderr}")
    return cp, took


def assert_runtime_error(cp, took: float, *mentions) -> str:
    """Exit 1, no panic, one error line (besides warnings, like the one for
    an ssd tier on tmpfs) naming `mentions`, within QUICK seconds."""
    assert_clean_error(cp, mentions=mentions, one_line=False)
    errors = [ln for ln in cp.stderr.splitlines() if ln.strip() and "warning:" not in ln]
    assert len(errors) == 1, f"expected a one-line error: {cp.stderr}"
    msg = errors[0]
    assert cp.returncode == 1, f"exit {cp.returncode}, expected 1: {msg}"
    assert took < QUICK, f"took {took:.1f} s: {msg}"
    assert "<?xml" not in msg and "Error performing" not in msg, msg
    return msg


# ---- mkfs ----------------------------------------------------------------------------


def test_mkfs_with_a_wrong_secret_key_says_access_denied_at_once(s3, monkeypatch):
    url = f"{s3['url']}/{prefix_name()}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    cp, took = failed_mkfs(url)
    msg = assert_runtime_error(cp, took, f"s3 tier {url}: access denied",
                               "SignatureDoesNotMatch", "AWS_SECRET_ACCESS_KEY")
    assert "not-the-secret" not in msg


def test_mkfs_with_an_unknown_access_key_says_access_denied(s3, monkeypatch):
    url = f"{s3['url']}/{prefix_name()}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "nobodyknowsme")
    cp, took = failed_mkfs(url)
    assert_runtime_error(cp, took, f"s3 tier {url}: access denied", "InvalidAccessKeyId",
                         "AWS_ACCESS_KEY_ID")


def test_mkfs_into_a_missing_bucket_says_create_it_first(s3):
    endpoint = s3["url"].rsplit("/", 1)[0]
    url = f"{endpoint}/{prefix_name('nobucket')}/p"
    cp, took = failed_mkfs(url)
    bucket = url.rsplit("/", 2)[1]
    assert_runtime_error(cp, took, f"s3 tier {url}: bucket \"{bucket}\" does not exist (create it first)")


def test_mkfs_with_an_unreachable_endpoint_fails_in_seconds_and_says_so(monkeypatch):
    # No TERRACE_S3_TIMEOUT: mkfs's own short retries bound it.
    monkeypatch.delenv("TERRACE_S3_TIMEOUT", raising=False)
    port = helpers.free_port()
    url = f"http://127.0.0.1:{port}/bkt/p"
    cp, took = failed_mkfs(url)
    msg = assert_runtime_error(cp, took, f"s3 tier {url}: cannot reach http://127.0.0.1:{port}")
    assert "refused" in msg.lower(), msg


def test_mkfs_over_a_prefix_another_pool_uses_is_refused_and_keeps_that_pool(s3):
    url = f"{s3['url']}/{prefix_name()}"
    with made_pool(url) as (pool, mnt):
        cp, took = failed_mkfs(url)
        assert_runtime_error(cp, took, f"s3 tier {url}: the prefix holds a tier marker already")
        with mounted_pool(pool, mnt):
            pass  # the first pool still mounts


# ---- mount ----------------------------------------------------------------------------


def test_mount_with_wrong_keys_says_access_denied_and_mounts_nothing(s3, monkeypatch):
    url = f"{s3['url']}/{prefix_name()}"
    with made_pool(url) as (pool, mnt):
        secret = os.environ["AWS_SECRET_ACCESS_KEY"]
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        cp, took = failed_mount(pool, mnt)
        assert_runtime_error(cp, took, str(pool), f"s3 tier {url}: access denied",
                             "SignatureDoesNotMatch")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "nobodyknowsme")
        cp, took = failed_mount(pool, mnt)
        assert_runtime_error(cp, took, f"s3 tier {url}: access denied", "InvalidAccessKeyId")
        assert not helpers.is_mounted(mnt)


def test_mount_when_the_bucket_was_deleted_says_it_does_not_exist(s3):
    bucket = prefix_name("gone")
    s3_request(s3, "PUT", bucket)
    endpoint = s3["url"].rsplit("/", 1)[0]
    url = f"{endpoint}/{bucket}/p"
    try:
        with made_pool(url) as (pool, mnt):
            remove_bucket(s3, bucket)
            cp, took = failed_mount(pool, mnt)
            assert_runtime_error(cp, took, str(pool),
                                 f"s3 tier {url}: bucket \"{bucket}\" does not exist (create it first)")
    finally:
        with contextlib.suppress(AssertionError):
            remove_bucket(s3, bucket)


def test_mount_when_the_endpoint_is_down_fails_in_seconds_with_the_reason(s3, monkeypatch):
    # The default retries of a running mount (minutes) must not apply to
    # opening the tier: no TERRACE_S3_TIMEOUT here.
    monkeypatch.delenv("TERRACE_S3_TIMEOUT", raising=False)
    port = int(s3["url"].split(":")[2].split("/")[0])
    bucket = s3["url"].rsplit("/", 1)[1]
    proxy = FaultProxy(port).start()
    try:
        url = f"http://127.0.0.1:{proxy.port}/{bucket}/{prefix_name()}"
        with made_pool(url) as (pool, mnt):
            proxy.stop()  # nothing listens on the pool's endpoint any more
            cp, took = failed_mount(pool, mnt)
            msg = assert_runtime_error(cp, took, str(pool),
                                       f"s3 tier {url}: cannot reach http://127.0.0.1:{proxy.port}")
            assert "refused" in msg.lower(), msg
    finally:
        proxy.stop()


def test_mount_of_a_pool_whose_prefix_holds_another_pool_s_tier_is_refused(s3):
    url_a = f"{s3['url']}/{prefix_name('a')}"
    url_b = f"{s3['url']}/{prefix_name('b')}"
    bucket = s3["url"].rsplit("/", 1)[1]
    with made_pool(url_a) as (pool_a, _mnt_a), made_pool(url_b) as (pool_b, mnt_b):
        # B's prefix now holds A's tier marker: A's objects, as if B's URL
        # had been pointed at A's prefix.
        key_a = f"{bucket}/{url_a.rsplit('/', 1)[1]}/terrace-tier.json"
        key_b = f"{bucket}/{url_b.rsplit('/', 1)[1]}/terrace-tier.json"
        marker_a = s3_request(s3, "GET", key_a)
        s3_request(s3, "PUT", key_b, marker_a.encode())
        uuid_a = json.loads(marker_a)["pool_uuid"]
        cp, took = failed_mount(pool_b, mnt_b)
        assert_runtime_error(cp, took, str(pool_b), f"s3 tier {url_b}: the tier belongs to pool {uuid_a}",
                             "another pool's objects")


def test_mount_with_a_missing_credentials_file_names_the_file(s3, tmp_path):
    cred = tmp_path / "s3.cred"
    cred.write_text(credentials_text("default"))
    url = f"{s3['url']}/{prefix_name()}?credentials_file={cred}"
    with made_pool(url) as (pool, mnt):
        cred.unlink()
        cp, took = failed_mount(pool, mnt)
        assert_runtime_error(cp, took, str(pool), str(cred))


# ---- options ---------------------------------------------------------------------------


def credentials_text(profile: str) -> str:
    return (f"[{profile}]\naws_access_key_id = {os.environ['AWS_ACCESS_KEY_ID']}\n"
            f"aws_secret_access_key = {os.environ['AWS_SECRET_ACCESS_KEY']}\n")


def test_a_pool_made_with_a_credentials_file_mounts_and_reads_back_without_aws_variables(
        s3, tmp_path, monkeypatch):
    cred = tmp_path / "s3.cred"
    cred.write_text("[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
                    + credentials_text("minio"))
    cred.chmod(0o600)
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
              "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws/credentials either
    base = f"{s3['url']}/{prefix_name()}"
    url = f"{base}?region=us-east-1&path_style=true&profile=minio&credentials_file={cred}"
    with made_pool(url) as (pool, mnt):
        with mounted_pool(pool, mnt) as m:
            tier = next(t for t in m.status()["tiers"] if t["kind"] == "s3")
            assert "secret" not in str(tier).lower() and "aws_access" not in str(tier).lower()
            f = mnt / "cold"
            digest = write_pattern_file(f, 3 << 20, 7)
            terrace("migrate", "--to", "s3", mnt, f)
            assert where_tiers(f).get("s3", 0) == f.stat().st_size
        with mounted_pool(pool, mnt):
            assert sha256_file(f) == digest
        # The pool records the options, never a key.
        raw = Path(pool).read_bytes()[:1 << 20]
        assert b"credentials_file=" in raw and b"profile=minio" in raw
        assert secret.encode() not in raw


