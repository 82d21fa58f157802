"""Mount options a file system is expected to honour (xfstests generic/003,
120): access-time rules relatime (default), strictatime and noatime, and the
options mount(8) and fstab pass along (nodiratime, lazytime) are accepted."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

import helpers

DAY = 86_400 * 10**9


def _read(p, mode="rb"):
    with open(p, mode) as f:
        f.read()


def _atime_changes(p, steps, mode="rb") -> list[bool]:
    """For each step (a callable run before a read through an open with
    `mode`), whether the read changed atime."""
    out = []
    for prepare in steps:
        prepare()
        before = os.stat(p).st_atime_ns
        time.sleep(0.01)
        _read(p, mode)
        out.append(os.stat(p).st_atime_ns != before)
    return out


@pytest.mark.parametrize("option, expect", [
    # relatime: a read after a change updates atime, the next read does not,
    # a read when atime is a day old does.
    (None, [True, False, True]),
    ("relatime,nodiratime,lazytime", [True, False, True]),
    ("strictatime", [True, True, True]),
    ("noatime", [False, False, False]),
])
@pytest.mark.parametrize("mode", ["rb", "r+b"], ids=["read-only", "read-write"])
def test_reads_update_access_times_by_the_mount_option(tmp_path, option, expect, mode):
    """Through read-only and read-write opens alike (both read through the
    kernel's page cache, whose pages the open keeps: a due access time is
    taken at the open, design.md §5g0)."""
    with helpers.temp_pool_path() as pool, helpers.temp_mountpoint() as mnt:
        helpers.mkfs(pool, "64M")
        with helpers.mounted_pool(pool, mnt, option):
            p = mnt / "f"
            p.write_bytes(b"data")
            now = time.time_ns()

            def changed():  # atime equal to mtime: "not after the last change"
                os.utime(p, ns=(now - 10**9, now - 10**9))

            def nothing():
                pass

            def day_old():
                os.utime(p, ns=(now - 2 * DAY, now - 3 * DAY))

            # Read once, so the kernel holds the file's pages at each open.
            _read(p, mode)
            got = _atime_changes(p, [changed, nothing, day_old], mode)
            assert got == expect, f"-o {option}, open {mode}: {got}"


def test_a_mount_right_after_umount_waits_for_the_old_daemon_instead_of_failing():
    """xfstests generic/604: `umount &` then mount 10 ms later. The unmount
    writes cached data back to the SSD first, so the second mount arrives
    while the old daemon still holds the pool."""
    import subprocess
    import tempfile
    with helpers.temp_pool_path() as pool, helpers.temp_mountpoint() as mnt, \
            tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        ssd = os.path.join(tmp, "ssd.img")
        helpers.terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:512M")
        m = helpers.mount(pool, mnt, "placement_policy=block-first,writeback_age_ns=1h")
        try:
            data = os.urandom(1 << 20)
            for i in range(64):
                (mnt / str(i)).write_bytes(data)
            um = subprocess.Popen(["umount", str(mnt)])
            time.sleep(0.01)
            m2 = helpers.mount(pool, mnt)
            assert um.wait(timeout=60) == 0
            assert helpers.is_mounted(mnt)
            assert len(os.listdir(mnt)) == 64
            assert (mnt / "63").read_bytes() == data
            m = m2
        finally:
            helpers.unmount(m)
        helpers.assert_fsck_clean(pool, "after the quick remount")


def test_noacl_keeps_stored_acls_but_applies_none_of_them():
    """-o noacl as on ext4: a default ACL stored under -o acl no longer
    passes to new files (the umask applies instead, and they get no access
    ACL); it is still there, and applies again, after a remount with ACLs."""
    with helpers.temp_pool_path() as pool, helpers.temp_mountpoint() as mnt:
        helpers.mkfs(pool, "64M")
        with helpers.mounted_pool(pool, mnt):
            (mnt / "d").mkdir()
            subprocess.run(["setfacl", "-d", "-m", "u::rw,u:65534:r,g::-,m::r,o::-",
                            str(mnt / "d")], check=True)
        old = os.umask(0)
        try:
            with helpers.mounted_pool(pool, mnt, "noacl"):
                (mnt / "d" / "f").write_bytes(b"x")
                assert os.stat(mnt / "d" / "f").st_mode & 0o777 == 0o666, \
                    "the default ACL masked a new file's mode under noacl"
            with helpers.mounted_pool(pool, mnt):
                acl = subprocess.run(["getfacl", "-cn", str(mnt / "d" / "f")],
                                     capture_output=True, text=True, check=True).stdout
                assert "user:65534" not in acl, f"an ACL passed on under noacl:\n{acl}"
                (mnt / "d" / "g").write_bytes(b"x")
                assert os.stat(mnt / "d" / "g").st_mode & 0o777 == 0o640
                acl = subprocess.run(["getfacl", "-cn", str(mnt / "d" / "g")],
                                     capture_output=True, text=True, check=True).stdout
                assert "user:65534:r--" in acl, acl
        finally:
            os.umask(old)
