"""Persistence across remounts: a varied tree (data, holes, > 4 GiB, links,
special files, xattrs, owners, modes, exact timestamps, renames and deletions)
reads back identically after a clean unmount, after kill -9 of the daemon once
everything was fsync'd, and over many mount cycles.

A "manifest" captures everything that must persist for every path: type, mode,
owner, link count and which names share an inode, size, mtime (ns), rdev,
symlink target, a hash of the content (sampled for huge sparse files), and all
xattrs; atime only for empty files, which are never read.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import stat
import time

import pytest

import helpers

MiB = 1 << 20
GiB = 1 << 30
T1 = 1_234_567_890_123_456_789
T2 = 1_600_000_000_000_000_001


def pattern(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def write(path, data: bytes, offset: int = 0, flags=os.O_CREAT | os.O_WRONLY) -> None:
    fd = os.open(path, flags, 0o644)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def build_tree(root: str, seed: int = 0) -> None:
    """Create a tree that uses every kind of object and most operations."""
    j = lambda *p: os.path.join(root, *p)  # noqa: E731
    rng = random.Random(seed)
    os.makedirs(j("data", "sub", "deep"))
    os.makedirs(j("links"))
    os.makedirs(j("special"))
    os.makedirs(j("times"))
    os.makedirs(j("many"))
    for i, size in enumerate([0, 1, 100, 4095, 4096, 4097, 65_536, 100_000, MiB + 3, 3 * MiB]):
        write(j("data", f"f{i}"), pattern(size, seed * 100 + i))
    # Overwrites (copy-on-write versions), appends, truncates, holes.
    write(j("data", "cow"), pattern(256 * 1024, 1))
    for k in range(50):
        write(j("data", "cow"), pattern(rng.randrange(1, 9000), 100 + k), rng.randrange(0, 256 * 1024))
    fd = os.open(j("data", "append"), os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    for k in range(30):
        os.write(fd, pattern(rng.randrange(1, 5000), 200 + k))
    os.close(fd)
    write(j("data", "truncated"), pattern(50_000, 3))
    os.truncate(j("data", "truncated"), 12_345)
    os.truncate(j("data", "truncated"), 30_000)
    write(j("data", "sparse-5g"), b"start", 0)
    write(j("data", "sparse-5g"), b"middle", 3 * GiB + 17)
    write(j("data", "sparse-5g"), b"end", 5 * GiB)
    write(j("data", "punched"), pattern(64 * 1024, 4))
    fd = os.open(j("data", "punched"), os.O_RDWR)
    os.posix_fallocate(fd, 64 * 1024, 64 * 1024)
    os.close(fd)
    write(j("data", "sub", "deep", "nested"), b"deep")
    # Links.
    write(j("links", "target"), b"linked content")
    os.link(j("links", "target"), j("links", "hard1"))
    os.link(j("links", "target"), j("data", "sub", "hard2"))
    os.symlink("target", j("links", "sym"))
    os.symlink("../data/sub/deep/nested", j("links", "sym-rel"))
    os.symlink("/" + "x" * 4094, j("links", "sym-4095"))
    os.symlink("dangling", j("links", "sym-dangling"))
    # Special files.
    os.mkfifo(j("special", "fifo"), 0o620)
    os.mknod(j("special", "sock"), stat.S_IFSOCK | 0o600)
    os.mknod(j("special", "chr"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.mknod(j("special", "blk"), stat.S_IFBLK | 0o600, os.makedev(8, 17))
    # Owners, modes, xattrs, times.
    os.chown(j("data", "f1"), 1000, 2000)
    os.chmod(j("data", "f2"), 0o4750)
    os.chmod(j("data", "sub"), 0o1777)
    os.lchown(j("links", "sym"), 33, 44)
    os.setxattr(j("data", "f3"), "user.small", b"v")
    os.setxattr(j("data", "f3"), "user.big", pattern(3000, 5))
    os.setxattr(j("data", "f3"), "trusted.t", b"trusted value")
    os.setxattr(j("data", "sub"), "user.on-dir", b"dir attr")
    os.setxattr(j("data", "f4"), "user.removed", b"x")
    os.removexattr(j("data", "f4"), "user.removed")
    write(j("times", "exact"), b"")
    os.utime(j("times", "exact"), ns=(T1, T2))
    write(j("times", "epoch"), b"")
    os.utime(j("times", "epoch"), ns=(0, 1))
    os.utime(j("data", "f5"), ns=(T2, T1))
    os.utime(j("data", "sub", "deep"), ns=(T1, T1))
    # A big directory with deletions and renames.
    for i in range(2000):
        write(j("many", f"entry-{i:05d}"), str(i).encode())
    for i in range(0, 2000, 3):
        os.unlink(j("many", f"entry-{i:05d}"))
    for i in range(1, 2000, 7):
        if os.path.exists(j("many", f"entry-{i:05d}")):
            os.rename(j("many", f"entry-{i:05d}"), j("many", f"renamed-{i:05d}"))
    # Renames across directories, of files and directories, over existing names.
    os.rename(j("data", "f6"), j("links", "moved-f6"))
    os.makedirs(j("data", "movedir", "inner"))
    write(j("data", "movedir", "inner", "x"), b"x")
    os.rename(j("data", "movedir"), j("links", "movedir"))
    write(j("data", "victim"), b"to be replaced")
    os.rename(j("data", "f7"), j("data", "victim"))
    os.makedirs(j("gone", "a"))
    os.rmdir(j("gone", "a"))
    os.rmdir(j("gone"))


def _content_digest(path: str, size: int) -> str:
    """sha256 of the content; huge files are sampled (every 256 MiB + the tail)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= 64 * MiB:
            for chunk in iter(lambda: f.read(MiB), b""):
                h.update(chunk)
        else:
            for off in list(range(0, size, 256 * MiB)) + [3 * GiB, max(0, size - MiB)]:
                f.seek(off)
                h.update(f.read(64 * 1024 if off < size - MiB else MiB))
    return h.hexdigest()[:20]


