"""The daemon's log in a real journald (issue 18 point 5).

systemd is not PID 1 here, so systemd-journald is started on its own, as
root: not socket-activated, it binds /run/systemd/journal/{socket,stdout,
dev-log} itself. /dev/log is pointed at its dev-log socket, as systemd does.
Then a pool is mounted and made to log (mount, `terrace set`, an ENOSPC
refusal, a crash and its recovery, unmount), and `journalctl` must show each
line once, tagged `terrace`, with the daemon's pid and the right priority.

A second test runs the daemon as the systemd unit runs it: in the
foreground with stderr on a journal stream (`JOURNAL_STREAM` set). The lines
then reach the journal through stderr, their priority given by a `<N>`
prefix, and are not sent to /dev/log a second time.

Whatever the tests change is put back: the journald they started is
stopped, /dev/log is restored, and the directories journald created are
removed. They skip only when systemd-journald or journalctl is missing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional

import pytest

import helpers
from helpers import (TERRACE_BIN, is_mounted, mkfs, mount, mounted_pool, temp_mountpoint, temp_pool_path,
                     terrace, wait_until)

JOURNALD = next((p for p in ("/lib/systemd/systemd-journald", "/usr/lib/systemd/systemd-journald")
                 if os.access(p, os.X_OK)), None)
JOURNALCTL = shutil.which("journalctl")
JOURNAL_RUN = Path("/run/systemd/journal")
DEV_LOG_SOCKET = JOURNAL_RUN / "dev-log"
DEV_LOG = Path("/dev/log")
MiB = 1 << 20

# syslog priorities
WARNING, NOTICE = 4, 5


def _first_missing(path: Path) -> Optional[Path]:
    """The outermost directory of `path` that does not exist yet (None if it does)."""
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def _answers(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


class Journald:
    """A systemd-journald this test started (or one already running)."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        JOURNAL_RUN.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([JOURNALD], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        ready = wait_until(lambda: _answers(DEV_LOG_SOCKET) and (JOURNAL_RUN / "stdout").exists()
                           or self.proc.poll() is not None, 30)
        if not ready or self.proc.poll() is not None:
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
            raise AssertionError(f"systemd-journald did not come up standalone: {err}")

    def restart(self) -> None:
        """Stops it and starts a new one (a daemon's socket to the old one dies)."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        self.proc = None


@contextlib.contextmanager
def _dev_log_to_journald() -> Iterator[None]:
    """/dev/log -> /run/systemd/journal/dev-log for the block; whatever was
    there is put back after (a link, or a socket moved aside)."""
    saved_link: Optional[str] = None
    moved: Optional[Path] = None
    if DEV_LOG.is_symlink():
        saved_link = os.readlink(DEV_LOG)
        if saved_link == str(DEV_LOG_SOCKET):
            yield
            return
        DEV_LOG.unlink()
    elif DEV_LOG.exists():
        moved = DEV_LOG.with_name(f"log.terrace-test-{os.getpid()}")
        os.rename(DEV_LOG, moved)
    try:
        os.symlink(DEV_LOG_SOCKET, DEV_LOG)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            DEV_LOG.unlink()
        if saved_link is not None:
            os.symlink(saved_link, DEV_LOG)
        elif moved is not None:
            os.rename(moved, DEV_LOG)


@pytest.fixture
def journald(terrace_bin) -> Iterator[Optional[Journald]]:
    """A journald receiving /dev/log and streams: the machine's own if one
    runs (None), else one started here (stopped after the test)."""
    if JOURNALD is None or JOURNALCTL is None:
        pytest.skip("systemd-journald or journalctl is not installed (Debian package systemd): "
                    "no journal to deliver the daemon's log to")
    ours = None
    created = []
    if not _answers(DEV_LOG_SOCKET):
        mid = Path("/etc/machine-id").read_text().strip() if Path("/etc/machine-id").exists() else ""
        for p in (JOURNAL_RUN, Path("/run/log/journal") / mid, Path("/var/log/journal") / mid):
            missing = _first_missing(p)
            if missing is not None:
                created.append(missing)
        ours = Journald()
    try:
        if ours is not None:
            ours.start()
        with _dev_log_to_journald():
            yield ours
    finally:
        if ours is not None:
            ours.stop()
        for p in created:
            shutil.rmtree(p, ignore_errors=True)
    # Nothing of the test's journald stays behind.
    assert ours is None or not any(p.exists() for p in created), created


def journal(pid: int) -> list[dict]:
    """The journal's entries from process `pid` tagged `terrace`."""
    cp = subprocess.run([JOURNALCTL, "--no-pager", "-o", "json", "-t", "terrace", f"_PID={pid}"],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode in (0, 1), cp.stderr  # 1: no entries yet (older journalctl)
    return [json.loads(ln) for ln in cp.stdout.splitlines() if ln.strip()]


def entries_with(pid: int, *needles: str, timeout: float = 15) -> list[dict]:
    """Waits until, for every needle, an entry of `pid` contains it; returns
    all of `pid`'s entries."""
    got: list[dict] = []

    def found() -> bool:
        nonlocal got
        got = journal(pid)
        return all(any(n in e.get("MESSAGE", "") for e in got) for n in needles)

    assert wait_until(found, timeout, interval=0.2), \
        f"not in the journal after {timeout} s: {[n for n in needles if not any(n in e.get('MESSAGE', '') for e in got)]}" \
        f"; entries of pid {pid}: {[e.get('MESSAGE') for e in got]}"
    return got


def one(entries: list[dict], needle: str) -> dict:
    hits = [e for e in entries if needle in e.get("MESSAGE", "")]
    assert len(hits) == 1, f"{len(hits)} entries with {needle!r}: {[e.get('MESSAGE') for e in entries]}"
    return hits[0]


def fill(mnt: Path) -> OSError:
    """Writes 1 MiB files until the pool refuses one; returns the error."""
    for i in range(1000):
        try:
            with open(mnt / f"fill{i:04d}", "wb") as f:
                f.write(os.urandom(MiB))
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            return e
    raise AssertionError("a tiny pool took 1000 MiB without ENOSPC")


def test_the_daemons_lines_reach_journald_through_dev_log_with_their_priority(journald):
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        mkfs(pool, "32M")
        m = mount(pool, mnt)
        try:
            pid = m.pid
            assert pid
            terrace("set", mnt, "sync_threshold_bytes", "4M")
            e = fill(mnt)
            assert e.errno == errno.ENOSPC, e
            got = entries_with(pid, f"mounted {pool} on {mnt}", "setting sync_threshold_bytes changed",
                               "the pool is full: writes are refused with ENOSPC")
            # A journald restarted under a running daemon gets its next lines.
            if journald is not None:
                journald.restart()
            terrace("set", mnt, "sync_threshold_bytes", "8M")
            got = entries_with(pid, "setting sync_threshold_bytes changed from 4M to 8M")
            m.kill()  # a crash: the next mount recovers and says so
        finally:
            if is_mounted(mnt):
                helpers.lazy_unmount(mnt)
        with mounted_pool(pool, mnt) as m2:
            pid2 = m2.pid
        got2 = entries_with(pid2, "was not cleanly unmounted: recovered in ", f"unmounted {mnt}; {pool}")

    for entries, needle, prio in (
            (got, f"mounted {pool} on {mnt}", NOTICE),
            (got, "setting sync_threshold_bytes changed from ", NOTICE),
            (got, "the pool is full: writes are refused with ENOSPC", WARNING),
            (got2, f"{pool} was not cleanly unmounted: recovered in ", WARNING),
            (got2, f"unmounted {mnt}; {pool} persisted and marked clean", NOTICE)):
        hits = [e for e in entries if needle in e["MESSAGE"]]
        assert hits, (needle, [e["MESSAGE"] for e in entries])
        for e in hits:
            assert (int(e["PRIORITY"]), e["SYSLOG_FACILITY"], e["SYSLOG_IDENTIFIER"]) == (prio, "3", "terrace"), e
            assert e["SYSLOG_PID"] == e["_PID"], e
            assert e["_TRANSPORT"] == "syslog", e
    # Each line once (two setting changes: 4M, then 8M after the restart).
    one(got, f"mounted {pool} on {mnt}")
    one(got, "the pool is full")
    assert len([e for e in got if "setting sync_threshold_bytes changed" in e["MESSAGE"]]) == 2, got


# Starts a command as systemd starts a unit's ExecStart with
# StandardOutput=journal: stdout and stderr on a stream to journald (the
# stream's header as systemd writes it: identifier, unit, priority, level
# prefix, forwarding), JOURNAL_STREAM naming it. Connected from the process
# that execs the command, so journald files the lines under its pid.
_AS_A_UNIT = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("/run/systemd/journal/stdout")
s.sendall(b"terrace\n\n6\n1\n0\n0\n0\n")
s.shutdown(socket.SHUT_RD)
st = os.fstat(s.fileno())
os.environ["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
os.dup2(s.fileno(), 1)
os.dup2(s.fileno(), 2)
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_under_systemd_the_lines_go_through_the_stream_once_with_their_priority(journald):
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        mkfs(pool, "32M")
        proc = subprocess.Popen([sys.executable, "-c", _AS_A_UNIT, str(TERRACE_BIN), "mount", str(pool), str(mnt)],
                                stdin=subprocess.DEVNULL)
        try:
            assert wait_until(lambda: is_mounted(mnt) or proc.poll() is not None, 30) and proc.poll() is None, \
                f"the foreground mount did not come up (exit {proc.poll()})"
            terrace("set", mnt, "sync_threshold_bytes", "4M")
            e = fill(mnt)
            assert e.errno == errno.ENOSPC, e
            entries_with(proc.pid, "the pool is full: writes are refused with ENOSPC")
            terrace("umount", mnt)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            if is_mounted(mnt):
                helpers.lazy_unmount(mnt)
        got = entries_with(proc.pid, f"unmounted {mnt}; {pool}")
    for needle, prio in ((f"mounted {pool} on {mnt}", NOTICE),
                         ("setting sync_threshold_bytes changed from 1M to 4M", NOTICE),
                         ("the pool is full: writes are refused with ENOSPC", WARNING),
                         (f"unmounted {mnt}; {pool} persisted and marked clean", NOTICE)):
        e = one(got, needle)
        assert e["MESSAGE"].startswith(needle.split(" ")[0]), e["MESSAGE"]  # no "<N>" or "terrace[PID]: " left
        assert (int(e["PRIORITY"]), e["SYSLOG_IDENTIFIER"], e["_TRANSPORT"]) == (prio, "terrace", "stdout"), e
    # Nothing came through /dev/log as well.
    assert all(e["_TRANSPORT"] == "stdout" for e in got), [(e["_TRANSPORT"], e["MESSAGE"]) for e in got]
