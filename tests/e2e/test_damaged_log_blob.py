"""One flipped bit in a cold file's log on the SSD costs that file, not the
pool (design.md §3.6, "A damaged log blob").

Log migration moves the logs of cold files to the SSD as blobs. With one
bit of one blob flipped on the SSD image: a read-write mount is refused
with one line naming the file's path and the way out; `mount -o ro` works,
the damaged file returns EIO and every other file reads back; `terrace
fsck --repair` keeps the rest of the damaged file's state, and the pool
then mounts read-write with every other file intact.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import struct
from pathlib import Path
from typing import Iterator

from helpers import (assert_clean_error, assert_fsck_clean, fsck, mounted_pool, temp_mountpoint,
                     temp_pool_path, temp_ssd_image, terrace, wait_until)


def body(i: int) -> bytes:
    return f"message {i}\n".encode() * (3 + i % 40)


def flip_bit_in_blob_of(ssd: Path, ino: int, at: int) -> None:
    """Flips one bit `at` bytes into the log blob of inode `ino` on the SSD
    image: the blob starts with the magic TERRLOG1 and its owner's number
    (format crate, log_blob.rs)."""
    image = bytearray(ssd.read_bytes())
    start = image.find(b"TERRLOG1" + struct.pack("<Q", ino))
    assert start >= 0, f"no log blob of inode {ino} on the SSD"
    assert image.find(b"TERRLOG1" + struct.pack("<Q", ino), start + 1) < 0, "two blobs"
    image[start + at] ^= 0x10
    with open(ssd, "r+b") as f:
        f.seek(start + at)
        f.write(image[start + at:start + at + 1])


N = 2000


@contextlib.contextmanager
def cold_pool() -> Iterator[tuple[Path, Path, Path]]:
    """A pool (PM 16M, SSD 256M) whose directory /mail holds N small
    files, cold at once (migration age 0, threshold 1%): their data, then
    the logs of at least 60 of them (how many depends on the pace of the
    passes: 94 to 258 seen), moved to the SSD; unmounted.
    Yields the pool, the SSD image and a mount point."""
    with temp_ssd_image() as ssd, temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:256M", "--inodes", "4000")
        with mounted_pool(pool, mnt) as m:
            (mnt / "mail").mkdir()
            for i in range(N):
                (mnt / "mail" / f"m{i}").write_bytes(body(i))
            terrace("set", mnt, "migration_age_ns", "0")
            terrace("set", mnt, "migration_threshold", "1")
            moved = wait_until(lambda: m.status()["log_migration"]["logs_on_tiers"] >= 60, 60,
                               interval=0.5)
            assert moved, ("the test needs logs on the SSD", m.status()["log_migration"])
        yield pool, ssd, mnt


def test_a_flipped_bit_in_a_cold_log_blob_is_refused_rw_served_ro_and_repaired():
    n = N
    with cold_pool() as (pool, ssd, mnt):
        # A file whose log is on the SSD: the first one the image holds a blob of.
        image = ssd.read_bytes()
        victim = None
        with mounted_pool(pool, mnt, "ro"):
            inos = {i: os.stat(mnt / "mail" / f"m{i}").st_ino for i in range(n)}
        for i, ino in inos.items():
            if image.find(b"TERRLOG1" + struct.pack("<Q", ino)) >= 0:
                victim = i
                break
        assert victim is not None, "no file's log blob found on the SSD image"
        # 64-byte header, then the first entry (its data): 20 bytes into it.
        flip_bit_in_blob_of(ssd, inos[victim], 64 + 20)
        path = f"/mail/m{victim}"

        cp = terrace("mount", pool, mnt, "--daemon", check=False)
        msg = assert_clean_error(cp, mentions=[path, "-o ro", "fsck --repair"])
        assert "pool is corrupt" in msg, msg

        with mounted_pool(pool, mnt, "ro") as m:
            try:
                (mnt / "mail" / f"m{victim}").read_bytes()
                raise AssertionError("the damaged file was read")
            except OSError as e:
                assert e.errno == errno.EIO, e
            assert os.stat(mnt / "mail" / f"m{victim}").st_size == len(body(victim))
            bad = [i for i in range(n) if i != victim and (mnt / "mail" / f"m{i}").read_bytes() != body(i)]
            assert not bad, f"{len(bad)} undamaged files differ, e.g. {bad[:5]}"
            text = terrace("status", mnt).stdout
            assert "damage" in text and path in text, text

        cp = fsck(pool, "--repair")
        assert path in cp.stdout + cp.stderr, cp.stdout + cp.stderr
        assert_fsck_clean(pool, "after the repair")
        with mounted_pool(pool, mnt):
            bad = [i for i in range(n) if i != victim and (mnt / "mail" / f"m{i}").read_bytes() != body(i)]
            assert not bad, f"{len(bad)} files differ after the repair, e.g. {bad[:5]}"
            # The damaged entry was its data; its size and names are kept.
            assert os.stat(mnt / "mail" / f"m{victim}").st_size == len(body(victim))
            (mnt / "mail" / "after").write_bytes(b"writable again")
        assert_fsck_clean(pool, "after the remount")


def test_fsck_of_a_pool_whose_ssd_is_missing_lists_fifty_problems_then_a_count():
    """A tier that cannot be opened makes one problem per file whose log is
    on it (thousands): the text report lists 50 and says how many more,
    `--json` lists them all; nothing is repaired away. (This test zeroed the
    SSD's header until fsck learnt to tell the tier by its content:
    test_tier_safety.py.)"""
    with cold_pool() as (pool, ssd, mnt):
        away = ssd.with_name(ssd.name + ".away")
        ssd.rename(away)
        try:
            cp = fsck(pool)
            assert cp.returncode == 1, cp.stdout + cp.stderr
            lines = [ln for ln in cp.stdout.splitlines() if ln.strip().startswith("problem:")]
            assert len(lines) == 51, cp.stdout[-3000:]
            more = re.search(r"\.\.\. and (\d+) more \(`terrace fsck --json` lists them all\)", lines[-1])
            assert more, lines[-1]
            assert "which was not opened" in cp.stdout, cp.stdout[-3000:]
            cp = fsck(pool, "--json")
            assert len(json.loads(cp.stdout)["problems"]) == 50 + int(more.group(1))
        finally:
            away.rename(ssd)
        assert_fsck_clean(pool, "with the ssd back")
