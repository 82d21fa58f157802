"""The daemon's log (issue 18 point 5): settings changes and unmounts are
written to the log file kept across unmounts, and copied to the system log
(a datagram socket standing in for /dev/log, through TERRACE_SYSLOG; the
real journald is in test_journald.py); the recovery summary only after a
crash; a migration stall and a checksum mismatch with their priority."""

from __future__ import annotations

import errno
import json
import os
import re
import socket

import pytest

from helpers import (daemon_log, lazy_unmount, mkfs, mount, mounted_pool, temp_mountpoint, temp_pool_path,
                     temp_ssd_image, terrace, wait_until)


def test_a_setting_change_and_the_unmount_are_in_the_daemon_log():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        mkfs(pool, "64M")
        log = daemon_log(mnt)
        with mounted_pool(pool, mnt):
            terrace("set", mnt, "sync_threshold_bytes", "4M")
            terrace("set", mnt, "sync_threshold_bytes", "4M")  # no change: no line
        text = log.read_text()
        assert f"mounted {pool} on {mnt}" in text, text
        changes = [ln for ln in text.splitlines() if "setting sync_threshold_bytes changed from " in ln]
        assert len(changes) == 1 and changes[0].endswith(" to 4M"), text
        assert f"unmounted {mnt}; {pool} persisted and marked clean" in text, text


@pytest.fixture
def fake_syslog(monkeypatch, tmp_path):
    path = tmp_path / "log"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    s.settimeout(5)
    monkeypatch.setenv("TERRACE_SYSLOG", str(path))
    yield s
    s.close()


def test_log_lines_are_copied_to_the_system_log(fake_syslog):
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        mkfs(pool, "64M")
        with mounted_pool(pool, mnt):
            terrace("set", mnt, "placement_policy", "pm-only")
        got = []
        while not any("unmounted" in g for g in got):
            got.append(fake_syslog.recv(8192).decode())
        mounted = next(g for g in got if "mounted" in g)
        assert mounted.startswith("<29>terrace[") and f"]: mounted {pool} on {mnt}" in mounted, got
        assert any(g.startswith("<29>terrace[") and "setting placement_policy changed from ziggurat to pm-only" in g
                   for g in got), got
        assert any(f"unmounted {mnt}; {pool} persisted and marked clean" in g for g in got), got


def test_the_recovery_summary_is_logged_after_a_crash_and_not_after_a_clean_unmount():
    """Issue 18 point 5: a mount of a pool the last daemon left uncleanly (kill -9)
    logs one recovery summary — what recovery replayed and reclaimed — and a
    mount after a clean unmount claims no recovery."""
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        mkfs(pool, "64M")
        log = daemon_log(mnt)
        m = mount(pool, mnt)
        try:
            for i in range(5):
                (mnt / f"f{i}").write_bytes(os.urandom(64 << 10))
            # Unlinked while open: an orphan the crash leaves for recovery.
            held = open(mnt / "held", "wb")
            held.write(os.urandom(1 << 20))
            held.flush()
            os.fsync(held.fileno())
            os.unlink(mnt / "held")
            m.kill()
            held.close()
        finally:
            lazy_unmount(mnt)
        start = len(log.read_text()) if log.exists() else 0
        with mounted_pool(pool, mnt):
            assert sorted(p.name for p in mnt.iterdir()) == [f"f{i}" for i in range(5)]
        after_crash = log.read_text()[start:]
        lines = [ln for ln in after_crash.splitlines() if "recover" in ln]
        assert len(lines) == 1, after_crash
        summary = lines[0]
        assert f"{pool} was not cleanly unmounted: recovered in " in summary, summary
        m = re.search(r"replayed (\d+) inode logs \((\d+) entries\)", summary)
        assert m and int(m.group(1)) >= 6 and int(m.group(2)) >= 6, summary
        assert re.search(r"freed 1 orphan inode \(1\.00 MiB\)", summary), summary
        assert re.search(r"rolled back \d+ journal transactions?", summary), summary

        # Unmounted cleanly: the next mount recovers nothing and says nothing of it.
        start = len(log.read_text())
        with mounted_pool(pool, mnt):
            pass
        after_clean = log.read_text()[start:]
        assert f"mounted {pool} on {mnt}" in after_clean, after_clean
        assert "recover" not in after_clean and "not cleanly" not in after_clean, after_clean


def test_a_migration_stall_and_a_checksum_mismatch_are_logged_with_their_priority(fake_syslog):
    """The other events worth a line: a migration that cannot make room
    (data pinned to PM by a rule) is a warning, damaged data read back an
    error, in the log file and in the system log."""
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        log = daemon_log(mnt)
        with mounted_pool(pool, mnt):
            (mnt / "f").write_bytes(os.urandom(1 << 20))
            terrace("migrate", mnt, mnt / "f")
            (ext,) = json.loads(terrace("where", "--json", mnt / "f").stdout)["extents"]
            assert ext["tier"] == "ssd", ext
        with open(ssd, "r+b") as f:  # damage the file's first block in the image
            f.seek(ext["block"] * 4096 + 100)
            f.write(b"damaged")
        with mounted_pool(pool, mnt, "migration_threshold=20"):
            (mnt / "pinned").mkdir()
            terrace("rule", mnt / "pinned", "pm")
            for i in range(30):  # PM past its threshold, nothing allowed to leave
                (mnt / "pinned" / f"p{i}").write_bytes(os.urandom(1 << 20))
            with pytest.raises(OSError) as e:
                (mnt / "f").read_bytes()
            assert e.value.errno == errno.EIO, e.value
            # A stall is logged once it has lasted 10 s (STALL_LOG_AFTER).
            assert wait_until(lambda: "migration stalled" in log.read_text()
                              and "checksum mismatch" in log.read_text(), 40), log.read_text()
        got = []
        while sum("unmounted" in g for g in got) < 2:
            got.append(fake_syslog.recv(8192).decode())
    stall = [g for g in got if "]: migration stalled: nothing on tier 0 can move to tier 1" in g]
    assert len(stall) == 1 and stall[0].startswith("<28>terrace["), got
    damage = [g for g in got if "]: checksum mismatch on tier 1, block " in g]
    assert damage and all(g.startswith("<27>terrace[") for g in damage), got
