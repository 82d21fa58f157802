"""The object tier (S3, design §5n) through a real mount against a real
MinIO: mkfs pm+ssd+s3, files migrated to s3 read back across remounts,
deleted files take their objects with them, a kill -9 during a migration to
s3 loses nothing fsync'd and leaves orphans that fsck reports and the next
mount deletes, a used prefix is refused, and a stopped MinIO makes reads
fail with EIO in bounded time while the daemon lives on."""

import contextlib
import errno
import os
import shlex
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers import (REPO, assert_clean_error, fsck, mounted_pool, temp_mountpoint,
                     temp_pool_path, terrace, unique_name, wait_until, write_pattern_file,
                     sha256_file)

MINIO_SH = REPO / "tests" / "minio" / "minio.sh"


def minio(cmd: str, d: Path) -> str:
    cp = subprocess.run(["bash", str(MINIO_SH), cmd, str(d)], capture_output=True, text=True,
                        timeout=900)
    assert cp.returncode == 0, f"minio.sh {cmd}: {cp.stderr}"
    return cp.stdout


@pytest.fixture(scope="module")
def s3():
    """A throwaway MinIO; yields the bucket URL. Always stopped."""
    d = Path(tempfile.mkdtemp(prefix="terrace-minio-"))
    saved = dict(os.environ)
    try:
        for line in minio("start", d).splitlines():
            if line.startswith("export "):
                k, v = line[len("export "):].split("=", 1)
                os.environ[k] = shlex.split(v)[0]
        # Requests to a stopped server give up after a few seconds.
        os.environ["TERRACE_S3_TIMEOUT"] = "3"
        yield {"url": os.environ["TERRACE_S3_URL"], "dir": d}
    finally:
        with contextlib.suppress(Exception):
            minio("stop", d)
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def pool_with_s3(s3):
    prefix = unique_name("pool").replace("_", "-").lower()
    url = f"{s3['url']}/{prefix}"
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:128M",
                "--tier", f"s3:{url}:4G")
        try:
            yield pool, mnt, url
        finally:
            with contextlib.suppress(FileNotFoundError):
                ssd.unlink()


def object_stats(m) -> dict:
    return next(t for t in m.status()["tiers"] if t["kind"] == "s3")["object"]


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
        with mounted_pool(pool, mnt) as m:
            for f, digest in files.items():
                assert sha256_file(f) == digest
            before = object_stats(m)["parts"]
            first = next(iter(files))
            first.unlink()
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
