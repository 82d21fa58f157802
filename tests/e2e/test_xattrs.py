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


def _getxattr_requests(port: int) -> float:
    from test_metrics import _scrape
    return _scrape(port)[1].get('terrace_fuse_request_duration_seconds_count{op="getxattr"}', 0)


def test_the_selinux_label_is_not_supported_by_default_so_ls_l_stops_asking_every_file():
    """Without `-o selinux_labels` the label is not supported: get, set and
    remove fail with EOPNOTSUPP and listings leave it out, so `ls -l` of a
    directory asks the daemon once, not once per file (it used to: ENODATA
    per file, a round trip each). With the option it is stored like any
    attribute, survives a remount, and is unseen (not lost) by a mount
    without the option."""
    from test_metrics import _free_port
    port = _free_port()
    label = b"system_u:object_r:var_t:s0\x00"
    with helpers.temp_pool_path() as pool, helpers.temp_mountpoint() as mnt:
        helpers.mkfs(pool, "64M")
        with helpers.mounted_pool(pool, mnt, f"metrics=127.0.0.1:{port}"):
            d = mnt / "d"
            d.mkdir()
            for i in range(300):
                (d / f"f{i}").write_bytes(b"x")
            for call in (lambda: os.getxattr(d / "f0", "security.selinux"),
                         lambda: os.setxattr(d / "f0", "security.selinux", label),
                         lambda: os.removexattr(d / "f0", "security.selinux")):
                try:
                    call()
                    raise AssertionError("the label is supported without -o selinux_labels")
                except OSError as e:
                    assert e.errno == errno.EOPNOTSUPP, e
            os.setxattr(d / "f0", "security.other", b"kept")
            assert os.getxattr(d / "f0", "security.other") == b"kept"
            helpers.run(["ls", "-l", d])  # the ACL queries of new inodes
            before = _getxattr_requests(port)
            out = helpers.run(["ls", "-l", d]).stdout
            assert out.count("\n") == 301, out[:200]
            asked = _getxattr_requests(port) - before
            assert asked <= 2, f"ls -l of 300 files sent {asked} getxattr requests"
        with helpers.mounted_pool(pool, mnt, "selinux_labels"):
            f = mnt / "d" / "f1"
            os.setxattr(f, "security.selinux", label)
            assert os.getxattr(f, "security.selinux") == label
            assert "security.selinux" in os.listxattr(f)
        with helpers.mounted_pool(pool, mnt, "selinux_labels"):
            assert os.getxattr(mnt / "d" / "f1", "security.selinux") == label, "after a remount"
        with helpers.mounted_pool(pool, mnt):
            f = mnt / "d" / "f1"
            assert "security.selinux" not in os.listxattr(f)
            try:
                os.getxattr(f, "security.selinux")
                raise AssertionError("the label is shown without -o selinux_labels")
            except OSError as e:
                assert e.errno == errno.EOPNOTSUPP, e
        with helpers.mounted_pool(pool, mnt, "selinux_labels"):
            assert os.getxattr(mnt / "d" / "f1", "security.selinux") == label, "kept, unseen"
        helpers.assert_fsck_clean(pool, "after labels")
