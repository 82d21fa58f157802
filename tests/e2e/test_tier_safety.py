"""Every tier knows its pool and its mount (issue 20, finding 2).

A mounted pool holds an exclusive lock on every tier file, so `terrace mkfs`
refuses any of them — the PM file or a block-tier image — with or without
--force; a block-tier image of another, unmounted pool is refused without
--force (naming the pool); and a tier image that was truncated or replaced
while the pool was unmounted is refused at mount with a one-line error that
names the tier.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

import helpers
from helpers import (assert_clean_error, assert_fsck_clean, mounted_pool, sha256_file,
                     temp_mountpoint, temp_pool_path, terrace)

MiB = 1 << 20


def digest(path: Path) -> str:
    return sha256_file(path)


def fill(mnt: Path) -> dict:
    """Small files on PM and a large one that spills to the SSD tier."""
    files = {}
    (mnt / "d").mkdir()
    for i in range(20):
        p = mnt / "d" / f"small{i}"
        files[p] = helpers.write_pattern_file(p, 4096 * (i + 1), i)
    big = mnt / "big"
    files[big] = helpers.write_pattern_file(big, 48 * MiB, 99)  # 3x the PM tier
    return files


def check(files: dict) -> None:
    for p, d in files.items():
        assert digest(p) == d, f"{p} changed"


def tier_uuid(image: Path) -> str:
    """The pool uuid in a block-tier header (bytes 8..24), hyphenated."""
    with open(image, "rb") as f:
        h = f.read(24)[8:24].hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def test_mkfs_cannot_clobber_any_tier_of_a_mounted_pool_even_with_force():
    """The finding: with a pool mounted, `mkfs --force` naming its SSD image
    (with another PM file) used to shrink the image and destroy the pool."""
    with temp_pool_path() as pool, temp_pool_path("other") as other, helpers.temp_ssd_image() as ssd, \
            temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            files = fill(mnt)
            ssd_size = ssd.stat().st_size
            attempts = [
                # the finding: another PM file, the live pool's SSD image, a new size
                ["--force", "--tier", f"pm:{other}:64M", "--tier", f"ssd:{ssd}:64M"],
                ["--force", "--tier", f"pm:{other}:64M", "--tier", f"ssd:{ssd}"],
                ["--tier", f"pm:{other}:64M", "--tier", f"ssd:{ssd}"],
                # the live SSD image as a PM tier, the live PM file as a block tier
                ["--force", "--tier", f"pm:{ssd}:64M"],
                ["--force", "--tier", f"pm:{other}:64M", "--tier", f"hdd:{pool}"],
                # the live PM file itself
                ["--force", "--tier", f"pm:{pool}:16M"],
            ]
            for args in attempts:
                cp = terrace("mkfs", *args, check=False)
                msg = assert_clean_error(cp)
                assert "mounted" in msg, helpers.describe(cp, "the error does not say the pool is mounted")
                assert str(mnt) in msg, helpers.describe(cp, "the error does not name the mount point")
                assert ssd.stat().st_size == ssd_size, f"mkfs {args} resized the live SSD image"
                assert not other.exists(), f"mkfs {args} failed but created {other}"
                check(files)
            # The lock itself: every tier file is locked by the daemon.
            for tier in (pool, ssd):
                with open(tier, "rb") as f:
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        raise AssertionError(f"{tier} is not locked by the mounted pool")
                    except BlockingIOError:
                        pass
            check(files)
        assert_fsck_clean(pool, "after mkfs attempts on the mounted pool")
        with mounted_pool(pool, mnt):
            check(files)
        assert_fsck_clean(pool, "after the remount")


def test_mkfs_refuses_a_block_tier_of_another_pool_without_force_and_names_it():
    with temp_pool_path() as pool, temp_pool_path("other") as other, helpers.temp_ssd_image() as ssd:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        before = digest(ssd)
        cp = terrace("mkfs", "--tier", f"pm:{other}:16M", "--tier", f"ssd:{ssd}", check=False)
        msg = assert_clean_error(cp, mentions=[str(ssd), tier_uuid(ssd), "--force"])
        assert "tier 1" in msg, msg
        assert digest(ssd) == before, "mkfs without --force wrote to another pool's tier"
        assert not other.exists()
        # --force overrides a clean, unmounted pool.
        terrace("mkfs", "--force", "--tier", f"pm:{other}:16M", "--tier", f"ssd:{ssd}")
        assert digest(ssd) != before


def test_mount_refuses_a_truncated_block_tier_with_a_clear_error():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            fill(mnt)
        pm_before = digest(pool)
        os.truncate(ssd, 128 * MiB)
        cp = helpers.run([helpers.TERRACE_BIN, "mount", pool, mnt, "--daemon"], check=False)
        if helpers.is_mounted(mnt):
            helpers.unmount(helpers.Mount(pool, mnt))
        msg = assert_clean_error(cp, mentions=[str(ssd), "tier 1"])
        assert re.search(r"truncated|shorter", msg), msg
        assert digest(pool) == pm_before, "a refused mount wrote to the PM tier"


def test_mount_refuses_a_block_tier_replaced_by_another_pools_image():
    with temp_pool_path() as pool, temp_pool_path("other") as other, helpers.temp_ssd_image() as ssd, \
            helpers.temp_ssd_image("ssd2") as ssd2, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        terrace("mkfs", "--tier", f"pm:{other}:16M", "--tier", f"ssd:{ssd2}:64M")
        os.replace(ssd2, ssd)
        pm_before = digest(pool)
        cp = helpers.run([helpers.TERRACE_BIN, "mount", pool, mnt, "--daemon"], check=False)
        if helpers.is_mounted(mnt):
            helpers.unmount(helpers.Mount(pool, mnt))
        assert_clean_error(cp, mentions=[str(ssd), "tier 1", "another pool"])
        assert digest(pool) == pm_before


def test_a_restored_backup_of_the_pm_tier_is_refused_once_the_pool_moved_on():
    """The PM tier is a file one may back up and restore apart from the
    block tiers (on /dev/shm it must be, to outlive a reboot). A backup
    restored after the pool moved on is refused by mount and reported by
    fsck, naming the tier, with nothing written; the PM tier that moved on
    mounts and every file is whole. Before tier epochs the backup mounted
    and read damaged data (EIO), and its writes would have damaged the
    newer copy's (found by hand, 2026-11-30)."""
    with temp_pool_path() as pool, temp_pool_path("backup") as backup, \
            temp_pool_path("newer") as newer, helpers.temp_ssd_image() as ssd, \
            temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            files = fill(mnt)
        backup.write_bytes(pool.read_bytes())
        with mounted_pool(pool, mnt):
            check(files)
            (mnt / "big").unlink()
            del files[mnt / "big"]
            p = mnt / "after"
            files[p] = helpers.write_pattern_file(p, 48 * MiB, 7)
        newer.write_bytes(pool.read_bytes())
        pool.write_bytes(backup.read_bytes())
        ssd_before = digest(ssd)
        for ro in ([], ["-o", "ro"]):
            cp = helpers.run([helpers.TERRACE_BIN, "mount", pool, mnt, "--daemon", *ro], check=False)
            if helpers.is_mounted(mnt):
                helpers.unmount(helpers.Mount(pool, mnt))
            assert_clean_error(cp, mentions=[str(ssd), "tier 1", "another copy of this pool's PM tier"])
        cp = helpers.run([helpers.TERRACE_BIN, "fsck", pool], check=False)
        assert cp.returncode != 0 and "another copy of this pool's PM tier" in cp.stdout, cp.stdout
        assert digest(pool) == digest(backup), "a refused mount wrote to the PM tier"
        assert digest(ssd) == ssd_before, "a refused mount wrote to the SSD tier"
        pool.write_bytes(newer.read_bytes())
        with mounted_pool(pool, mnt):
            check(files)
        assert_fsck_clean(pool, "the copy that moved on")


