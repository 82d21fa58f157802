"""O_TMPFILE on a Terrace mount (FUSE_TMPFILE, through the vendored fuser's
patch; docs/design.md "Unnamed files (O_TMPFILE)").

open(dir, O_TMPFILE | O_RDWR) gives an unnamed file: it is written and read
like any file, linkat() through /proc/self/fd or with AT_EMPTY_PATH names it
(not after O_EXCL), its space comes back when it is closed unnamed, and a
daemon killed while it is open leaves nothing behind once the pool is
remounted. Results are compared with the same calls on a native directory
(ext4 under /tmp).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import stat
import tempfile

import helpers

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_libc.linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000


def link_fd(fd: int, path: str) -> None:
    """Names the file open as `fd` `path` through /proc/self/fd. (os.link(src,
    dst) alone calls link(2), which does not follow the magic link and fails
    with EXDEV; with a directory fd it calls linkat(AT_SYMLINK_FOLLOW).)"""
    dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f"/proc/self/fd/{fd}", os.path.basename(path), dst_dir_fd=dfd)
    finally:
        os.close(dfd)


def link_empty_path(fd: int, path: str) -> None:
    """linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) (needs CAP_DAC_READ_SEARCH: root)."""
    if _libc.linkat(fd, b"", AT_FDCWD, os.fsencode(path), AT_EMPTY_PATH) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


def attempt(fn, *args):
    """fn's result, or the errno name of its OSError."""
    try:
        return fn(*args)
    except OSError as e:
        return errno.errorcode.get(e.errno, e.errno)


def tmpfile_story(root: str) -> list:
    """O_TMPFILE calls in directory `root`; what any Linux file system with
    O_TMPFILE must answer (comparable across file systems)."""
    out = []
    os.mkdir(os.path.join(root, "d"), 0o755)
    d = os.path.join(root, "d")
    fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o640)
    try:
        data = bytes(range(256)) * 1000
        os.write(fd, data)
        st = os.fstat(fd)
        out.append(("unnamed", st.st_nlink, stat.S_IFMT(st.st_mode) == stat.S_IFREG,
                    st.st_mode & 0o7777, st.st_size, sorted(os.listdir(d))))
        out.append(("read", os.pread(fd, 300, 1000) == data[1000:1300]))
        os.ftruncate(fd, 5000)
        os.fchmod(fd, 0o600)
        link_fd(fd, os.path.join(d, "named"))
        st = os.fstat(fd)
        out.append(("linked", st.st_nlink, st.st_mode & 0o7777, st.st_size, sorted(os.listdir(d))))
        # Named once, it is a file like any other: more names, unlink.
        out.append(("again", attempt(link_fd, fd, os.path.join(root, "again"))))
        out.append(("nlink", os.fstat(fd).st_nlink))
        os.unlink(os.path.join(root, "again"))
        # Named and unnamed again while open: no name comes back.
        os.unlink(os.path.join(d, "named"))
        out.append(("relink after unlink", attempt(link_fd, fd, os.path.join(d, "back"))))
    finally:
        os.close(fd)
    # AT_EMPTY_PATH, and an unnamed file in the root.
    fd = os.open(root, os.O_TMPFILE | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"empty path")
        out.append(("at_empty_path", attempt(link_empty_path, fd, os.path.join(d, "e"))))
    finally:
        os.close(fd)
    with open(os.path.join(d, "e"), "rb") as f:
        out.append(("content", f.read()))
    # O_EXCL: never linkable (the kernel refuses).
    fd = os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"private")
        out.append(("excl", attempt(link_fd, fd, os.path.join(d, "x")),
                    attempt(link_empty_path, fd, os.path.join(d, "y"))))
    finally:
        os.close(fd)
    # A set-group-ID directory gives its group (as create does).
    sg = os.path.join(root, "sg")
    os.mkdir(sg)
    os.chown(sg, 0, 4321)
    os.chmod(sg, 0o2775)
    fd = os.open(sg, os.O_TMPFILE | os.O_RDWR, 0o644)
    try:
        out.append(("setgid", os.fstat(fd).st_gid))
    finally:
        os.close(fd)
    # Errors: not a directory, no write access mode, missing directory.
    with open(os.path.join(root, "plain"), "w"):
        pass
    out.append(("errors",
                attempt(os.open, os.path.join(root, "plain"), os.O_TMPFILE | os.O_RDWR, 0o600),
                attempt(os.open, d, os.O_TMPFILE | os.O_RDONLY, 0o600),
                attempt(os.open, os.path.join(root, "missing"), os.O_TMPFILE | os.O_RDWR, 0o600)))
    out.append(("final", sorted(os.listdir(d)), sorted(os.listdir(root))))
    return out


