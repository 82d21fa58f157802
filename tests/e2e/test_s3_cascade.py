"""The cascade to the object tier (issue 19's first e2e test, design §5n
"The cascade"): a small pool, PM 32 MiB + SSD 64 MiB + s3 on a real MinIO,
takes ten times PM + SSD in many files written through the mount with plain
writes — no `terrace migrate`, no rules — and the background migration alone
moves cold data PM → SSD → s3 as the tiers fill. No write may fail while the
bucket has room (ENOSPC there is what the project exists to fix).

- Every file's checksum is right after the writes and after an unmount and
  remount; `status` shows the object tier holding most of the data; fsck is
  clean. Deleting half of the files lets object cleaning shrink the bucket
  (counted through the S3 API) towards the live data.
- kill -9 of the daemon while the cascade uploads: every file whose fsync
  returned reads back right after a remount, fsck is clean and the orphans
  of the upload in flight are deleted.
- MinIO killed (SIGKILL) and restarted on the same port and data while the
  cascade uploads: no acknowledged write is lost (none fails: they wait).

Files have unique 4 KiB blocks (a block read from the wrong place shows),
sizes from 64 KiB to 2 MiB: several hundred files, more than the 256 a
drain looks at (the bug this test found: one cold list for all block tiers,
whose 256 coldest entries were all on s3, starved the SSD's drain).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shlex
import shutil
import struct
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers import (fsck, minio, mounted_pool, sha256_file, temp_mountpoint, temp_pool_path,
                     terrace, unique_name, wait_until)
from test_s3_tier import part_bytes

MIB = 1 << 20
PM, SSD = 32 * MIB, 64 * MIB
# Migration thread as shipped (a pass per 100 ms); object cleaning may run
# every 200 ms instead of 5 s; failed S3 requests retried from 50 ms on
# while the time budget (3 minutes) lasts, not 10 times: the waits are
# random ("decorrelated jitter", from the first wait up to 4 times the one
# before), so 10 retries from 100 ms span less than 5 s one time in 20 and
# less than 15 s one time in 4 (simulated), and a MinIO restart of a few
# seconds then fails the write-back that overflowed to s3 with EIO (seen
# with a 12 s outage: two fsyncs failed, nothing acknowledged was lost).
OPTS = "object_clean_interval_ns=200ms,s3_backoff_ns=50ms,s3_retries=100"


def minio_running(d: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        os.kill(int((d / "pid").read_text().strip()), 0)
        return True
    return False


@pytest.fixture(scope="module")
def s3():
    """A throwaway MinIO; yields its bucket URL and directory. Always stopped."""
    d = Path(tempfile.mkdtemp(prefix="terrace-minio-cascade-"))
    saved = dict(os.environ)
    try:
        for line in minio("start", d).splitlines():
            if line.startswith("export "):
                k, v = line[len("export "):].split("=", 1)
                os.environ[k] = shlex.split(v)[0]
        os.environ.pop("TERRACE_S3_TIMEOUT", None)
        yield {"url": os.environ["TERRACE_S3_URL"], "dir": d}
    finally:
        with contextlib.suppress(Exception):
            minio("stop", d)
        shutil.rmtree(d, ignore_errors=True)
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def cascade_pool(s3):
    """mkfs PM + SSD + s3 (a fresh prefix); yields (pool, mountpoint, prefix)."""
    prefix = unique_name("cascade").replace("_", "-").lower()
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:{PM >> 20}M", "--tier", f"ssd:{ssd}:{SSD >> 20}M",
                "--tier", f"s3:{s3['url']}/{prefix}:4G")
        try:
            yield pool, mnt, prefix
        finally:
            with contextlib.suppress(FileNotFoundError):
                ssd.unlink()


def tiers(m) -> dict:
    return {t["kind"]: t for t in m.status()["tiers"]}


def object_stats(m) -> dict:
    return tiers(m)["s3"]["object"]


def file_data(size: int, seed: int) -> bytes:
    """`size` bytes in which every 4 KiB block differs (file and block
    number in its first 16 bytes), so a misplaced block changes the sum."""
    base = bytearray(random.Random(seed).randbytes(64 << 10))
    out = bytearray()
    for off in range(0, size, len(base)):
        chunk = bytearray(base[:min(len(base), size - off)])
        for b in range(0, len(chunk), 4096):
            struct.pack_into("<QQ", chunk, b, seed, (off + b) // 4096)
        out += chunk
    return bytes(out)


def sizes(total: int, seed: int) -> list[int]:
    """File sizes from 64 KiB to 2 MiB (whole 4 KiB blocks and odd tails)
    adding up to about `total`."""
    rng = random.Random(seed)
    out = []
    while sum(out) < total:
        out.append(rng.randrange(16, 513) * 4096 - rng.choice((0, 0, 1000)))
    return out


class Writer:
    """Writes files `name{i}` of `sizes` with plain write(2)s, each closed
    after an fsync, from `threads` threads; a file counts as acknowledged
    when its fsync returned. Stops at the first error (kept in `errors`)."""

    def __init__(self, mnt: Path, sizes: list[int], seed: int, threads: int = 2,
                 name: str = "f"):
        self.mnt, self.sizes, self.seed, self.threads, self.name = mnt, sizes, seed, threads, name
        self.acked: dict[Path, str] = {}
        self.errors: list[tuple[Path, OSError]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.slowest = 0.0

    def _one(self, i: int) -> None:
        path = self.mnt / f"{self.name}{i:05}"
        data = file_data(self.sizes[i], self.seed * 100_000 + i)
        t0 = time.monotonic()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view[:1 << 20]):]
            os.fsync(fd)
        finally:
            os.close(fd)
        digest = hashlib.sha256(data).hexdigest()
        with self.lock:
            self.acked[path] = digest
            self.slowest = max(self.slowest, time.monotonic() - t0)

    def _run(self, k: int) -> None:
        for i in range(k, len(self.sizes), self.threads):
            if self.stop.is_set() or self.errors:
                return
            try:
                self._one(i)
            except OSError as e:
                with self.lock:
                    self.errors.append((self.mnt / f"{self.name}{i:05}", e))
                return

    def start(self) -> "Writer":
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True)
                         for k in range(self.threads)]
        for t in self._threads:
            t.start()
        return self

    def join(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "writers hang"

    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)


def assert_sums(files: dict[Path, str], what: str) -> None:
    bad = [f.name for f, digest in files.items() if sha256_file(f) != digest]
    assert not bad, f"{what}: {len(bad)} of {len(files)} files read back wrong: {bad[:10]}"


def assert_fsck_clean(pool: Path, orphans: int | None = 0) -> dict:
    cp = fsck(pool, "--json")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    report = json.loads(cp.stdout)
    if orphans is not None:
        assert report["object_orphans"] == orphans, cp.stdout
    return report


def describe_errors(w: Writer, m) -> str:
    st = m.status() if m.alive() else {}
    return (f"{len(w.errors)} writes failed, first {w.errors[0] if w.errors else None}; "
            f"after {len(w.acked)} files; tiers "
            f"{[(t['kind'], t['used'], t['capacity']) for t in st.get('tiers', [])]}; "
            f"migration {st.get('migration', {}).get('waiting')!r} "
            f"{st.get('migration', {}).get('reason')!r}; inodes "
            f"{st.get('inodes_used')}/{st.get('inodes_total')}")


def test_ten_times_pm_and_ssd_cascade_to_s3_and_cleaning_shrinks_the_bucket(s3):
    total = 10 * (PM + SSD)
    with cascade_pool(s3) as (pool, mnt, prefix):
        with mounted_pool(pool, mnt, OPTS) as m:
            w = Writer(mnt, sizes(total, 1), seed=1).start()
            w.join()
            assert not w.errors, describe_errors(w, m)
            files = w.acked
            assert len(files) > 300 and sum(f.stat().st_size for f in files) >= total
            t = tiers(m)
            # The cascade alone moved it: no rule, no `migrate`. PM and the
            # SSD hold at most their capacities; the rest is in the bucket.
            assert t["s3"]["used"] >= total - PM - SSD, t["s3"]
            assert_sums(files, "after the writes")
            st = m.status()
            o = object_stats(m)
            by_migration = next((x["bytes"] for x in st["migration"]["per_tier"]
                                 if x["tier"] == t["s3"]["id"]), 0)
            print(f"cascade: {len(files)} files, {total >> 20} MiB, slowest file "
                  f"{w.slowest:.2f} s, {o['requests']['puts']} PUTs, {o['parts']} parts "
                  f"(avg {o['stored_bytes'] / max(1, o['parts']) / MIB:.1f} MiB), "
                  f"{by_migration >> 20} MiB to s3 by migration, "
                  f"{st['placement_overflows']} write-backs overflowed to s3")
        assert_fsck_clean(pool)
        # Reads after the remount must not pull the data back up to PM
        # (reverse migration: reads dominate): the status check and the
        # cleaning below want the data where the cascade left it.
        with mounted_pool(pool, mnt, OPTS + ",reverse_read_ratio=0") as m:
            t = tiers(m)
            on_s3 = t["s3"]["used"]
            assert on_s3 * 10 >= 8 * sum(x["used"] for x in t.values()), t
            assert "s3" in terrace("status", mnt).stdout
            assert_sums(files, "after a remount")
            assert m.status()["recovery"]["object_orphans"] == 0

            # Delete every other file: the bucket must shrink to about the
            # live data. A part holds pieces of a few files (the cascade
            # uploads what each pass moves), so many are left partly live,
            # which frees nothing until cleaning rewrites them. Parts under
            # 80 % live are cleaned (run-time setting; default 50 %), so
            # once cleaning caught up the bucket holds at most live / 0.8.
            before = part_bytes(s3, prefix)
            assert before >= on_s3
            for k, f in enumerate(sorted(files)):
                if k % 2:
                    f.unlink()
                    del files[f]
            t0 = time.monotonic()
            terrace("set", mnt, "object_clean_live_percent", "80")

            def shrunk() -> bool:
                live = object_stats(m)["live_bytes"]
                return part_bytes(s3, prefix) <= min(before * 0.7, live / 0.8 + 4 * MIB)

            assert wait_until(shrunk, 60, interval=0.5), \
                (before, part_bytes(s3, prefix), object_stats(m))
            after = part_bytes(s3, prefix)
            o = object_stats(m)
            c = o["cleaning"]
            assert c["parts_cleaned"] > 0 and c["bytes_reclaimed"] > 0, c
            assert after >= o["live_bytes"] - MIB, (after, o)
            assert "parts cleaned" in terrace("status", mnt).stdout
            print(f"cleaning: bucket {before >> 20} -> {after >> 20} MiB in "
                  f"{time.monotonic() - t0:.1f} s, live {o['live_bytes'] >> 20} MiB, "
                  f"{c['parts_cleaned']} parts cleaned, efficiency {c['efficiency']}")
            assert_sums(files, "after deleting half and cleaning")
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt, OPTS + ",reverse_read_ratio=0"):
            assert_sums(files, "after cleaning and a remount")
        assert_fsck_clean(pool)


def test_kill_9_while_the_cascade_uploads_loses_no_fsynced_file(s3):
    total = 4 * (PM + SSD)
    with cascade_pool(s3) as (pool, mnt, _prefix):
        with mounted_pool(pool, mnt, OPTS) as m:
            w = Writer(mnt, sizes(total, 2), seed=2).start()
            # Once the cascade is well into the bucket, kill the daemon while
            # an upload is in flight: PUTs answered since the last look and
            # blocks still pending in the object media (a sync's parts enter
            # the index, and its blocks leave the pending buffer, only when
            # all its PUTs are answered).
            assert wait_until(lambda: tiers(m)["s3"]["used"] >= 2 * (PM + SSD) or not w.running(),
                              120, interval=0.05)
            assert w.running() and not w.errors, describe_errors(w, m)
            last = [object_stats(m)["requests"]["puts"]]

            def uploading() -> bool:
                o = object_stats(m)
                moved, last[0] = o["requests"]["puts"] > last[0], o["requests"]["puts"]
                return moved and o["pending_bytes"] > 0

            in_flight = wait_until(uploading, 20, interval=0)
            m.kill()
            w.stop.set()
            w.join(60)
        acked = dict(w.acked)
        assert len(acked) > 150, len(acked)
        # Orphans are allowed here (an upload no entry references yet); not
        # a problem, only space.
        orphans = assert_fsck_clean(pool, orphans=None)["object_orphans"]
        with mounted_pool(pool, mnt, OPTS + ",reverse_read_ratio=0") as m:
            assert_sums(acked, "after kill -9 and a remount")
            swept = m.status()["recovery"]["object_orphans"]
            assert swept == orphans, (swept, orphans)
            assert tiers(m)["s3"]["used"] > PM + SSD
        assert_fsck_clean(pool, orphans=0)
        print(f"kill -9: {len(acked)} files acknowledged, upload in flight seen: {in_flight}, "
              f"orphans: {orphans} in fsck, {swept} swept at mount")


def test_minio_killed_and_restarted_mid_cascade_loses_no_write(s3):
    total = 4 * (PM + SSD)
    d = s3["dir"]
    with cascade_pool(s3) as (pool, mnt, _prefix):
        try:
            with mounted_pool(pool, mnt, OPTS) as m:
                w = Writer(mnt, sizes(total, 3), seed=3).start()
                assert wait_until(lambda: tiers(m)["s3"]["used"] >= PM + SSD or not w.running(),
                                  120, interval=0.05)
                assert w.running() and not w.errors, describe_errors(w, m)
                puts = object_stats(m)["requests"]["puts"]
                minio("kill", d)
                # Down long enough that PM and the SSD fill behind it (the
                # writers then wait for room) and uploads fail and retry.
                time.sleep(3)
                minio("restart", d)
                w.join(240)
                assert not w.errors, describe_errors(w, m)
                assert object_stats(m)["requests"]["puts"] > puts
                files = w.acked
                assert sum(f.stat().st_size for f in files) >= total
                assert_sums(files, "after the MinIO restart")
                print(f"MinIO restart: {len(files)} files, slowest file {w.slowest:.2f} s")
        finally:
            if not minio_running(d):
                minio("restart", d)
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt, OPTS + ",reverse_read_ratio=0") as m:
            assert_sums(files, "after the MinIO restart and a remount")
            assert tiers(m)["s3"]["used"] >= total - PM - SSD
        assert_fsck_clean(pool)
