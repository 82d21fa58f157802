"""The object tier (S3, design §5n) through a real mount against a real
MinIO: mkfs pm+ssd+s3, files migrated to s3 read back across remounts,
deleted files take their objects with them, a kill -9 during a migration to
s3 loses nothing fsync'd and leaves orphans that fsck reports and the next
mount deletes, a used prefix is refused, a stopped MinIO makes reads
fail with EIO in bounded time while the daemon lives on, and deleting half
of every object's files lets object cleaning shrink the bucket (counted
through the S3 API) to the live data."""

import contextlib
import errno
import os
import shlex
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import (REPO, assert_clean_error, make_bucket, minio, fsck, mounted_pool, temp_mountpoint,
                     temp_pool_path, terrace, unique_name, wait_until, write_pattern_file,
                     sha256_file)

@pytest.fixture
def s3(minio_server):
    """A fresh bucket on the module's MinIO for each test; yields its URL."""
    name = "t-" + uuid.uuid4().hex[:20]
    url = make_bucket(minio_server["endpoint"], name)
    yield {"url": url, "dir": minio_server["dir"]}


@contextlib.contextmanager
def pool_with_s3(s3, pm: str = "64M"):
    prefix = unique_name("pool").replace("_", "-").lower()
    url = f"{s3['url']}/{prefix}"
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:{pm}", "--tier", f"ssd:{ssd}:128M",
                "--tier", f"s3:{url}:4G")
        try:
            yield pool, mnt, url
        finally:
            with contextlib.suppress(FileNotFoundError):
                ssd.unlink()


def object_stats(m) -> dict:
    return next(t for t in m.status()["tiers"] if t["kind"] == "s3")["object"]