def test_fsck_reports_a_block_tier_that_is_truncated_replaced_or_damaged_and_reads_nothing_from_it():
    """fsck checks each block tier's header against the superblock as mount
    does (it used to read another pool's image and say "clean"). A tier
    truncated, replaced or missing is read from no more; one whose header
    is damaged is compared with what the pool recorded there, and checked
    when it is the tier (the tests below)."""
    with temp_pool_path() as pool, temp_pool_path("other") as other, helpers.temp_ssd_image() as ssd, \
            helpers.temp_ssd_image("ssd2") as ssd2, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt):
            (mnt / "big").write_bytes(os.urandom(24 * MiB))
        assert_fsck_clean(pool, "before any damage")
        good = ssd.read_bytes()

        def fsck_says(*mentions: str) -> None:
            cp = terrace("fsck", "--data", pool, check=False)
            assert cp.returncode != 0, cp.stdout + cp.stderr
            out = cp.stdout + cp.stderr
            for m in mentions:
                assert m in out, out

        # Damaged header (one byte of the uuid).
        with open(ssd, "r+b") as f:
            f.seek(9)
            b = f.read(1)
            f.seek(9)
            f.write(bytes([b[0] ^ 0xFF]))
        fsck_says(str(ssd), "tier 1", "damaged")
        # Truncated.
        ssd.write_bytes(good)
        os.truncate(ssd, 32 * MiB)
        fsck_says(str(ssd), "tier 1", "truncated")
        # Replaced by another pool's image.
        terrace("mkfs", "--tier", f"pm:{other}:16M", "--tier", f"ssd:{ssd2}:64M")
        os.replace(ssd2, ssd)
        fsck_says(str(ssd), "tier 1", "another pool")
        # Missing.
        ssd.unlink()
        fsck_says(str(ssd), "tier 1", "missing")
        # Restored: clean again.
        ssd.write_bytes(good)
        assert_fsck_clean(pool, "after restoring the image")


