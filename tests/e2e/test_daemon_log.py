"""The daemon's log (issue 18 point 5): settings changes and unmounts are
written to the log file kept across unmounts, and copied to the system log
(a datagram socket standing in for /dev/log, through TERRACE_SYSLOG)."""

from __future__ import annotations

import os
import socket

import pytest

from helpers import daemon_log, mkfs, mounted_pool, temp_mountpoint, temp_pool_path, terrace


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
