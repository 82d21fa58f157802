"""Extended attributes through the mount: values up to the VFS limit of
64 KiB (xfstests generic/020; ext4 without ea_inode stops at about a block),
E2BIG beyond it, and big values survive a remount."""

from __future__ import annotations

import errno
import os

import helpers


def test_xattr_values_up_to_64_kib_work_through_the_mount_and_survive_a_remount():
    sizes = [1, 3584, 3585, 8000, 65536]
    with helpers.temp_pool_path() as pool, helpers.temp_mountpoint() as mnt:
        helpers.mkfs(pool, "64M")
        with helpers.mounted_pool(pool, mnt):
            p = mnt / "f"
            p.write_bytes(b"x")
            for n in sizes:
                os.setxattr(p, f"user.v{n}", bytes([n % 251]) * n)
            try:
                os.setxattr(p, "user.big", b"z" * 65537)
                raise AssertionError("a 65537-byte value was accepted")
            except OSError as e:
                assert e.errno == errno.E2BIG, e
            for n in sizes:
                assert os.getxattr(p, f"user.v{n}") == bytes([n % 251]) * n, n
        helpers.assert_fsck_clean(pool, "after big xattrs")
        with helpers.mounted_pool(pool, mnt):
            for n in sizes:
                assert os.getxattr(mnt / "f", f"user.v{n}") == bytes([n % 251]) * n, n
