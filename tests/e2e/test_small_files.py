"""Many small files on a small PM tier through a real mount (issue 15): a real
tree of 50,000+ small files extracted with tar onto a pool whose PM tier is
64 MiB gets no ENOSPC while the SSD has room, and every file has its source's
checksum after unmount, fsck and remount."""

import contextlib
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import assert_fsck_clean, mounted_pool, run, temp_mountpoint, temp_pool_path, terrace, unique_name

SOURCES = ["/usr/include", "/usr/share"]
MAX_FILE = 64 * 1024
WANT_FILES = 50_000


def small_files() -> list[str]:
    """Regular files under 64 KiB of the system's own trees (headers, docs,
    locales, man pages), sorted, at most 52,000."""
    cp = subprocess.run(["find", *SOURCES, "-type", "f", "-size", f"-{MAX_FILE // 1024}k"],
                        capture_output=True, text=True, check=False)
    files = sorted(p for p in cp.stdout.splitlines() if os.access(p, os.R_OK))
    return files[:52_000]


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@contextlib.contextmanager
def scratch_file(tag: str):
    path = Path("/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()) / unique_name(tag)
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@pytest.mark.slow
def test_a_tree_of_50000_small_files_extracts_onto_a_64m_pm_pool_and_survives_remount():
    files = small_files()
    if len(files) < WANT_FILES:
        pytest.skip(f"this machine has only {len(files)} small files under {SOURCES}")
    total = sum(os.path.getsize(p) for p in files)
    with scratch_file("tree.tar") as tar, scratch_file("tree.list") as listing, \
            scratch_file("ssd.img") as ssd, temp_pool_path() as pool, temp_mountpoint() as mnt:
        listing.write_text("\n".join(p.lstrip("/") for p in files) + "\n")
        run(["tar", "-C", "/", "-cf", str(tar), "-T", str(listing)], timeout=600)
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:2G", "--inodes", "60000")
        with mounted_pool(pool, mnt) as m:
            cp = run(["tar", "-C", str(mnt), "-xf", str(tar)], check=False, timeout=1200)
            assert cp.returncode == 0, f"tar failed on a pool with room: {cp.stderr[-2000:]}"
            st = m.status()
            pm = st["tiers"][0]
            assert st["inodes_used"] >= len(files), st["inodes_used"]
            # The PM tier is far smaller than the tree: data went to the SSD.
            assert total > 2 * pm["capacity"], (total, pm["capacity"])
            print(f"\n{len(files)} files, {total >> 20} MiB; PM {pm['used'] >> 20} of "
                  f"{pm['capacity'] >> 20} MiB; logs {st['space']['pm_log_bytes'] >> 10} KiB "
                  f"({st['space']['pm_log_bytes'] // max(st['inodes_used'], 1)} B per inode)")
        assert_fsck_clean(pool, "after unmounting the extracted tree")
        with mounted_pool(pool, mnt):
            bad = [p for p in files if digest(str(mnt) + p) != digest(p)]
            assert not bad, f"{len(bad)} files differ after remount, e.g. {bad[:3]}"


def test_kill_9_during_a_small_file_burst_on_a_full_pm_keeps_every_fsynced_file():
    """The daemon killed while 6,000 files of 8 KiB fill a 16 MiB PM tier (a
    third fsync'd): after recovery every fsync'd file is whole, every other
    file is whole or empty (cached writes are lost whole), fsck is clean."""
    with scratch_file("ssd.img") as ssd, temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:512M", "--inodes", "8000")
        body = lambda i: hashlib.sha256(str(i).encode()).digest() * 256  # noqa: E731
        synced = set()
        with mounted_pool(pool, mnt) as m:
            for i in range(6000):
                with open(mnt / f"f{i}", "wb") as f:
                    f.write(body(i))
                    if i % 3 == 0:
                        f.flush()
                        os.fsync(f.fileno())
                        synced.add(i)
            pm = m.status()["tiers"][0]
            assert pm["used"] > pm["capacity"] // 2, pm
            m.kill()
        assert_fsck_clean(pool, "after kill -9 during the burst")
        with mounted_pool(pool, mnt):
            for i in range(6000):
                got = (mnt / f"f{i}").read_bytes()
                if i in synced or got:
                    assert got == body(i), f"f{i} (fsync'd: {i in synced}) has {len(got)} bytes"
        assert_fsck_clean(pool, "after the remount")


def test_more_small_files_than_pm_can_hold_the_logs_of_move_their_logs_to_the_ssd():
    """48,000 small files on a 16 MiB PM tier whose pool (about 9 MiB beside
    the inode table) cannot hold 48,000 logs of 256 bytes: log migration
    moves cold logs to the SSD, packed several to a block, every create and
    write succeeds, status shows the logs on the SSD, and after unmount (fsck reads the logs there) and
    remount every file has its content."""
    n = 48_000
    with scratch_file("ssd.img") as ssd, temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:1G", "--inodes", "50000")
        body = lambda i: f"file {i}\n".encode() * (1 + i % 9)  # noqa: E731
        with mounted_pool(pool, mnt) as m:
            for d in range(8):
                (mnt / f"d{d}").mkdir()
            for i in range(n):
                (mnt / f"d{i % 8}" / f"f{i}").write_bytes(body(i))
            st = m.status()
            pool_bytes = st["tiers"][0]["capacity"]
            assert n * 256 > pool_bytes, ("the test must need log migration", pool_bytes)
            lm = st["log_migration"]
            assert lm["moved"] > 0 and lm["logs_on_tiers"] > 0, lm
            # Logs of a few hundred bytes are packed several to a block
            # (format 11), not one 4 KiB block each.
            assert lm["tier_log_bytes"] <= lm["logs_on_tiers"] * 1024, lm
            text = terrace("status", str(mnt)).stdout
            assert "cold logs" in text, text
        assert_fsck_clean(pool, "after unmounting with logs on the SSD")
        with mounted_pool(pool, mnt):
            bad = [i for i in range(n) if (mnt / f"d{i % 8}" / f"f{i}").read_bytes() != body(i)]
            assert not bad, f"{len(bad)} files differ after remount, e.g. {bad[:5]}"
        assert_fsck_clean(pool, "after the remount")
