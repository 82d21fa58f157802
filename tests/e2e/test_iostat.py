"""`terrace iostat MNT [INTERVAL [COUNT]] [--json]` (issue 18): a live view of
a mounted pool's I/O per tier, as rates over each interval."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import helpers
from helpers import TERRACE_BIN, mounted_pool, temp_mountpoint, temp_pool_path, terrace


def test_iostat_shows_the_writes_made_during_each_interval_per_tier_and_for_the_mount():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            stop = threading.Event()

            def writer():
                block = os.urandom(64 << 10)
                with open(mnt / "f", "wb", buffering=0) as f:
                    while not stop.is_set():
                        f.write(block)
                        if f.tell() > 32 << 20:
                            f.seek(0)
                        time.sleep(0.001)

            t = threading.Thread(target=writer)
            t.start()
            try:
                cp = subprocess.run([str(TERRACE_BIN), "iostat", str(mnt), "0.3", "3", "--json"],
                                    capture_output=True, text=True, timeout=60)
            finally:
                stop.set()
                t.join()
            assert cp.returncode == 0, cp.stderr
            lines = [json.loads(x) for x in cp.stdout.splitlines()]
            assert len(lines) == 3, cp.stdout
            for r in lines:
                assert 0.25 < r["interval_s"] < 2.0, r
                assert [t["kind"] for t in r["tiers"]] == ["pm", "ssd"], r
                assert r["writes_s"] > 0 and r["write_bytes_s"] > 0, r
                assert r["tiers"][0]["write_bytes_s"] > 0, f"PM took no writes: {r}"
            # Idle now: nothing moves (only the view's own requests).
            cp = subprocess.run([str(TERRACE_BIN), "iostat", str(mnt), "0.2", "1", "--json"],
                                capture_output=True, text=True, timeout=60)
            idle = json.loads(cp.stdout)
            assert idle["write_bytes_s"] == 0, idle
            # The table form.
            cp = subprocess.run([str(TERRACE_BIN), "iostat", str(mnt), "0.1", "1"],
                                capture_output=True, text=True, timeout=60)
            assert cp.returncode == 0 and "0:pm" in cp.stdout and "1:ssd" in cp.stdout, cp.stdout


def test_iostat_refuses_bad_intervals_and_a_path_with_no_pool_clearly():
    with temp_mountpoint() as mnt:
        for args, code in ((["0"], 2), (["-1"], 2), (["nan"], 2), (["1", "0"], 2)):
            cp = subprocess.run([str(TERRACE_BIN), "iostat", str(mnt), *args],
                                capture_output=True, text=True, timeout=30)
            assert cp.returncode == code, (args, cp.returncode, cp.stderr)
            assert "panicked" not in cp.stderr and cp.stderr.strip(), (args, cp.stderr)
        cp = subprocess.run([str(TERRACE_BIN), "iostat", str(mnt), "0.1", "1"],
                            capture_output=True, text=True, timeout=30)
        assert cp.returncode != 0 and "panicked" not in cp.stderr and cp.stderr.strip(), cp.stderr


def test_a_detached_daemons_log_outlives_the_unmount_and_keeps_every_mount():
    """Issue 18: the log of `terrace mount --daemon` used to be deleted at a
    clean unmount; now it lasts, one run after another, and a failed mount
    still shows only its own error."""
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        log = helpers.daemon_log(mnt)
        for _ in range(2):
            with mounted_pool(pool, mnt):
                (mnt / "f").write_bytes(b"x")
        assert log.exists(), f"{log} is gone after a clean unmount"
        text = log.read_text()
        assert text.count("mounted ") >= 2 and text.count("unmounted ") == 2, text
        # A mount that fails says only its own error, not the old lines.
        cp = terrace("mount", str(pool) + ".missing", str(mnt), "--daemon", check=False)
        assert cp.returncode != 0 and "unmounted" not in cp.stderr, cp.stderr


def test_iostat_shows_the_migration_while_data_migrates():
    """The issue's "watch `terrace iostat` while data migrates": the bytes
    migration moved, summed over iostat's intervals, are what `terrace
    migrate` moved, and the SSD's writes show them."""
    MiB = 1 << 20
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:512M", "--tier", f"ssd:{ssd}:1G")
        with mounted_pool(pool, mnt, "placement_policy=pm-only,migration_threshold=99"):
            block = os.urandom(MiB)
            for i in range(256):
                (mnt / f"f{i:03d}").write_bytes(block)
            io = subprocess.Popen([str(TERRACE_BIN), "iostat", str(mnt), "0.1", "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                time.sleep(0.3)  # a few idle intervals first
                out = terrace("migrate", mnt).stdout
                time.sleep(0.5)  # and the intervals that saw the last commits
            finally:
                io.terminate()
                lines, err = io.communicate(timeout=30)
            rows = [json.loads(x) for x in lines.splitlines() if x.strip()]
            assert len(rows) >= 5, (lines, err)
            down = sum(r["migrated_down_bytes_s"] * r["interval_s"] for r in rows)
            ssd_written = sum(r["tiers"][1]["write_bytes_s"] * r["interval_s"] for r in rows)
            assert out.startswith("terrace: moved 256 MiB of 256 files to ssd"), out
            assert abs(down - 256 * MiB) < 0.05 * 256 * MiB, (down, out)
            assert ssd_written >= 0.95 * 256 * MiB, ssd_written
            # ... and the PM tier's reads show where the data came from.
            pm_read = sum(r["tiers"][0]["read_bytes_s"] * r["interval_s"] for r in rows)
            assert pm_read >= 0.95 * 256 * MiB, pm_read
            assert all(r["migrated_up_bytes_s"] == 0 for r in rows), rows
            assert rows[0]["migrated_down_bytes_s"] == 0, "migration before `terrace migrate`"


def test_iostat_shows_dram_cache_hits_of_block_tier_reads():
    """The cache-hit column moves: data on the SSD read again and again
    (the kernel's pages dropped before each pass, so the reads reach the
    daemon) is served from the DRAM cache after the first pass."""
    MiB = 1 << 20
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        data = os.urandom(4 * MiB)
        with mounted_pool(pool, mnt, "placement_policy=pm-only,migration_threshold=99"):
            (mnt / "f").write_bytes(data)
            terrace("migrate", "--quiet", mnt)
        with mounted_pool(pool, mnt, "reverse_read_ratio=0"):
            stop = threading.Event()
            errors = []

            def reader():
                while not stop.is_set():
                    fd = os.open(mnt / "f", os.O_RDONLY)
                    try:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                        got = b"".join(iter(lambda: os.read(fd, MiB), b""))
                        if got != data:
                            errors.append("wrong data")
                    finally:
                        os.close(fd)
                    time.sleep(0.01)

            t = threading.Thread(target=reader)
            t.start()
            try:
                cp = subprocess.run([str(TERRACE_BIN), "iostat", str(mnt), "0.3", "3", "--json"],
                                    capture_output=True, text=True, timeout=60)
                table = subprocess.run([str(TERRACE_BIN), "iostat", str(mnt), "0.3", "1"],
                                       capture_output=True, text=True, timeout=60)
            finally:
                stop.set()
                t.join()
            assert not errors, errors
            assert cp.returncode == 0, cp.stderr
            rows = [json.loads(x) for x in cp.stdout.splitlines()]
            assert sum(r["cache_hits_s"] for r in rows) > 0, rows
            assert all(r["reads_s"] > 0 for r in rows), rows
            # Mostly hits once the first pass filled the cache.
            last = rows[-1]
            assert last["cache_hits_s"] > last["cache_misses_s"], last
            assert table.returncode == 0, table.stderr
            hit = table.stdout.rsplit("cache hits ", 1)[-1].strip()
            assert hit.endswith("%") and int(hit[:-1]) > 50, table.stdout
