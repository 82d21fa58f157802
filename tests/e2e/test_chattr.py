"""Inode flags through a real mount: `chattr` and `lsattr` (e2fsprogs) and
`xfs_io chattr` work on Terrace files and directories, and what a flag
forbids still holds after a kill -9 of the daemon and a new mount (the flag
is committed on PM when chattr returns). The rules themselves are compared
with ext4 in test_posix_parity.py (`..._like_ext4`) and checked through the
core in crates/core/tests/inode_flags.rs.
"""

from __future__ import annotations

import errno
import os

import pytest

import helpers
from helpers import mounted_pool, run, temp_mountpoint, temp_pool_path, terrace


def lsattr(path) -> str:
    """The flag letters lsattr shows for `path` (dashes dropped)."""
    out = run(["lsattr", "-d", str(path)]).stdout.split()[0]
    return out.replace("-", "")


def test_chattr_flags_show_in_lsattr_and_hold_after_kill_9_and_remount():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        helpers.mkfs(pool, "256M")
        with mounted_pool(pool, mnt) as m:
            f = mnt / "frozen"
            f.write_bytes(b"keep me")
            d = mnt / "spool"
            d.mkdir()
            (d / "old").write_bytes(b"x")
            run(["chattr", "+i", str(f)])
            run(["chattr", "+a", "+d", str(d)])
            run(["xfs_io", "-c", "chattr +A", str(mnt / "spool" / "old")])
            assert lsattr(f) == "i"
            assert lsattr(d) == "ad"
            assert lsattr(d / "old") == "A"
            with pytest.raises(PermissionError):
                f.write_bytes(b"changed")
            m.kill()  # SIGKILL: nothing written back or unmounted cleanly
        helpers.lazy_unmount(mnt)
        with mounted_pool(pool, mnt):
            f = mnt / "frozen"
            d = mnt / "spool"
            assert lsattr(f) == "i" and lsattr(d) == "ad"
            assert f.read_bytes() == b"keep me"
            for what, act in [("unlink", lambda: os.unlink(f)),
                              ("rename", lambda: os.rename(f, mnt / "moved")),
                              ("open for writing", lambda: os.open(f, os.O_WRONLY)),
                              ("remove from an append-only dir", lambda: os.unlink(d / "old"))]:
                with pytest.raises(OSError) as e:
                    act()
                assert e.value.errno == errno.EPERM, what
            (d / "new").write_bytes(b"appending a name is allowed")
            run(["chattr", "-i", str(f)])
            run(["chattr", "-a", str(d)])
            os.unlink(f)
            os.unlink(d / "old")
        helpers.assert_fsck_clean(pool, "after the flags were cleared")


def test_flags_the_pool_does_not_keep_are_refused_with_a_clear_error():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        helpers.mkfs(pool, "256M")
        with mounted_pool(pool, mnt):
            f = mnt / "f"
            f.write_bytes(b"x")
            cp = run(["chattr", "+c", str(f)], check=False)  # compression
            assert cp.returncode != 0
            assert "Operation not supported" in cp.stderr, cp.stderr
            assert lsattr(f) == ""
            # Any other ioctl is not a Terrace one.
            cp = run(["xfs_io", "-c", "fiemap", str(f)], check=False)
            assert "Inappropriate ioctl" in cp.stderr or "not supported" in cp.stderr.lower() \
                or cp.returncode != 0, cp
        terrace("fsck", pool)


@pytest.mark.parametrize("options", [None, "writeback_cache"])
def test_an_append_only_file_takes_appends_and_times_set_to_now_but_no_chosen_time(options):
    """As on ext4 (xfstests generic/079): an append-only file takes O_APPEND
    writes and `utime(NULL)`, and refuses times chosen by the caller. Under
    the writeback cache the kernel sends its own clock as an explicit mtime
    for `utime(NULL)`; that too must be taken as "now"."""
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        helpers.mkfs(pool, "64M")
        with mounted_pool(pool, mnt, options):
            f = mnt / "log"
            f.write_bytes(b"first\n")
            run(["chattr", "+a", str(f)])
            fd = os.open(f, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, b"second\n")
            finally:
                os.close(fd)
            os.utime(f, None)
            with pytest.raises(PermissionError):
                os.utime(f, (1_000_000, 1_000_000))
            with pytest.raises(PermissionError):
                os.truncate(f, 0)
            assert f.read_bytes() == b"first\nsecond\n"
            run(["chattr", "-a", str(f)])
        helpers.assert_fsck_clean(pool, "after the append-only file")
