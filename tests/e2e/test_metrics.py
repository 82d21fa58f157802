"""`terrace mount -o metrics=ADDR` (issue 18 point 3): the daemon serves
Prometheus metrics over HTTP at /metrics — scraped here before and after a
write, which must move the bytes written (for the mount and for the PM tier)
and the FUSE write latency histogram. A bad address fails the mount with a
usage error, a port in use with a clear runtime error, and the fstab form
(mount.fuse3 with `metrics=` among fstab options) serves them too. The port
is closed once the pool is unmounted."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.error
import urllib.request

import helpers
from helpers import (TERRACE_BIN, assert_clean_error, is_mounted, mounted_pool, temp_mountpoint,
                     temp_pool_path, terrace, wait_until)


WRITE_COUNT = 'terrace_fuse_request_duration_seconds_count{op="write"}'
PM = '{tier="pm",tier_id="0"}'
SSD = '{tier="ssd",tier_id="1"}'


_free_port = helpers.free_port
_scrape = helpers.scrape_metrics


def _write_count_passes(port: int, n: float) -> bool:
    """Whether the FUSE write histogram counts more than `n` requests. A
    request is counted right after its reply is sent, so the application may
    see the reply a moment before the count moves: wait a little for it."""
    return wait_until(lambda: _scrape(port)[1].get(WRITE_COUNT, 0) > n, 5)


def _port_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_a_scrape_after_a_write_shows_the_bytes_written_and_the_write_latency_moved():
    port = _free_port()
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt, f"noatime,metrics=127.0.0.1:{port}"):
            ctype, before = _scrape(port)
            assert ctype.startswith("text/plain; version=0.0.4"), ctype
            assert before["terrace_tier_capacity_bytes" + PM] > 0
            assert before["terrace_tier_capacity_bytes" + SSD] == 256 << 20
            assert "terrace_tier_write_amplification_ratio" + SSD in before
            assert before["terrace_tier_dead_bytes" + SSD] == 0, "a new tier has no dead blocks"
            data = os.urandom(1 << 20)
            with open(mnt / "f", "wb", buffering=0) as f:
                f.write(data)
                os.fsync(f.fileno())
            assert _write_count_passes(port, before.get(WRITE_COUNT, 0)), "no FUSE write was timed"
            _, after = _scrape(port)
            moved = after["terrace_written_bytes_total"] - before["terrace_written_bytes_total"]
            assert moved == len(data), moved
            assert after["terrace_writes_total"] > before["terrace_writes_total"]
            assert (after["terrace_tier_written_bytes_total" + PM]
                    > before["terrace_tier_written_bytes_total" + PM])
            # A histogram's +Inf bucket counts every request, and the sum is time.
            inf = 'terrace_fuse_request_duration_seconds_bucket{op="write",le="+Inf"}'
            assert after[inf] == after[WRITE_COUNT]
            assert 0 < after['terrace_fuse_request_duration_seconds_sum{op="write"}'] < 60
            # `terrace status` says where the metrics are.
            url = f"http://127.0.0.1:{port}/metrics"
            assert f"metrics       {url}" in terrace("status", mnt).stdout
            assert json.loads(terrace("status", mnt, "--json").stdout)["metrics"] == url
            # The file's data is as written (metrics change nothing).
            assert (mnt / "f").read_bytes() == data
            # Other paths are not the page.
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
                raise AssertionError("/other answered 200")
            except urllib.error.HTTPError as e:
                assert e.code == 404
        assert wait_until(lambda: _port_closed(port), 10), "the metrics port stays open after unmount"


def test_a_bad_metrics_address_or_a_port_in_use_fails_the_mount_clearly():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        for addr in ("127.0.0.1", "nonsense:9464", "127.0.0.1:0", "127.0.0.1:70000", ""):
            cp = terrace("mount", "--daemon", "-o", f"metrics={addr}", pool, mnt, check=False)
            assert cp.returncode == 2, helpers.describe(cp, f"metrics={addr!r}: expected a usage error")
            assert_clean_error(cp, mentions=[f"metrics={addr}", "127.0.0.1:9464"])
            assert not is_mounted(mnt)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            cp = terrace("mount", "--daemon", "-o", f"metrics=127.0.0.1:{port}", pool, mnt, check=False)
            assert cp.returncode == 1, helpers.describe(cp, "expected a runtime error")
            assert_clean_error(cp, mentions=[f"127.0.0.1:{port}", "address already in use"])
            assert not is_mounted(mnt)
        # Nothing was left claimed: the same pool mounts with a free port.
        port = _free_port()
        with mounted_pool(pool, mnt, f"metrics=127.0.0.1:{port}"):
            assert _scrape(port)[1]["terrace_inodes_used"] >= 1
        # Without the option: no metrics, and the status says nothing of them.
        with mounted_pool(pool, mnt):
            assert "metrics" not in json.loads(terrace("status", mnt, "--json").stdout)
        helpers.assert_fsck_clean(pool, "after the refused mounts")


def test_an_fstab_line_with_metrics_serves_them():
    """What mount(8) runs for `POOL MNT fuse.terrace defaults,_netdev,metrics=… 0 0`."""
    mount_fuse3 = shutil.which("mount.fuse3") or "/sbin/mount.fuse3"
    assert os.path.exists(mount_fuse3), "fuse3's mount.fuse3 is missing (scripts/setup.sh installs fuse3)"
    port = _free_port()
    env = dict(os.environ, PATH=f"{TERRACE_BIN.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        try:
            cp = subprocess.run([mount_fuse3, str(pool), str(mnt), "-t", "fuse.terrace",
                                 "-o", f"defaults,_netdev,nofail,metrics=127.0.0.1:{port}"],
                                capture_output=True, text=True, timeout=60, env=env)
            assert cp.returncode == 0, f"mount.fuse3 failed: {cp.stderr}"
            assert is_mounted(mnt)
            (mnt / "f").write_bytes(b"x" * 4096)
            _, s = _scrape(port)
            assert s["terrace_written_bytes_total"] == 4096
            assert _write_count_passes(port, 0), "no FUSE write was timed"
            pids = helpers.find_pids_with_arg(str(mnt))
            cp = subprocess.run(["umount", str(mnt)], capture_output=True, text=True, timeout=60)
            assert cp.returncode == 0, cp.stderr
            for pid in pids:
                assert wait_until(lambda: not helpers.pid_alive(pid), 30), "the daemon did not exit"
            assert _port_closed(port), "the metrics port stays open after umount"
        finally:
            if is_mounted(mnt):
                helpers.lazy_unmount(mnt)
                for pid in helpers.find_pids_with_arg(str(mnt)):
                    helpers.kill_pid(pid)
        helpers.assert_fsck_clean(pool, "after umount")


def _delta(before: dict, after: dict, series: str) -> float:
    return after.get(series, 0) - before.get(series, 0)


def _read_uncached(path) -> bytes:
    """The file's data, read through the daemon: the kernel's pages of the
    file are dropped first (reads of a cached open are otherwise served by
    the kernel and never reach the daemon's DRAM cache)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        out = bytearray()
        while chunk := os.read(fd, 1 << 20):
            out += chunk
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return bytes(out)
    finally:
        os.close(fd)


def test_migration_cache_and_predictor_series_move_and_every_listed_metric_is_there():
    """Issue 18 point 3 beyond bytes written: `terrace migrate` moves the
    migration bytes (by exactly what moved, to the tier it went to) and the
    SSD's writes; reading data on the SSD twice (from a fresh mount) shows
    DRAM cache misses, then hits; small writes each followed by fsync settle
    correct "sync" predictions and land on PM as sync writes; a scrub
    exports its counts. Every kind of metric the issue lists is on the page."""
    MiB = 1 << 20
    port = _free_port()
    files = {f"f{i}": os.urandom(MiB) for i in range(8)}
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        # Migration: the data stays on PM until `terrace migrate` moves it.
        with mounted_pool(pool, mnt, f"metrics=127.0.0.1:{port},placement_policy=pm-only,"
                                     "migration_threshold=99"):
            for name, data in files.items():
                (mnt / name).write_bytes(data)
            _, before = _scrape(port)
            out = terrace("migrate", mnt).stdout
            assert out.startswith("terrace: moved 8.00 MiB of 8 files to ssd"), out
            _, after = _scrape(port)
            down = 'terrace_migration_bytes_total{direction="down"}'
            assert _delta(before, after, down) == 8 * MiB, (before.get(down), after.get(down))
            assert _delta(before, after, "terrace_migration_tier_bytes_total" + SSD) == 8 * MiB
            assert _delta(before, after, 'terrace_migration_bytes_total{direction="up"}') == 0
            assert after["terrace_migration_bandwidth_bytes_per_second"] > 0
            assert after["terrace_migration_running"] == 0
            assert _delta(before, after, "terrace_tier_written_bytes_total" + SSD) >= 8 * MiB
            assert _delta(before, after, "terrace_tier_write_requests_total" + SSD) > 0
            assert _delta(before, after, "terrace_tier_read_bytes_total" + PM) >= 8 * MiB
            assert after["terrace_tier_used_bytes" + SSD] >= 8 * MiB
            assert after["terrace_tier_write_amplification_ratio" + SSD] > 0
        # A fresh mount: the DRAM cache is empty, so the first read of the
        # SSD's data misses and the second hits (reads move no data up).
        with mounted_pool(pool, mnt, f"metrics=127.0.0.1:{port},reverse_read_ratio=0"):
            _, s0 = _scrape(port)
            for name, data in files.items():
                assert _read_uncached(mnt / name) == data
            _, s1 = _scrape(port)
            for name, data in files.items():
                assert _read_uncached(mnt / name) == data
            _, s2 = _scrape(port)
            first_misses = _delta(s0, s1, "terrace_cache_misses_total")
            assert first_misses > 0, (s0.get("terrace_cache_misses_total"), s1.get("terrace_cache_misses_total"))
            assert _delta(s1, s2, "terrace_cache_hits_total") > 0, (s1.get("terrace_cache_hits_total"),
                                                                    s2.get("terrace_cache_hits_total"))
            assert _delta(s1, s2, "terrace_cache_misses_total") < first_misses
            assert 0 < s2["terrace_cache_hit_ratio"] < 1
            assert _delta(s0, s2, "terrace_tier_read_bytes_total" + SSD) >= 8 * MiB
            assert _delta(s0, s2, "terrace_read_bytes_total") >= 16 * MiB
            assert s2['terrace_fuse_request_duration_seconds_count{op="read"}'] > 0

            # The synchronicity predictor: after the first fsync judged the
            # file synchronous, each small write is predicted "sync" and the
            # next fsync settles the prediction as correct.
            sync = 'terrace_placed_writes_total{class="sync",landing="pm"}'
            with open(mnt / "log", "wb", buffering=0) as f:
                for _ in range(10):
                    f.write(os.urandom(4096))
                    os.fsync(f.fileno())
            _, s3 = _scrape(port)
            assert s3['terrace_sync_predictions_settled{predicted="sync"}'] >= 8, s3
            assert s3['terrace_sync_predictions_correct{predicted="sync"}'] >= 8, s3
            assert 0 < s3["terrace_sync_prediction_accuracy_ratio"] <= 1
            assert _delta(s2, s3, sync) >= 8, (s2.get(sync), s3.get(sync))
            assert _delta(s2, s3, "terrace_fsyncs_total") >= 10

            # Scrub: its counts appear once there is one.
            assert not any(k.startswith("terrace_scrub_") for k in s3)
            terrace("scrub", "--quiet", mnt)
            _, s4 = _scrape(port)
            assert s4["terrace_scrub_checked_blocks"] >= 8 * MiB // 4096, s4
            assert s4["terrace_scrub_bad_blocks"] == 0
            assert s4["terrace_checksum_errors_total"] == 0
            assert s4["terrace_checksummed_reads_total"] > 0

            # Every metric issue 18 lists is on the page.
            for name in ["terrace_tier_capacity_bytes" + PM, "terrace_tier_used_bytes" + PM,
                         "terrace_tier_read_requests_total" + SSD, "terrace_tier_read_bytes_total" + SSD,
                         "terrace_tier_write_requests_total" + PM, "terrace_tier_written_bytes_total" + PM,
                         'terrace_fuse_request_duration_seconds_bucket{op="write",le="+Inf"}',
                         'terrace_migration_bytes_total{direction="down"}',
                         "terrace_migration_bandwidth_bytes_per_second", "terrace_cache_hit_ratio",
                         "terrace_sync_prediction_accuracy_ratio",
                         "terrace_tier_write_amplification_ratio" + SSD, "terrace_scrub_bad_blocks"]:
                assert name in s4, name
