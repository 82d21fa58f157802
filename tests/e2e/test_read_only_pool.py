"""A pool whose files can only be read: `terrace fsck POOL` (no --repair)
and `terrace mount -o ro` work on it, as `e2fsck -n` and `mount -o ro` do
on ext4; what would write (`fsck --repair`, a read-write mount) fails with
one clear line.

Two ways to make the pool's files read-only: a read-only bind mount of the
directory holding the PM file and the SSD image over itself (the paths the
superblock names stay the same), and `chattr +i` on the files. Both are
undone in `finally`. Every tier file is hashed before and after: nothing
may change.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import helpers
from helpers import assert_clean_error, mounted_pool, run, sha256_file, temp_mountpoint, terrace
from test_read_only import populated_pool as read_only_mount_pool

HINT = "mount it with -o ro, or check it without --repair"


@contextlib.contextmanager
def pool_dir() -> Iterator[Path]:
    """A fresh directory in /dev/shm for a pool's files; removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix=helpers.unique_name("ro-pool") + "-", dir="/dev/shm"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def populated_pool(d: Path, mnt: Path) -> tuple[Path, Path, dict]:
    """`test_read_only.populated_pool` with its PM file and SSD image in `d`
    (so that one bind mount covers both); returns the two paths too."""
    pool, ssd = d / "p.pm", d / "ssd.img"
    return pool, ssd, read_only_mount_pool(pool, ssd, mnt)


def hashes(*paths: Path) -> dict:
    return {str(p): sha256_file(p) for p in paths}


@contextlib.contextmanager
def read_only_bind(d: Path) -> Iterator[None]:
    """`d` bind-mounted over itself read-only; unmounted afterwards."""
    run(["mount", "--bind", str(d), str(d)])
    try:
        run(["mount", "-o", "remount,bind,ro", str(d)])
        yield
    finally:
        cp = run(["umount", str(d)], check=False)
        if cp.returncode != 0:
            run(["umount", "-l", str(d)], check=False)


@contextlib.contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """`chattr +i` on `paths`; `chattr -i` afterwards."""
    try:
        for p in paths:
            run(["chattr", "+i", str(p)])
        yield
    finally:
        for p in paths:
            run(["chattr", "-i", str(p)], check=False)


def assert_checks_and_mounts_read_only(pool: Path, mnt: Path, files: dict) -> None:
    """fsck (check only) is clean; `-o ro` and `-o ro,norecovery` serve the files."""
    cp = helpers.fsck(pool)
    assert cp.returncode == 0, helpers.describe(cp, "fsck of a read-only pool")
    assert "result: clean" in cp.stdout, cp.stdout
    cp = helpers.fsck(pool, "--data", "--json")
    assert cp.returncode == 0, helpers.describe(cp, "fsck --data of a read-only pool")
    assert json.loads(cp.stdout)["clean"] is True
    for options in ("ro", "ro,norecovery"):
        with mounted_pool(pool, mnt, options) as m:
            for rel, digest in files.items():
                assert sha256_file(mnt / rel) == digest, (options, rel)
            status = m.status()
            assert status.get("read_only") is True, status
            helpers.assert_errno(30, open, mnt / "new", "w")  # EROFS
        assert not helpers.is_mounted(mnt)


def assert_refuses_to_write(pool: Path, mnt: Path, culprit: Path) -> None:
    """fsck --repair and a read-write mount fail with the one-line hint."""
    cp = helpers.fsck(pool, "--repair")
    assert cp.returncode == 2, helpers.describe(cp, "fsck --repair of a read-only pool")
    assert_clean_error(cp, mentions=[str(pool), "is read-only", HINT])
    cp = terrace("mount", "--daemon", pool, mnt, check=False)
    try:
        assert_clean_error(cp, mentions=[str(culprit), "is read-only", HINT])
    finally:
        if helpers.is_mounted(mnt):
            helpers.lazy_unmount(mnt)
    assert not helpers.is_mounted(mnt)


def test_a_pool_on_a_read_only_bind_mount_is_checked_and_mounted_read_only():
    with pool_dir() as d, temp_mountpoint() as mnt:
        pool, ssd, files = populated_pool(d, mnt)
        before = hashes(pool, ssd)
        with read_only_bind(d):
            cp = run(["touch", str(d / "probe")], check=False)
            assert cp.returncode != 0, "the bind mount is not read-only"
            assert_checks_and_mounts_read_only(pool, mnt, files)
            assert_refuses_to_write(pool, mnt, pool)
            assert hashes(pool, ssd) == before
        assert hashes(pool, ssd) == before, "a tier file changed"
        helpers.assert_fsck_clean(pool, "after the read-only bind mount")


def test_immutable_pool_files_are_checked_and_mounted_read_only():
    with pool_dir() as d, temp_mountpoint() as mnt:
        pool, ssd, files = populated_pool(d, mnt)
        before = hashes(pool, ssd)
        # Only the SSD image immutable: a read-write mount names the tier.
        with immutable(ssd):
            cp = terrace("mount", "--daemon", pool, mnt, check=False)
            try:
                assert_clean_error(cp, mentions=[f"tier 1 ({ssd}) is read-only", HINT])
            finally:
                if helpers.is_mounted(mnt):
                    helpers.lazy_unmount(mnt)
            assert_checks_and_mounts_read_only(pool, mnt, files)
        with immutable(pool, ssd):
            cp = subprocess.run(["lsattr", str(pool)], capture_output=True, text=True)
            assert "i" in cp.stdout.split()[0], cp.stdout
            assert_checks_and_mounts_read_only(pool, mnt, files)
            assert_refuses_to_write(pool, mnt, pool)
        assert hashes(pool, ssd) == before, "a tier file changed"
        # Writable again: the pool mounts read-write with everything there.
        with mounted_pool(pool, mnt):
            for rel, digest in files.items():
                assert sha256_file(mnt / rel) == digest, rel