def manifest(root: str) -> dict:
    """Everything about the tree under root that must survive a remount."""
    out: dict = {}
    inodes: dict[int, list[str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            inodes.setdefault(st.st_ino, []).append(rel)
            entry = {
                "mode": oct(st.st_mode),
                "uid": st.st_uid,
                "gid": st.st_gid,
                "nlink": st.st_nlink,
                "mtime_ns": st.st_mtime_ns,
                "ino": st.st_ino,
            }
            if not stat.S_ISDIR(st.st_mode):
                entry["size"] = st.st_size
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                entry["rdev"] = (os.major(st.st_rdev), os.minor(st.st_rdev))
            if stat.S_ISLNK(st.st_mode):
                entry["target"] = os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                if st.st_size == 0:
                    entry["atime_ns"] = st.st_atime_ns
                else:
                    entry["content"] = _content_digest(p, st.st_size)
            if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
                entry["xattrs"] = sorted((n, hashlib.sha256(os.getxattr(p, n)).hexdigest()[:12])
                                         for n in os.listxattr(p))
            out[rel] = entry
    # Replace inode numbers by the set of names sharing the inode.
    for entry in out.values():
        ino = entry.pop("ino")
        entry["same_inode_as"] = sorted(inodes[ino])
    return out


def diff(before: dict, after: dict) -> list[str]:
    """Human-readable differences between two manifests (at most 20)."""
    problems = []
    for rel in sorted(set(before) | set(after)):
        if rel not in after:
            problems.append(f"{rel}: missing after remount")
        elif rel not in before:
            problems.append(f"{rel}: appeared after remount")
        elif before[rel] != after[rel]:
            changed = {k: (before[rel].get(k), after[rel].get(k)) for k in before[rel].keys() | after[rel].keys()
                       if before[rel].get(k) != after[rel].get(k)}
            problems.append(f"{rel}: {changed}")
    return problems[:20]


def fsync_tree(root: str) -> None:
    """fsync every regular file and directory (POSIX durability for the whole tree)."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if stat.S_ISREG(os.lstat(p).st_mode):
                fd = os.open(p, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)


def test_clean_unmount_and_remount_preserve_the_whole_tree(pool, mountpoint):
    with helpers.mounted_pool(pool, mountpoint):
        build_tree(str(mountpoint))
        before = manifest(str(mountpoint))
    helpers.assert_fsck_clean(pool, "after a clean unmount")
    with helpers.mounted_pool(pool, mountpoint) as m:
        after = manifest(str(mountpoint))
        status = m.status()
    assert not diff(before, after), "\n".join(diff(before, after))
    if "clean_last_time" in status:
        assert status["clean_last_time"] is True


def test_kill_after_fsync_of_everything_preserves_the_whole_tree(pool, mountpoint):
    m = helpers.mount(pool, mountpoint)
    try:
        build_tree(str(mountpoint), seed=1)
        fsync_tree(str(mountpoint))
        before = manifest(str(mountpoint))
        m.kill()
    finally:
        helpers.lazy_unmount(mountpoint)
        helpers.unmount(m)
    helpers.assert_fsck_clean(pool, "after kill -9")
    with helpers.mounted_pool(pool, mountpoint) as m2:
        after = manifest(str(mountpoint))
        status = m2.status()
    assert not diff(before, after), "\n".join(diff(before, after))
    if "clean_last_time" in status:
        assert status["clean_last_time"] is False, "a killed daemon must not leave the pool marked clean"


@pytest.mark.pool(size="512M")
def test_many_mount_cycles_keep_a_growing_tree(pool, mountpoint):
    expected: dict = {}
    for cycle in range(6):
        with helpers.mounted_pool(pool, mountpoint):
            got = manifest(str(mountpoint))
            assert not diff(expected, got), f"cycle {cycle}:\n" + "\n".join(diff(expected, got))
            sub = os.path.join(str(mountpoint), f"cycle{cycle}")
            os.mkdir(sub)
            build_tree(sub, seed=cycle)
            if cycle >= 2:  # churn: delete an older cycle, rewrite files of another
                old = os.path.join(str(mountpoint), f"cycle{cycle - 2}")
                for dirpath, dirs, files in os.walk(old, topdown=False):
                    for n in files:
                        os.unlink(os.path.join(dirpath, n))
                    for n in dirs:
                        os.rmdir(os.path.join(dirpath, n))
                os.rmdir(old)
                for i in (0, 1, 2, 3, 4, 5, 8, 9):  # f6 and f7 were renamed away
                    write(os.path.join(str(mountpoint), f"cycle{cycle - 1}", "data", f"f{i}"),
                          pattern(20_000, cycle * 10 + i), flags=os.O_WRONLY | os.O_TRUNC)
            expected = manifest(str(mountpoint))
        helpers.assert_fsck_clean(pool, f"after mount cycle {cycle}")


def test_fsck_repair_of_a_clean_pool_changes_nothing(pool, mountpoint):
    with helpers.mounted_pool(pool, mountpoint):
        build_tree(str(mountpoint), seed=2)
        before = manifest(str(mountpoint))
    cp = helpers.fsck(pool, "--repair")
    assert cp.returncode == 0, helpers.describe(cp, "fsck --repair of a clean pool")
    with helpers.mounted_pool(pool, mountpoint):
        after = manifest(str(mountpoint))
    assert not diff(before, after), "\n".join(diff(before, after))


def remount_through_the_helper(terrace_bin: str, pool: str, mnt: str, how: str) -> None:
    """What `mount -o remount,ro|rw MNT` runs for a fuse.terrace mount:
    mount.fuse3 execs `terrace POOL MNT -o remount,…` (the helper form), which
    changes the mount in place with `mount -i` (no second daemon)."""
    import subprocess
    cp = subprocess.run([terrace_bin, pool, mnt, "-o", f"rw,remount,{how}"],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, helpers.describe(cp, f"the helper's remount,{how}")
    ro = any(line.split()[4] == mnt and "ro" in line.split()[5].split(",")
             for line in open("/proc/self/mountinfo"))
    assert ro == (how == "ro"), f"the mount is not {how} after the helper's remount"


def test_a_read_only_remount_leaves_a_clean_pool_image_and_read_write_resumes(terrace_bin, pool_path, mountpoint):
    """`mount -o remount,ro`: FUSE does not tell the daemon, which watches the
    mount table and freezes the pool (design.md 5l): cached data written
    back, the pool marked clean, nothing written while read-only. A copy of
    the pool's images taken then passes fsck and holds every file (a backup
    of a live pool); `remount,rw` resumes writes, and the pool unmounts
    clean."""
    import shutil
    import subprocess
    with helpers.temp_ssd_image() as ssd, helpers.temp_pool_path("backup") as backup_pm, \
            helpers.temp_ssd_image("backup-ssd") as backup_ssd:
        helpers.terrace("mkfs", "--tier", f"pm:{pool_path}:128M", "--tier", f"ssd:{ssd}:512M")
        # Writes go to the SSD through the DRAM cache and stay there unsynced.
        with helpers.mounted_pool(pool_path, mountpoint, "placement_policy=block-first") as m:
            root = str(m.path)
            sums = {}
            for i in range(6):
                data = pattern(300_000 + i, i)
                write(os.path.join(root, f"f{i}"), data)
                sums[f"f{i}"] = hashlib.sha256(data).hexdigest()
            assert m.status()["cache"]["dirty_bytes"] > 0, "nothing cached: the test would not test write-back"
            # mount(8) runs the helper for a remount too (mount.fuse3, which
            # looks for `terrace` in its PATH): the built binary as the
            # helper, /sbin/mount.fuse.terrace or not.
            remount_through_the_helper(terrace_bin, pool_path, root, "ro")
            assert helpers.wait_until(lambda: m.status()["frozen"], 10), "the daemon did not freeze the pool"
            assert m.status()["cache"]["dirty_bytes"] == 0
            with pytest.raises(OSError) as e:
                write(os.path.join(root, "new"), b"x")
            assert e.value.errno == errno.EROFS
            # Reads keep working; the images do not change while read-only.
            before = (hashlib.sha256(open(pool_path, "rb").read()).hexdigest(),
                      hashlib.sha256(open(ssd, "rb").read()).hexdigest())
            for name, want in sums.items():
                with open(os.path.join(root, name), "rb") as f:
                    assert hashlib.sha256(f.read()).hexdigest() == want
            time.sleep(1.5)
            after = (hashlib.sha256(open(pool_path, "rb").read()).hexdigest(),
                     hashlib.sha256(open(ssd, "rb").read()).hexdigest())
            assert before == after, "the pool's images changed while it was mounted read-only"
            # Settings are refused as on a mount made read-only.
            cp = helpers.terrace("set", root, "migration_threshold", "20", check=False)
            helpers.assert_clean_error(cp, mentions=["read-only mount", "remount,rw"])
            # A backup of the frozen images is a clean pool with every file.
            shutil.copyfile(pool_path, backup_pm)
            shutil.copyfile(ssd, backup_ssd)
            # (fsck finds the SSD tier at its mkfs path: the frozen live one,
            # equal to the copy.)
            cp = helpers.fsck(backup_pm)
            assert cp.returncode == 0, helpers.describe(cp, "fsck of the frozen images")
            remount_through_the_helper(terrace_bin, pool_path, root, "rw")
            assert helpers.wait_until(lambda: not m.status()["frozen"], 10), "the daemon did not thaw"
            write(os.path.join(root, "new"), b"after the thaw")
        helpers.assert_fsck_clean(pool_path, "after remount ro, rw and unmount")
        with helpers.mounted_pool(pool_path, mountpoint) as m:
            for name, want in sums.items():
                with open(os.path.join(m.path, name), "rb") as f:
                    assert hashlib.sha256(f.read()).hexdigest() == want
            with open(os.path.join(m.path, "new"), "rb") as f:
                assert f.read() == b"after the thaw"


def test_a_file_created_for_reading_and_writing_keeps_its_birth_as_access_time(pool, mountpoint):
    """ext4: atime == mtime == birth after `open(O_CREAT|O_RDWR)`. The
    create's open once took the access time (relatime found it due), after
    the kernel had the attributes from before: stat and a remount differed."""
    with helpers.mounted_pool(pool, mountpoint) as m:
        p = m.path / "f"
        os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644))
        before = os.stat(p)
        assert before.st_atime_ns == before.st_mtime_ns
    with helpers.mounted_pool(pool, mountpoint) as m:
        after = os.stat(m.path / "f")
        assert (after.st_atime_ns, after.st_mtime_ns) == (before.st_atime_ns, before.st_mtime_ns)
