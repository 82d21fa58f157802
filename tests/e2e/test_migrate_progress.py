"""`terrace migrate`'s output (issue 18 point 7): no bar without a terminal, one
summary line counting what really moved, --quiet, and one error when the
daemon dies mid-run."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
import time

from helpers import (TERRACE_BIN, describe, kill_daemon_during_migrate, kill_pid, mounted_pool,
                     temp_mountpoint, temp_pool_path, temp_ssd_image, terrace)

MiB = 1 << 20


def write_files(mnt, count: int, size: int) -> None:
    blk = os.urandom(size)
    for i in range(count):
        with open(mnt / f"f{i:04d}", "wb") as f:
            f.write(blk)


def test_without_a_terminal_migrate_prints_no_bar_and_one_line_of_what_moved():
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:256M", "--tier", f"ssd:{ssd}:512M")
        with mounted_pool(pool, mnt):
            write_files(mnt, 40, MiB)
            (mnt / "empty").touch()
            cp = terrace("migrate", mnt, mnt / "f0000", mnt / "f0001")
            assert cp.stderr == "", describe(cp, "no bar without a terminal")
            assert re.fullmatch(r"terrace: moved 2\.00 MiB of 2 files to ssd \(tier 1\) in [\d.]+ s"
                                r"( \([\d.]+ \S+/s\))?\n", cp.stdout), cp.stdout
            # The rest: only what is not on the SSD yet counts.
            cp = terrace("migrate", mnt)
            assert cp.stderr == "", describe(cp, "no bar without a terminal")
            assert cp.stdout.startswith("terrace: moved 38.0 MiB of 38 files to ssd (tier 1) in "), cp.stdout
            assert cp.stdout.endswith("; 3 files already there\n"), cp.stdout
            cp = terrace("migrate", mnt)
            assert cp.stdout.startswith("terrace: moved 0 B of 0 files to ssd (tier 1) in "), cp.stdout
            assert cp.stdout.endswith("; 41 files already there\n"), cp.stdout
            cp = terrace("migrate", "--quiet", "--to", "pm", mnt)
            assert (cp.stdout, cp.stderr) == ("", ""), describe(cp, "--quiet prints nothing")
            w = terrace("where", "--json", mnt / "f0007").stdout
            assert '"bytes_per_tier":{"pm":1048576}' in w, w


def test_daemon_killed_during_a_migrate_gives_one_error_and_status_1():
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:2G", "--tier", f"ssd:{ssd}:2G")
        # Every write on PM and no migration in the background: the SSD
        # image grows only once `terrace migrate` moves data.
        with mounted_pool(pool, mnt, "placement_policy=pm-only,migration_threshold=99") as m:
            write_files(mnt, 1200, MiB)  # more than a second of migration here
            # Data reaching the SSD image: the migration is under way.
            code, out, err = kill_daemon_during_migrate(m, ssd, 2048)
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert code == 1, (code, out, err)
            assert len(lines) == 1, err
            assert lines[0].startswith(f"terrace: {mnt}: migration stopped: "), lines
            assert out == "", out


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
BAR = re.compile(r"migrating \[[=> ]{40}\] ([\d.]+) (\w+)/([\d.]+) (\w+) \(([\d.]+) (\w+)/s")


def on_a_terminal(args: list) -> tuple[int, str, str]:
    """Runs `args` with stderr (and stdin) on a pseudo-terminal of 160
    columns, stdout on a pipe; returns the exit status, what the terminal
    got and stdout."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen([str(a) for a in args], stdin=slave, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    tty = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            tty += chunk
        out = proc.stdout.read().decode()
        return proc.wait(timeout=120), tty.decode(errors="replace"), out
    finally:
        os.close(master)
        if proc.poll() is None:
            kill_pid(proc.pid, signal.SIGKILL)