def test_fsck_with_a_tier_holding_logs_missing_keeps_the_orphans_and_says_to_put_it_back():
    """With the SSD that holds directories' logs (log migration) moved away,
    the files those directories name look like orphans. fsck must not say
    the next mount or repair frees them (neither does: the pool does not
    mount, and repair frees nothing while a problem stands), nor send the
    user to --repair: the tier has to come back. Once it is back, the pool
    is clean and every file reads as before."""
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:256M")
        files = {}
        with mounted_pool(pool, mnt, "migration_threshold=1,migration_age_ns=0") as m:
            for d in range(4):
                (mnt / f"d{d}").mkdir()
                for i in range(50):
                    p = mnt / f"d{d}" / f"f{i}"
                    p.write_bytes(bytes([i]) * (100 + 37 * i))
                    files[p.relative_to(mnt)] = p.read_bytes()
            # The directories' logs leave PM (their files' data is on PM,
            # so theirs stay).
            assert helpers.wait_until(
                lambda: m.status()["log_migration"]["logs_on_tiers"] >= 4, 30), \
                m.status()["log_migration"]
        assert_fsck_clean(pool, "with the logs on the ssd")
        away = ssd.with_name(ssd.name + ".away")
        os.replace(ssd, away)
        try:
            for args in (["fsck", pool], ["fsck", "--repair", pool]):
                cp = terrace(*args, check=False)
                out = cp.stdout + cp.stderr
                assert cp.returncode == 1, out
                assert "missing" in out and "put the missing or wrong tier back" in out, out
                assert "fsck --repair` to fix" not in out, out
                assert "orphan inodes" in out, out
                assert "kept while the problems below remain" in out, out
                assert "freed" not in out and "next mount frees" not in out, out
        finally:
            os.replace(away, ssd)
        assert_fsck_clean(pool, "with the ssd back")
        with mounted_pool(pool, mnt):
            for rel, data in files.items():
                assert (mnt / rel).read_bytes() == data, rel