def bucket_objects(s3, prefix: str) -> dict:
    """Every object under `prefix/` in the test bucket and its size, listed
    through MinIO's S3 API (ListObjectsV2; curl signs the requests)."""
    endpoint, bucket = s3["url"].rsplit("/", 1)
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    sizes, token = {}, None
    while True:
        query = {"list-type": "2", "prefix": prefix + "/"}
        if token:
            query["continuation-token"] = token
        cp = subprocess.run(
            ["curl", "-fsS", "--aws-sigv4", f"aws:amz:{os.environ['AWS_REGION']}:s3",
             "--user", f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
             f"{endpoint}/{bucket}?{urllib.parse.urlencode(query)}"],
            capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        root = ET.fromstring(cp.stdout)
        for c in root.findall("s3:Contents", ns):
            sizes[c.find("s3:Key", ns).text] = int(c.find("s3:Size", ns).text)
        if root.findtext("s3:IsTruncated", namespaces=ns) != "true":
            return sizes
        token = root.findtext("s3:NextContinuationToken", namespaces=ns)


def part_bytes(s3, prefix: str) -> int:
    """Bytes of the tier's part objects in the bucket (the marker left out)."""
    return sum(n for k, n in bucket_objects(s3, prefix).items() if "/seg-" in k)


def where_tiers(path: Path) -> dict:
    import json
    return json.loads(terrace("where", "--json", path).stdout)["bytes_per_tier"]


def write_fsynced(path: Path, size: int, seed: int) -> str:
    digest = write_pattern_file(path, size, seed)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return digest


def test_files_migrate_to_s3_read_back_after_remount_and_deletes_free_objects(s3):
    with pool_with_s3(s3) as (pool, mnt, _url):
        with mounted_pool(pool, mnt) as m:
            files = {mnt / f"f{i}": write_fsynced(mnt / f"f{i}", (3 << 20) + i * 4096, i)
                     for i in range(3)}
            terrace("migrate", "--to", "s3", mnt, *files)
            for f in files:
                assert where_tiers(f).get("s3", 0) == f.stat().st_size, where_tiers(f)
            st = object_stats(m)
            assert st["parts"] > 0 and st["live_bytes"] >= sum(f.stat().st_size for f in files)
        # Reverse migration off: reading every file back would otherwise
        # bring the read-hot data up to PM meanwhile (their parts die), and
        # the delete below would then free nothing on the object tier.
        with mounted_pool(pool, mnt, "reverse_read_ratio=0") as m:
            for f, digest in files.items():
                assert sha256_file(f) == digest
            st = object_stats(m)
            before, live = st["parts"], st["live_bytes"]
            first = next(iter(files))
            size = first.stat().st_size
            assert where_tiers(first).get("s3", 0) == size, "the file left s3 before its delete"
            # One migration may pack several files into one part: a delete
            # frees the file's bytes at once, and a part once none of its
            # bytes is live (partly dead parts wait for cleaning).
            first.unlink()
            assert wait_until(lambda: object_stats(m)["live_bytes"] <= live - size, 10), object_stats(m)
            for f in list(files)[1:]:
                f.unlink()
            assert wait_until(lambda: object_stats(m)["parts"] < before, 10), object_stats(m)
        cp = fsck(pool)
        assert cp.returncode == 0, cp.stdout + cp.stderr


def test_kill_during_a_migration_to_s3_loses_nothing_and_orphans_go_at_mount(s3):
    with pool_with_s3(s3) as (pool, mnt, _url):
        with mounted_pool(pool, mnt) as m:
            files = {mnt / f"g{i}": write_fsynced(mnt / f"g{i}", 8 << 20, 10 + i) for i in range(4)}
            mover = threading.Thread(target=lambda: terrace(
                "migrate", "--quiet", "--to", "s3", mnt, *files, check=False, timeout=120))
            mover.start()
            # Kill once the first objects have landed, before all are committed.
            wait_until(lambda: object_stats(m)["parts"] > 0, 20, interval=0.005)
            m.kill()
            mover.join(timeout=120)
        cp = fsck(pool)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        with mounted_pool(pool, mnt) as m:
            for f, digest in files.items():
                assert sha256_file(f) == digest, f
        cp = fsck(pool, "--json")
        assert cp.returncode == 0, cp.stdout + cp.stderr
        import json
        assert json.loads(cp.stdout)["object_orphans"] == 0


def test_mkfs_refuses_a_prefix_another_pool_uses(s3):
    with pool_with_s3(s3) as (_pool, _mnt, url):
        with temp_pool_path() as pool2, temp_pool_path("ssd") as ssd2:
            cp = terrace("mkfs", "--tier", f"pm:{pool2}:64M", "--tier", f"ssd:{ssd2}:64M",
                         "--tier", f"s3:{url}:4G", check=False)
            assert_clean_error(cp, mentions=["s3"])
            with contextlib.suppress(FileNotFoundError):
                ssd2.unlink()


def test_mkfs_errors_are_clear_and_bounded():
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd:
        t0 = time.monotonic()
        cp = terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:64M",
                     "--tier", "s3:http://127.0.0.1:1/nobody-listens", check=False, timeout=60)
        assert time.monotonic() - t0 < 40
        assert_clean_error(cp)
        cp = terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", "s3:http://127.0.0.1:1/bkt",
                     check=False)
        assert_clean_error(cp, mentions=["ssd or hdd tier before it"])
        cp = terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:64M",
                     "--tier", "s3:http://127.0.0.1:1/Bad_Bucket", check=False)
        assert_clean_error(cp, mentions=["bucket"])
        with contextlib.suppress(FileNotFoundError):
            ssd.unlink()