EXPECTED = [
    ("unnamed", 0, True, 0o640, 256000, []),
    ("read", True),
    ("linked", 1, 0o600, 5000, ["named"]),
    ("again", None),
    ("nlink", 2),
    ("relink after unlink", "ENOENT"),
    ("at_empty_path", None),
    ("content", b"empty path"),
    ("excl", "ENOENT", "ENOENT"),
    ("setgid", 4321),
    ("errors", "ENOTDIR", "EINVAL", "ENOENT"),
    ("final", ["e"], ["d", "plain", "sg"]),
]


def test_o_tmpfile_write_and_link_behave_as_on_a_native_directory(mounted):
    old = os.umask(0o022)
    native = tempfile.mkdtemp(prefix=helpers.unique_name("tmpfile-native") + "-", dir="/tmp")
    try:
        want = tmpfile_story(native)
        root = os.path.join(mounted, "t")
        os.mkdir(root)
        got = tmpfile_story(root)
    finally:
        os.umask(old)
        shutil.rmtree(native, ignore_errors=True)
    assert want == EXPECTED, f"the native reference differs from what the test expects: {want}"
    assert got == want


def _free(mnt) -> tuple[int, int]:
    st = os.statvfs(mnt)
    return st.f_bfree, st.f_ffree


def test_space_of_an_unnamed_file_returns_when_it_is_closed(mounted):
    before = _free(mounted)
    fd = os.open(mounted, os.O_TMPFILE | os.O_RDWR, 0o600)
    try:
        chunk = b"\xa5" * (1 << 20)
        for _ in range(32):
            os.write(fd, chunk)
        os.fsync(fd)
        during = _free(mounted)
        assert during[0] <= before[0] - (32 << 20) // os.statvfs(mounted).f_frsize
        assert during[1] == before[1] - 1
    finally:
        os.close(fd)
    # The kernel sends RELEASE after close() returned.
    assert helpers.wait_until(lambda: _free(mounted) == before, 10), (before, _free(mounted))


def _fsck_json(pool) -> dict:
    cp = helpers.fsck(pool, "--json")
    assert cp.returncode == 0, helpers.describe(cp, "fsck")
    return json.loads(cp.stdout)


def test_kill_with_unnamed_files_open_leaks_nothing_after_remount(terrace_bin, pool, mountpoint):
    """kill -9 of the daemon while an unnamed file (16 MiB) is open and a
    linked one too: fsck is clean and lists the unnamed one as an orphan; the
    next mount frees it; afterwards the pool holds exactly the linked file."""
    with helpers.mounted_pool(pool, mountpoint):
        os.mkdir(os.path.join(mountpoint, "d"))
    base = _fsck_json(pool)
    m = helpers.mount(pool, mountpoint)
    fds = []
    try:
        d = os.path.join(mountpoint, "d")
        unnamed = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
        fds.append(unnamed)
        chunk = b"\x3c" * (1 << 20)
        for _ in range(16):
            os.write(unnamed, chunk)
        kept = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o644)
        fds.append(kept)
        os.write(kept, b"kept after the crash")
        link_fd(kept, os.path.join(d, "kept"))
        m.kill()
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        helpers.lazy_unmount(mountpoint)
    crashed = _fsck_json(pool)
    assert crashed["clean"] and not crashed["clean_unmount"], crashed
    assert len(crashed["orphans"]) == 1, crashed
    with helpers.mounted_pool(pool, mountpoint):
        with open(os.path.join(mountpoint, "d", "kept"), "rb") as f:
            assert f.read() == b"kept after the crash"
        assert os.listdir(os.path.join(mountpoint, "d")) == ["kept"]
    after = _fsck_json(pool)
    assert after["clean"] and after["clean_unmount"] and after["orphans"] == [], after
    assert after["inodes"] == base["inodes"] + 1, (base, after)
    # The kept file's block and the directory's log growth at most; the
    # unnamed file's 4,096 blocks are free again.
    assert base["free_blocks"] - after["free_blocks"] <= 4, (base, after)