def test_a_zeroed_tier_header_is_written_again_by_repair_only_on_the_pools_own_device():
    """A new user zeroed the SSD tier's first 4 KiB (its header): mount,
    `-o ro` and repair all refused, and the pool was lost although every
    field of the header is in the superblock. Now fsck judges the device by
    what the pool recorded on it (data checksums, log blobs): on the tier's
    own device, `--repair` writes the header again and every file reads as
    before; on another device at that path (a blank image, another file
    system), nothing is written and the error says to put the tier back."""
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt):
            files = fill_some(mnt)
        assert_fsck_clean(pool, "before any damage")
        good = ssd.read_bytes()

        def zero_header(image: Path) -> None:
            with open(image, "r+b") as f:
                f.write(bytes(4096))

        zero_header(ssd)
        cp = terrace("mount", pool, mnt, "--daemon", check=False)
        assert_clean_error(cp, mentions=[str(ssd), "fsck --repair"])
        cp = terrace("fsck", pool, check=False)
        out = cp.stdout + cp.stderr
        assert cp.returncode == 1, out
        assert "holds the pool's tier" in out and "fsck --repair" in out, out
        assert ssd.read_bytes()[:4096] == bytes(4096), "a check wrote the header"

        # Another device at the tier's path: a blank image, then one whose
        # block 0 holds something else. Repair writes nothing to either.
        for block0 in (bytes(4096), os.urandom(4096)):
            with open(ssd, "wb") as f:
                f.write(block0)
            os.truncate(ssd, 64 * MiB)
            before = ssd.read_bytes()
            cp = terrace("fsck", "--repair", pool, check=False)
            out = cp.stdout + cp.stderr
            assert cp.returncode == 1, out
            assert "may not be the tier" in out and str(ssd) in out, out
            assert ssd.read_bytes() == before, "repair wrote to a device that is not the tier"

        # The tier's own image made into an ext4 file system without a
        # discard: its old blocks still match the pool's records, but
        # block 0 is now the file system's, never overwritten.
        if shutil.which("mkfs.ext4"):
            ssd.write_bytes(good)
            subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "nodiscard", str(ssd)], check=True)
            before = ssd.read_bytes()
            cp = terrace("fsck", "--repair", pool, check=False)
            out = cp.stdout + cp.stderr
            assert cp.returncode == 1, out
            assert "ext2/ext3/ext4 file system" in out, out
            assert ssd.read_bytes() == before, "repair wrote over a file system"

        # The tier's own image, header zeroed: repaired, clean, files intact.
        ssd.write_bytes(good)
        zero_header(ssd)
        cp = terrace("fsck", "--repair", pool, check=False)
        out = cp.stdout + cp.stderr
        assert cp.returncode == 0, out
        assert "written again from the pool's record" in out, out
        assert ssd.read_bytes()[:4096] == good[:4096], "the header differs from the one mkfs wrote"
        assert_fsck_clean(pool, "after the repair")
        with mounted_pool(pool, mnt):
            check(files)


def test_a_blank_header_of_a_tier_the_pool_has_not_used_yet_is_written_again():
    """With nothing recorded on the tier to compare, a blank block 0 (or a
    damaged header that still names the pool) is enough: nothing of anyone's
    is there to lose."""
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt):
            (mnt / "small").write_bytes(b"on pm only")
        good = ssd.read_bytes()[:4096]
        with open(ssd, "r+b") as f:
            f.write(bytes(4096))
        cp = terrace("fsck", "--repair", pool, check=False)
        out = cp.stdout + cp.stderr
        assert cp.returncode == 0, out
        assert "block 0 is blank" in out, out
        assert ssd.read_bytes()[:4096] == good
        with mounted_pool(pool, mnt):
            assert (mnt / "small").read_bytes() == b"on pm only"


def fill_some(mnt: Path) -> dict:
    """Like `fill`, on a smaller pool: files on PM and 24 MiB on the SSD."""
    files = {}
    (mnt / "d").mkdir()
    for i in range(10):
        p = mnt / "d" / f"small{i}"
        files[p] = helpers.write_pattern_file(p, 4096 * (i + 1), i)
    big = mnt / "big"
    files[big] = helpers.write_pattern_file(big, 24 * MiB, 99)
    return files
