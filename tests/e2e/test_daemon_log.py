"""The daemon's log (issue 18 point 5): settings changes and unmounts are
written to the log file kept across unmounts, and copied to the system log
(a datagram socket standing in for /dev/log, through TERRACE_SYSLOG)."""

from __future__ import annotations

import os
import re
import socket

import pytest

from helpers import (daemon_log, lazy_unmount, mkfs, mount, mounted_pool, temp_mountpoint, temp_pool_path,
                     terrace)


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