def test_on_a_terminal_the_bar_counts_only_what_moves_ends_full_and_shows_a_plausible_rate():
    n = 512
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:1G", "--tier", f"ssd:{ssd}:2G")
        # Everything lands on PM and stays there until `terrace migrate`.
        with mounted_pool(pool, mnt, "placement_policy=pm-only,migration_threshold=99"):
            write_files(mnt, n, MiB)
            # Two files already on the SSD; then a quarter of one of them
            # rewritten (on PM again): of those two, only 256 KiB is to move.
            terrace("migrate", mnt, mnt / "f0000", mnt / "f0001")
            with open(mnt / "f0001", "r+b") as f:
                f.write(os.urandom(256 << 10))
            to_move = (n - 2) * MiB + (256 << 10)

            code, tty, out = on_a_terminal([TERRACE_BIN, "migrate", mnt])
            assert code == 0, (code, tty, out)
            frames = [(float(a) * UNITS[au], float(b) * UNITS[bu], float(r) * UNITS[ru])
                      for a, au, b, bu, r, ru in BAR.findall(tty)]
            assert len(frames) >= 2, f"no progress bar on the terminal: {tty[-2000:]!r}"
            m = re.fullmatch(r"terrace: moved ([\d.]+) (\w+) of (\d+) files to ssd \(tier 1\) in ([\d.]+) s"
                             r" \(([\d.]+) (\w+)/s\); 1 file already there\n", out)
            assert m, out
            moved = float(m.group(1)) * UNITS[m.group(2)]
            assert int(m.group(3)) == n - 1, out
            assert abs(moved - to_move) <= 0.005 * to_move, (out, to_move)  # 3 digits
            # The bar's total is what moves, not all the data (n MiB), from
            # the first frame to the last.
            for done, total, _ in frames:
                assert abs(total - to_move) <= 0.01 * MiB, (frames[0], frames[-1], to_move)
                assert done <= total
            # It ends full, and stays on the terminal above the summary.
            assert frames[-1][0] == frames[-1][1], frames[-1]
            assert [d for d, _, _ in frames] == sorted(d for d, _, _ in frames), "the bar went backwards"
            # A plausible rate: near the summary's bytes per second (the
            # old bar showed 151 GiB/s while the summary said 0.2).
            rate = float(m.group(5)) * UNITS[m.group(6)]
            bar_rate = frames[-1][2]
            assert rate / 3 <= bar_rate <= rate * 3, (bar_rate, rate, out)
            assert max(r for _, _, r in frames) < 20 * (1 << 30), frames

            last = tty[tty.rindex("migrating ["):]
            assert re.match(r"[^\r\n]*/s, [^)]*\) done ", last), last

            # Nothing left to move: no bar, the summary says so.
            code, tty, out = on_a_terminal([TERRACE_BIN, "migrate", mnt])
            assert (code, tty) == (0, ""), (code, tty[-2000:], out)
            assert out.startswith("terrace: moved 0 B of 0 files to ssd (tier 1) in "), out

            # --quiet: nothing on the terminal, nothing on stdout.
            code, tty, out = on_a_terminal([TERRACE_BIN, "migrate", "--quiet", "--to", "pm", mnt])
            assert (code, tty, out) == (0, "", ""), (code, tty[-2000:], out)
            w = terrace("where", "--json", mnt / "f0003").stdout
            assert '"bytes_per_tier":{"pm":1048576}' in w, w


def test_on_a_terminal_files_that_cannot_move_leave_the_bar_full_of_what_moved_and_counted():
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        # 30 MiB for an SSD of 16 MiB: about half cannot move (no room).
        terrace("mkfs", "--tier", f"pm:{pool}:256M", "--tier", f"ssd:{ssd}:16M")
        with mounted_pool(pool, mnt, "placement_policy=pm-only,migration_threshold=99"):
            write_files(mnt, 30, MiB)
            code, tty, out = on_a_terminal([TERRACE_BIN, "migrate", mnt])
            assert code == 1, (code, tty[-2000:], out)
            m = re.fullmatch(r"terrace: moved ([\d.]+) MiB of 30 files to ssd \(tier 1\) in [\d.]+ s"
                             r" \([\d.]+ \S+/s\); (\d+) files failed\n", out)
            assert m and 0 < int(m.group(2)) < 30, out
            failed = int(m.group(2))
            frames = BAR.findall(tty)
            done, done_unit, total, total_unit = frames[-1][:4]
            # Full, at what moved: the files that failed left the total.
            assert (done, done_unit) == (total, total_unit), frames[-1]
            assert abs(float(done) - float(m.group(1))) < 0.1, (frames[-1], out)
            last = tty[tty.rindex("migrating ["):]
            assert re.match(rf"[^\r\n]*/s, [^)]*\) {failed} failed ", last), last
            # Each failure named (the first ten) above the bar, then a count:
            # a file the SSD has no room for (its recycling reserve left
            # out) says how much room there is; one that ran out while it
            # moved, ENOSPC.
            named = len(re.findall(r": (?:no room on ssd: .*? to move, room for .*?; left where it was"
                                   r"|no space left on device)", tty))
            assert named == min(failed, 10), tty
            if failed > 10:
                assert f"terrace: ... and {failed - 10} more files failed" in tty, tty[-300:]


def test_fsck_and_scrub_draw_a_bar_on_a_terminal_and_none_with_quiet():
    """The other long commands: `fsck` of a pool with many inodes and
    `scrub` draw a progress bar on a terminal; `--quiet` draws none and the
    result is the same."""
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:512M", "--tier", f"ssd:{ssd}:1G", "--inodes", "120000")
        with mounted_pool(pool, mnt, "placement_policy=pm-only,migration_threshold=99"):
            write_files(mnt, 64, MiB)
            terrace("migrate", "--quiet", mnt)
            code, tty, out = on_a_terminal([TERRACE_BIN, "scrub", "--rate", "64M", mnt])
            assert code == 0 and "scrub" in tty and "[" in tty, (code, tty[-2000:], out)
            code, tty, quiet_out = on_a_terminal([TERRACE_BIN, "scrub", "--quiet", mnt])
            assert (code, tty) == (0, ""), (code, tty[-2000:])
            assert quiet_out.splitlines()[-1] == out.splitlines()[-1], (quiet_out, out)
        code, tty, out = on_a_terminal([TERRACE_BIN, "fsck", pool])
        assert code == 0 and "inodes" in tty, (code, tty[-2000:], out)
        code, tty, quiet_out = on_a_terminal([TERRACE_BIN, "fsck", "--quiet", pool])
        assert (code, tty) == (0, ""), (code, tty[-2000:])
        assert quiet_out == out
