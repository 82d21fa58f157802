"""`-o ro` means nothing is written (issue 20, finding 3).

An ro mount writes nothing to any tier: no superblock update at mount or
unmount, no migration, write-back, access time, log move or recovery. The
control commands that would write (`terrace migrate`, `terrace set`) fail
with a clear "read-only mount" error, and `terrace rule` fails with EROFS.
A pool that needs recovery is served read-only as recovery would leave it,
recovered in memory only. Checked by hashing every
tier file (the PM file and the SSD image) before and after.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import helpers
from helpers import (assert_clean_error, assert_fsck_clean, mounted_pool, sha256_file,
                     temp_mountpoint, temp_pool_path, terrace)

MiB = 1 << 20


def populated_pool(pool: Path, ssd: Path, mnt: Path) -> dict:
    """A tiered pool with small files on PM and data on the SSD tier,
    cleanly unmounted; returns {relative path: sha256}."""
    terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:128M")
    files = {}
    with mounted_pool(pool, mnt):
        (mnt / "d").mkdir()
        for i in range(30):
            files[f"d/s{i}"] = helpers.write_pattern_file(mnt / "d" / f"s{i}", 1000 * (i + 1), i)
        files["big"] = helpers.write_pattern_file(mnt / "big", 40 * MiB, 7)  # spills to the SSD
        terrace("migrate", mnt, mnt / "d")  # and some small files moved down
        os.symlink("d/s1", mnt / "link")
        st = json.loads(terrace("where", "--json", mnt / "big").stdout)
        assert st["bytes_per_tier"].get("ssd", 0) > 0, st
    return files


def hashes(*paths: Path) -> dict:
    return {str(p): sha256_file(p) for p in paths}


def test_an_ro_mount_writes_nothing_to_any_tier():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        files = populated_pool(pool, ssd, mnt)
        before = hashes(pool, ssd)
        with mounted_pool(pool, mnt, "ro"):
            for rel, digest in files.items():
                assert sha256_file(mnt / rel) == digest, rel
                os.stat(mnt / rel)
            assert os.readlink(mnt / "link") == "d/s1"
            assert sorted(os.listdir(mnt / "d")) == sorted(f"s{i}" for i in range(30))
            terrace("status", mnt)
            status = json.loads(terrace("status", "--json", mnt).stdout)
            assert status.get("read_only") is True, status.get("read_only")
            terrace("where", mnt / "big")
            # Commands that would write fail with a clear read-only error.
            for args in (["migrate", "--to", "pm", mnt], ["migrate", mnt],
                         ["migrate", "--to", "pm", mnt, mnt / "big"],
                         ["migrate", mnt, mnt / "link"]):  # nothing to move: still refused
                cp = terrace(*args, check=False)
                msg = assert_clean_error(cp, one_line=False)
                assert "read-only mount" in msg, helpers.describe(cp, "no read-only error")
            cp = terrace("set", mnt, "sync_threshold_bytes", "4M", check=False)
            # remount,rw does not make an -o ro mount writable: the hint says how.
            assert_clean_error(cp, mentions=["read-only mount", "mount it without -o ro"])
            cp = terrace("rule", mnt / "d", "pm", check=False)
            assert_clean_error(cp, mentions=["read-only"])
            # Writes through the mount fail with EROFS.
            helpers.assert_errno(30, open, mnt / "new", "w")  # EROFS
            time.sleep(1.5)  # time for any background thread to act
            assert hashes(pool, ssd) == before, "a tier changed while mounted read-only"
        assert hashes(pool, ssd) == before, "an ro mount + unmount changed a tier file"
        assert_fsck_clean(pool, "after an ro mount")
        # The pool still mounts read-write afterwards, with everything there.
        with mounted_pool(pool, mnt):
            for rel, digest in files.items():
                assert sha256_file(mnt / rel) == digest, rel


def test_an_ro_mount_of_a_pool_that_needs_recovery_serves_it_recovered_in_memory():
    """After a crash, `-o ro` serves the pool as recovery would leave it,
    recovered in memory only: nothing is written, and the next read-write
    mount recovers it on media (a rescue mount for a pool a read-write
    mount refuses)."""
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        m = helpers.mount(pool, mnt)
        try:
            digest = helpers.write_pattern_file(mnt / "f", 100_000, 3)
            m.kill()  # a crash: the pool is not marked clean
        finally:
            helpers.lazy_unmount(mnt)
        before = hashes(pool, ssd)
        with mounted_pool(pool, mnt, "ro"):
            assert sha256_file(mnt / "f") == digest
            st = json.loads(terrace("status", mnt, "--json").stdout)
            assert st["recovery"]["recovered_in_memory"] is True, st["recovery"]
            assert "in memory only" in helpers.daemon_log(mnt).read_text()
            # The human status says the media were not repaired (it said
            # "recovered at this mount" / "recovery ran at mount").
            text = terrace("status", mnt).stdout
            last = next(ln for ln in text.splitlines() if "last unmount" in ln)
            assert "recovered in memory only" in last and "media untouched" in last, last
            rec = next(ln for ln in text.splitlines() if ln.strip().startswith("recovery "))
            assert "in memory only, the media untouched" in rec and "ran at mount" not in rec, rec
        assert hashes(pool, ssd) == before, "an ro mount of a pool that needs recovery wrote"
        # The read-write mount recovers it on media; then ro is a plain ro.
        with mounted_pool(pool, mnt) as m:
            assert m.status()["recovery"]["was_clean"] is False
            assert sha256_file(mnt / "f") == digest
        with mounted_pool(pool, mnt, "ro") as m:
            assert m.status()["recovery"]["recovered_in_memory"] is False


def test_the_mount_help_says_ro_serves_an_unclean_pool_recovered_in_memory():
    text = " ".join(terrace("mount", "--help").stdout.split())
    assert "is refused: mount it read-write once" not in text, text
    assert "not cleanly unmounted is served as recovery will leave it, recovered in memory only" \
        in text, text


def test_norecovery_is_taken_with_ro_and_refused_without_it():
    """`ro,norecovery` (scripts written for ext4/XFS, xfstests generic/537)
    is an ro mount: nothing written, fstrim refused with EROFS; without
    `ro` it is a usage error before anything is opened."""
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        files = populated_pool(pool, ssd, mnt)
        before = hashes(pool, ssd)
        cp = terrace("mount", pool, mnt, "-o", "norecovery", check=False)
        assert cp.returncode == 2, helpers.describe(cp, "norecovery without ro")
        assert_clean_error(cp, mentions=['"norecovery" needs "ro"'])
        assert not helpers.is_mounted(mnt)
        with mounted_pool(pool, mnt, "ro,noload"):
            assert sha256_file(mnt / "big") == files["big"]
            cp = helpers.run(["fstrim", str(mnt)], check=False)
            assert cp.returncode != 0 and "Read-only file system" in cp.stderr, cp.stderr
        assert hashes(pool, ssd) == before, "an ro,norecovery mount changed a tier file"