def test_reads_fail_with_eio_in_bounded_time_when_the_store_is_down(s3):
    minio_pid = (s3["dir"] / "pid").read_text().strip()
    with pool_with_s3(s3) as (pool, mnt, _url):
        with mounted_pool(pool, mnt):
            f = mnt / "cold"
            write_fsynced(f, 1 << 20, 99)
            terrace("migrate", "--to", "s3", mnt, f)
        # A fresh mount: no page of the file is cached anywhere.
        with mounted_pool(pool, mnt) as m:
            pid = m.find_pid()
            subprocess.run(["kill", "-STOP", minio_pid], check=True)
            try:
                t0 = time.monotonic()
                with pytest.raises(OSError) as e:
                    f.read_bytes()
                assert e.value.errno == errno.EIO, e.value
                assert time.monotonic() - t0 < 60
                assert pid and os.path.exists(f"/proc/{pid}")
                # `status` says the store does not answer, and why.
                o = object_stats(m)
                assert o["unreachable_since_unix"] is not None and o["last_error"], o
                assert "UNREACHABLE" in terrace("status", mnt).stdout
            finally:
                subprocess.run(["kill", "-CONT", minio_pid], check=False)
            assert m.alive()
            # Once the store answers again, the data reads back and the
            # status clears.
            assert f.stat().st_size == 1 << 20
            deadline = time.monotonic() + 60
            while True:
                try:
                    f.read_bytes()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the data never read back"
                    time.sleep(1)
            assert object_stats(m)["unreachable_since_unix"] is None
            assert "UNREACHABLE" not in terrace("status", mnt).stdout


def test_deleting_half_of_every_objects_files_lets_cleaning_shrink_the_bucket(s3):
    """64 files of 512 KiB migrate to s3 in order (one mover), two 16 MiB
    objects; deleting every other file leaves each object half live, which
    alone frees nothing. With parts under 60% live cleaned (run-time
    setting; exactly half is not under the default 50%), the background
    cleaning rewrites the live halves into new objects and deletes the old
    ones: the bucket shrinks to the live data, and what is left reads back
    after a remount. PM is large enough that no background migration or
    clean copy races the migration (a piece whose mapping changed meanwhile
    is moved again in a later round, into another object, and the objects
    would no longer be exactly half live)."""
    size = 512 << 10
    with pool_with_s3(s3, pm="512M") as (pool, mnt, url):
        prefix = url.rsplit("/", 1)[1]
        with mounted_pool(pool, mnt, "migration_threads=1") as m:
            files = {mnt / f"c{i:02}": write_fsynced(mnt / f"c{i:02}", size, 40 + i)
                     for i in range(64)}
            terrace("migrate", "--quiet", "--to", "s3", mnt, *files, timeout=300)
            for f in files:
                assert where_tiers(f).get("s3", 0) == size, (f, where_tiers(f))
            total = 64 * size
            stored = part_bytes(s3, prefix)
            assert total <= stored <= total + (1 << 20), stored
            for i, f in enumerate(list(files)):
                if i % 2:
                    f.unlink()
                    del files[f]
            live = 32 * size
            assert wait_until(lambda: object_stats(m)["live_bytes"] <= live + 4096, 10), \
                object_stats(m)
            time.sleep(1)
            assert part_bytes(s3, prefix) >= total, "half-live objects are not deleted"
            assert object_stats(m)["cleaning"]["parts_cleaned"] == 0

            terrace("set", mnt, "object_clean_live_percent", "60")
            assert wait_until(lambda: part_bytes(s3, prefix) <= live + (1 << 20), 120,
                              interval=0.5), (part_bytes(s3, prefix), object_stats(m))
            assert part_bytes(s3, prefix) >= live
            c = object_stats(m)["cleaning"]
            assert c["parts_cleaned"] >= 2 and c["bytes_reclaimed"] >= total, c
            assert c["bytes_rewritten"] <= live + (1 << 20), c
            assert 0.45 <= c["efficiency"] <= 0.55, c
            text = terrace("status", mnt).stdout
            assert f"cleaning: {c['parts_cleaned']} parts cleaned" in text, text
            for f, digest in files.items():
                assert sha256_file(f) == digest, f
        after = part_bytes(s3, prefix)
        cp = fsck(pool)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        with mounted_pool(pool, mnt) as m:
            for f, digest in files.items():
                assert sha256_file(f) == digest, f
            assert m.status()["recovery"]["object_orphans"] == 0
        # Nothing came back (reads may move hot data up to PM: it can shrink).
        assert part_bytes(s3, prefix) <= after
