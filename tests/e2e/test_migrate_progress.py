"""`terrace migrate`'s output (issue 18 point 7): no bar without a terminal, one
summary line counting what really moved, --quiet, and one error when the
daemon dies mid-run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

from helpers import (TERRACE_BIN, describe, kill_pid, mounted_pool, temp_mountpoint, temp_pool_path,
                     temp_ssd_image, terrace, wait_until)

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
            before = os.stat(ssd).st_blocks
            proc = subprocess.Popen([str(TERRACE_BIN), "migrate", str(mnt)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                # Data reaching the SSD image: the migration is under way.
                moving = wait_until(lambda: os.stat(ssd).st_blocks > before + 2048 or proc.poll() is not None,
                                    60, interval=0.002)
                assert moving and proc.poll() is None, "the migration ended before the daemon could be killed"
                m.kill()
                out, err = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    kill_pid(proc.pid, signal.SIGKILL)
            out, err = out.decode(), err.decode()
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert proc.returncode == 1, (proc.returncode, out, err)
            assert len(lines) == 1, err
            assert lines[0].startswith(f"terrace: {mnt}: migration stopped: "), lines
            assert out == "", out
