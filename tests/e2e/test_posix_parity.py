"""POSIX parity: the same operations on the Terrace mount and on a plain ext4
directory (the native reference, under /tmp) must give the same results and the
same errno.

Each test calls `both(fn)`: fn(root) runs once with root = a fresh directory on
the Terrace mount and once with root = a fresh directory on the reference file
system; return values (or the errno of an OSError) must be equal. fn returns
only what is comparable across file systems (contents, sizes, modes, link
counts, booleans about timestamps), never inode numbers or block counts.
`expect=` additionally pins the outcome, so a test cannot pass because both
file systems are wrong in the same way.

The Terrace mount is shared by the module (mounted with
allow_other,default_permissions, as a user would) and remounted automatically if
a test kills the daemon, so one crash fails one test, not the rest.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import mmap
import os
import pickle
import random
import re
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

import helpers

# ---------------------------------------------------------------------------
# libc calls Python's os module does not expose
# ---------------------------------------------------------------------------

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Timespec), ctypes.c_int]

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
XATTR_CREATE = getattr(os, "XATTR_CREATE", 1)
XATTR_REPLACE = getattr(os, "XATTR_REPLACE", 2)

GiB = 1 << 30
MiB = 1 << 20
NOBODY = 65534


def _check(ret: int, *paths) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), *[os.fspath(p) for p in paths[:1]])


def renameat2(old, new, flags: int) -> None:
    """renameat2(2) with RENAME_NOREPLACE / RENAME_EXCHANGE."""
    _check(_libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags), old)


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    """fallocate(2) with an explicit mode (os.posix_fallocate only does mode 0)."""
    _check(_libc.fallocate(fd, mode, offset, length))


def utimensat(path, atime: tuple[int, int], mtime: tuple[int, int]) -> None:
    """utimensat(2) with (sec, nsec) pairs; nsec may be UTIME_NOW or UTIME_OMIT."""
    times = (_Timespec * 2)(_Timespec(*atime), _Timespec(*mtime))
    _check(_libc.utimensat(AT_FDCWD, os.fsencode(path), times, 0), path)


# ---------------------------------------------------------------------------
# Small file helpers (every fd is closed, even on failure)
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def opened(path, flags=os.O_RDONLY, mode=0o644, dir_fd=None):
    """os.open as a context manager."""
    fd = os.open(path, flags, mode, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def write_file(path, data: bytes, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o644) -> None:
    """Write all of `data` to `path` (created/truncated by default)."""
    with opened(path, flags, mode) as fd:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]


def read_file(path) -> bytes:
    """Read the whole file with read(2)."""
    with opened(path) as fd:
        return read_fd(fd)


def read_fd(fd: int) -> bytes:
    """Read from fd until EOF."""
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def pread_all(fd: int, length: int, offset: int) -> bytes:
    """pread until `length` bytes or EOF."""
    out = bytearray()
    while len(out) < length:
        b = os.pread(fd, length - len(out), offset + len(out))
        if not b:
            break
        out += b
    return bytes(out)


def pattern(n: int, seed: int = 0) -> bytes:
    """n deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(n)


def digest(b: bytes) -> str:
    """Short hash, so assertion messages stay readable."""
    return hashlib.sha256(b).hexdigest()[:16]


def kind(st: os.stat_result) -> str:
    """File type of a stat result as a word."""
    for name in ("REG", "DIR", "LNK", "FIFO", "SOCK", "CHR", "BLK"):
        if getattr(stat, "S_IS" + name)(st.st_mode):
            return name
    return "?"


def summary(path, follow: bool = True, with_size: bool = True) -> tuple:
    """The comparable part of a stat(): type, permission bits, links, size, owner, rdev.
    Directory sizes are left out (they are file-system specific)."""
    st = os.stat(path) if follow else os.lstat(path)
    size = st.st_size if with_size and not stat.S_ISDIR(st.st_mode) else None
    return (kind(st), oct(stat.S_IMODE(st.st_mode)), st.st_nlink, size, st.st_uid, st.st_gid,
            (os.major(st.st_rdev), os.minor(st.st_rdev)) if kind(st) in ("CHR", "BLK") else None)


def run_as(uid: int, gid: int, fn, *args, groups: tuple = ()):
    """Run fn(*args) in a forked child with the given uid/gid (and supplementary
    `groups`, none by default); return its value or re-raise its OSError (with
    the same errno)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            os.close(r)
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            try:
                res = ("ok", fn(*args))
            except OSError as e:
                res = ("err", e.errno, str(e))
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                res = ("exc", f"{type(e).__name__}: {e}")
            os.write(w, pickle.dumps(res))
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    res = pickle.loads(data)
    if res[0] == "ok":
        return res[1]
    if res[0] == "err":
        raise OSError(res[1], res[2])
    raise AssertionError(f"run_as child failed: {res[1]}")


# ---------------------------------------------------------------------------
# Fixtures: the shared Terrace mount, the reference directory, both()
# ---------------------------------------------------------------------------

PARITY_POOL_SIZE = "1G"
PARITY_INODES = 160_000  # the readdir test creates 100,000 files
PARITY_OPTIONS = "allow_other,default_permissions"


class ParityFS:
    """The module's Terrace mount; remounts when an earlier test killed the daemon."""

    def __init__(self, pool: Path, mnt: Path):
        self.pool, self.mnt = pool, mnt
        self.mount: helpers.Mount | None = None
        self.crashes = 0

    def start(self) -> None:
        self.mount = helpers.mount(self.pool, self.mnt, PARITY_OPTIONS)
        os.chmod(self.mnt, 0o755)

    def ensure_alive(self) -> None:
        """Remount if the daemon died; the caller's test still runs on a fresh mount."""
        if self.mount is not None and self.mount.alive():
            return
        self.crashes += 1
        if self.mount is not None:
            helpers.unmount(self.mount)
        self.start()

    def stop(self) -> None:
        if self.mount is not None:
            helpers.unmount(self.mount)
            self.mount = None


class ExistingDirFS(ParityFS):
    """TERRACE_PARITY_ROOT=DIR: run the suite against an already mounted directory
    (a Terrace mount started by hand, or any other file system) instead of a fresh pool."""

    def __init__(self, root: Path):
        super().__init__(Path("/nonexistent"), root)

    def start(self) -> None:
        pass

    def ensure_alive(self) -> None:
        os.stat(self.mnt)

    def stop(self) -> None:
        pass


@pytest.fixture(scope="module")
def parity_fs():
    """A Terrace pool mounted for the whole module; always unmounted at the end."""
    override = os.environ.get("TERRACE_PARITY_ROOT")
    if override:
        base = Path(tempfile.mkdtemp(prefix=helpers.unique_name("parity") + "-", dir=override))
        os.chmod(base, 0o755)
        yield ExistingDirFS(base)
        shutil.rmtree(base, ignore_errors=True)
        return
    if not helpers.TERRACE_BIN.exists():
        pytest.fail(f"the terrace binary is missing: {helpers.TERRACE_BIN} (run cargo build --release)",
                    pytrace=False)
    with helpers.temp_pool_path("parity") as pool, helpers.temp_mountpoint("parity") as mnt:
        helpers.mkfs(pool, PARITY_POOL_SIZE, inodes=PARITY_INODES)
        fs = ParityFS(pool, mnt)
        try:
            fs.start()
            yield fs
        finally:
            fs.stop()


@pytest.fixture(scope="module")
def reference_base():
    """A directory on the native file system (/tmp, ext4 here), world-traversable."""
    base = Path(tempfile.mkdtemp(prefix=helpers.unique_name("ref") + "-", dir=helpers.MOUNT_PARENT))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@dataclass
class Roots:
    """The two directories a test works in."""

    terrace: str
    reference: str


@pytest.fixture
def roots(request, parity_fs, reference_base):
    """Fresh, identically named per-test directories on Terrace and on the reference."""
    parity_fs.ensure_alive()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:80] + "-" + uuid.uuid4().hex[:6]
    t = os.path.join(parity_fs.mnt, name)
    r = os.path.join(reference_base, name)
    for d in (t, r):
        os.mkdir(d)
        os.chmod(d, 0o755)
    yield Roots(t, r)
    shutil.rmtree(r, ignore_errors=True)
    if parity_fs.mount is not None and parity_fs.mount.alive():
        shutil.rmtree(t, ignore_errors=True)


OK = "ok"


def outcome(fn, root: str):
    """("ok", value) or ("errno", NAME) or ("exception", TYPE: message)."""
    try:
        return (OK, fn(root))
    except OSError as e:
        return ("errno", errno.errorcode.get(e.errno, str(e.errno)))
    except Exception as e:  # noqa: BLE001 - compared, not swallowed
        return ("exception", type(e).__name__)


@pytest.fixture
def both(roots):
    """both(fn, expect=None): run fn(root) on Terrace and on the reference and compare.

    Returns fn's value on Terrace (when it succeeded). `expect` may be OK (must
    succeed), an errno number (must fail with it) or a tuple of errnos.
    """

    def _both(fn, expect=None):
        ref = outcome(fn, roots.reference)
        ter = outcome(fn, roots.terrace)
        what = getattr(fn, "__name__", "fn")
        assert ter == ref, f"{what}: Terrace gave {ter!r}, the reference file system gave {ref!r}"
        if expect is OK:
            assert ref[0] == OK, f"{what}: expected success, both gave {ref!r}"
        elif expect is not None:
            wanted = {errno.errorcode[e] for e in (expect if isinstance(expect, tuple) else (expect,))}
            assert ref[0] == "errno" and ref[1] in wanted, f"{what}: expected {wanted}, both gave {ref!r}"
        return ter[1] if ter[0] == OK else ter[1]

    _both.roots = roots
    return _both


def j(*parts) -> str:
    return os.path.join(*parts)


# ---------------------------------------------------------------------------
# the suite really compares Terrace with a native file system
# ---------------------------------------------------------------------------


def test_the_two_roots_are_a_terrace_fuse_mount_and_a_native_directory(parity_fs, roots):
    fstypes = dict(helpers.mounts())
    native = helpers.run(["findmnt", "-no", "FSTYPE", "-T", roots.reference]).stdout.strip()
    assert not native.startswith("fuse"), f"the reference {roots.reference} is on {native}"
    if isinstance(parity_fs, ExistingDirFS):
        return
    assert fstypes.get(str(parity_fs.mnt), "").startswith("fuse"), \
        f"{parity_fs.mnt} is not a FUSE mount: {fstypes.get(str(parity_fs.mnt))}"
    assert os.stat(roots.terrace).st_dev != os.stat(roots.reference).st_dev


# ---------------------------------------------------------------------------
# open / create
# ---------------------------------------------------------------------------


def test_create_exclusive_fails_with_eexist_when_name_exists(both):
    def create(root):
        with opened(j(root, "f"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640):
            pass
        return summary(j(root, "f"))

    both(create, expect=OK)
    both(create, expect=errno.EEXIST)
    both(lambda root: os.mkdir(j(root, "d")), expect=OK)
    both(lambda root: os.close(os.open(j(root, "d"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)),
         expect=errno.EEXIST)
    both(lambda root: os.symlink("missing-target", j(root, "dangling")), expect=OK)
    both(lambda root: os.close(os.open(j(root, "dangling"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)),
         expect=errno.EEXIST)


def test_open_reports_enoent_enotdir_eisdir_like_native(both):
    both(lambda root: write_file(j(root, "f"), b"x"), expect=OK)
    both(lambda root: os.mkdir(j(root, "d")), expect=OK)
    both(lambda root: os.open(j(root, "missing"), os.O_RDONLY), expect=errno.ENOENT)
    both(lambda root: os.open(j(root, "missing", "child"), os.O_CREAT | os.O_WRONLY), expect=errno.ENOENT)
    both(lambda root: os.open(j(root, "f", "child"), os.O_RDONLY), expect=errno.ENOTDIR)
    both(lambda root: os.open(j(root, "f"), os.O_RDONLY | os.O_DIRECTORY), expect=errno.ENOTDIR)
    both(lambda root: os.open(j(root, "d"), os.O_WRONLY), expect=errno.EISDIR)
    both(lambda root: os.open(j(root, "d"), os.O_RDWR | os.O_CREAT), expect=errno.EISDIR)
    both(lambda root: os.open(j(root, "new") + "/", os.O_CREAT | os.O_WRONLY), expect=errno.EISDIR)


def test_create_applies_mode_and_umask(both):
    def create(root):
        old = os.umask(0o027)
        try:
            with opened(j(root, "f"), os.O_CREAT | os.O_WRONLY, 0o777):
                pass
            os.mkdir(j(root, "d"), 0o777)
        finally:
            os.umask(old)
        return summary(j(root, "f")), summary(j(root, "d"))

    both(create, expect=OK)


def test_o_trunc_empties_existing_file(both):
    def trunc(root):
        write_file(j(root, "f"), pattern(10_000))
        with opened(j(root, "f"), os.O_WRONLY | os.O_TRUNC) as fd:
            size_after_open = os.fstat(fd).st_size
            os.write(fd, b"new")
        return size_after_open, read_file(j(root, "f"))

    assert both(trunc, expect=OK) == (0, b"new")


def test_o_append_writes_always_land_at_end_of_file(both):
    def append(root):
        p = j(root, "f")
        write_file(p, b"abc")
        with opened(p, os.O_WRONLY | os.O_APPEND) as fd:
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, b"123")
            os.pwrite(fd, b"XY", 0)  # Linux: pwrite on O_APPEND appends too
            pos = os.lseek(fd, 0, os.SEEK_CUR)
        with opened(p, os.O_RDWR | os.O_APPEND) as fd:
            os.write(fd, pattern(5000, 1))
        data = read_file(p)
        return pos, len(data), data[:10], digest(data)

    assert both(append, expect=OK)[2] == b"abc123XY" + pattern(5000, 1)[:2]


@pytest.mark.parametrize("flag", ["O_SYNC", "O_DSYNC"])
def test_synchronous_writes_read_back(both, flag):
    def sync_write(root):
        p = j(root, "f")
        with opened(p, os.O_CREAT | os.O_WRONLY | getattr(os, flag)) as fd:
            for i in range(20):
                os.write(fd, pattern(777, i))
            os.pwrite(fd, b"head", 0)
        return digest(read_file(p)), os.stat(p).st_size

    both(sync_write, expect=OK)


def test_read_or_write_on_wrong_access_mode_fails_ebadf(both):
    both(lambda root: write_file(j(root, "f"), b"data"), expect=OK)

    def write_ro(root):
        with opened(j(root, "f"), os.O_RDONLY) as fd:
            os.write(fd, b"x")

    def read_wo(root):
        with opened(j(root, "f"), os.O_WRONLY) as fd:
            os.read(fd, 1)

    both(write_ro, expect=errno.EBADF)
    both(read_wo, expect=errno.EBADF)


def test_read_of_a_directory_fails_eisdir(both):
    def read_dir(root):
        with opened(root, os.O_RDONLY | os.O_DIRECTORY) as fd:
            os.read(fd, 10)

    both(read_dir, expect=errno.EISDIR)


# ---------------------------------------------------------------------------
# read / write / pread / pwrite, sparse and large files
# ---------------------------------------------------------------------------

_OFFSETS = [0, 1, 511, 512, 4095, 4096, 4097, 8191, 65535, 65536, 1 << 20, (1 << 20) + 3, 3_000_001]


def test_pread_pwrite_at_various_offsets_match_native(both):
    def workload(root):
        p = j(root, "f")
        rng = random.Random(1234)
        results = []
        with opened(p, os.O_CREAT | os.O_RDWR) as fd:
            for i, off in enumerate(_OFFSETS):
                n = os.pwrite(fd, pattern(rng.choice([1, 100, 4096, 5000, 70_000]), i), off)
                results.append(n)
            for i in range(200):
                off = rng.randrange(0, 4 << 20)
                os.pwrite(fd, pattern(rng.randrange(1, 20_000), 1000 + i), off)
            for off in _OFFSETS + [rng.randrange(0, 5 << 20) for _ in range(50)]:
                results.append(digest(pread_all(fd, rng.randrange(1, 100_000), off)))
            results.append(os.fstat(fd).st_size)
        results.append(digest(read_file(p)))
        return results

    both(workload, expect=OK)


def test_read_at_and_past_eof_returns_short_or_empty(both):
    def past_eof(root):
        p = j(root, "f")
        write_file(p, pattern(10_000))
        with opened(p) as fd:
            return (len(os.pread(fd, 100, 9_950)), len(os.pread(fd, 100, 10_000)),
                    len(os.pread(fd, 100, 1 << 40)))

    assert both(past_eof, expect=OK) == (50, 0, 0)


def test_large_unaligned_single_write_round_trips(both):
    def big(root):
        p = j(root, "f")
        data = pattern(3 * MiB + 123, 7)
        with opened(p, os.O_CREAT | os.O_WRONLY) as fd:
            written = os.pwrite(fd, data, 1000)
        back = read_file(p)
        return written, len(back), back[:1000] == bytes(1000), back[1000:] == data

    assert both(big, expect=OK) == (3 * MiB + 123, 3 * MiB + 1123, True, True)


def test_sparse_file_holes_read_as_zeros(both):
    def sparse(root):
        p = j(root, "f")
        with opened(p, os.O_CREAT | os.O_RDWR) as fd:
            os.pwrite(fd, b"A" * 100, MiB)
            os.pwrite(fd, b"B" * 100, 10 * MiB + 5)
            return (os.fstat(fd).st_size,
                    pread_all(fd, MiB, 0) == bytes(MiB),
                    pread_all(fd, 200, MiB - 50) == bytes(50) + b"A" * 100 + bytes(50),
                    pread_all(fd, 9 * MiB, MiB + 100) == bytes(9 * MiB - 100 + 5) + b"B" * 95)

    assert both(sparse, expect=OK) == (10 * MiB + 105, True, True, True)


def test_file_larger_than_4gib_keeps_offsets_and_holes(both):
    def huge(root):
        p = j(root, "f")
        with opened(p, os.O_CREAT | os.O_RDWR) as fd:
            os.pwrite(fd, b"head", 0)
            os.pwrite(fd, b"[across-4GiB]", 4 * GiB - 6)
            os.pwrite(fd, b"tail-at-5GiB", 5 * GiB)
            size = os.fstat(fd).st_size
            end = os.lseek(fd, 0, os.SEEK_END)
            hole = pread_all(fd, 8192, 5 * GiB - 8192)
            mid = pread_all(fd, 4096, 4 * GiB + 4096)
            across = pread_all(fd, 13, 4 * GiB - 6)
            tail = pread_all(fd, 100, 5 * GiB)
        return (size, end, hole == bytes(8192), mid == bytes(4096), across, tail,
                os.stat(p).st_size)

    assert both(huge, expect=OK) == (5 * GiB + 12, 5 * GiB + 12, True, True, b"[across-4GiB]",
                                     b"tail-at-5GiB", 5 * GiB + 12)


# ---------------------------------------------------------------------------
# truncate / ftruncate / fallocate
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("use_fd", [False, True], ids=["truncate", "ftruncate"])
def test_truncate_shrink_then_grow_reads_zeros_in_regrown_part(both, use_fd):
    def shrink_grow(root):
        p = j(root, "f")
        data = pattern(20_000, 3)
        write_file(p, data)
        steps = []
        for size in (5_000, 12_000, 4096, 8192, 0, 3, 20_000):
            if use_fd:
                with opened(p, os.O_WRONLY) as fd:
                    os.ftruncate(fd, size)
            else:
                os.truncate(p, size)
            steps.append((os.stat(p).st_size, digest(read_file(p))))
        final = read_file(p)
        return steps, final == bytes(20_000)

    steps, all_zero = both(shrink_grow, expect=OK)
    assert all_zero, "after truncating to 0 and regrowing, the file must read as zeros"


def test_truncate_keeps_prefix_and_zero_fills_partial_page(both):
    def partial(root):
        p = j(root, "f")
        write_file(p, b"\xff" * 10_000)
        os.truncate(p, 5_000)
        os.truncate(p, 9_000)
        d = read_file(p)
        return d[:5_000] == b"\xff" * 5_000, d[5_000:] == bytes(4_000), len(d)

    assert both(partial, expect=OK) == (True, True, 9_000)


def test_truncate_errors_match_native(both):
    both(lambda root: os.mkdir(j(root, "d")), expect=OK)
    both(lambda root: write_file(j(root, "f"), b"x"), expect=OK)
    both(lambda root: os.truncate(j(root, "missing"), 0), expect=errno.ENOENT)
    both(lambda root: os.truncate(j(root, "d"), 0), expect=errno.EISDIR)
    both(lambda root: os.truncate(j(root, "f"), -1), expect=errno.EINVAL)

    def ftruncate_readonly(root):
        with opened(j(root, "f"), os.O_RDONLY) as fd:
            os.ftruncate(fd, 0)

    both(ftruncate_readonly, expect=(errno.EINVAL, errno.EBADF))


def test_fallocate_mode0_extends_size_with_zeros_and_keeps_data(both):
    def alloc(root):
        p = j(root, "f")
        out = []
        with opened(p, os.O_CREAT | os.O_RDWR) as fd:
            fallocate(fd, 0, 0, MiB)
            out.append((os.fstat(fd).st_size, pread_all(fd, MiB, 0) == bytes(MiB)))
            os.pwrite(fd, b"data", 100)
            fallocate(fd, 0, 0, 8192)  # inside the file: no change
            out.append((os.fstat(fd).st_size, pread_all(fd, 4, 100)))
            os.posix_fallocate(fd, 0, 3 * MiB + 5)
            out.append((os.fstat(fd).st_size, pread_all(fd, 10, 3 * MiB - 5) == bytes(10)))
        return out

    assert both(alloc, expect=OK) == [(MiB, True), (MiB, b"data"), (3 * MiB + 5, True)]


def test_punch_hole_keep_size_zeroes_range_and_keeps_size(both):
    def punch(root):
        p = j(root, "f")
        data = pattern(64 * 1024, 9)
        write_file(p, data)
        with opened(p, os.O_RDWR) as fd:
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 8192)  # whole pages
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 50)  # inside a page
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 20_000, 10_000)  # unaligned span
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 60_000, 1 << 20)  # past EOF
            size = os.fstat(fd).st_size
        got = read_file(p)
        want = bytearray(data)
        for off, n in ((4096, 8192), (100, 50), (20_000, 10_000), (60_000, 64 * 1024 - 60_000)):
            want[off:off + n] = bytes(n)
        return size, got == bytes(want)

    assert both(punch, expect=OK) == (64 * 1024, True)


def test_punch_hole_without_keep_size_is_rejected(both):
    def punch(root):
        with opened(j(root, "f"), os.O_CREAT | os.O_RDWR) as fd:
            os.write(fd, b"x" * 10_000)
            fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 4096)

    both(punch, expect=errno.EOPNOTSUPP)


# ---------------------------------------------------------------------------
# unlink / mkdir / rmdir
# ---------------------------------------------------------------------------


def test_unlink_removes_the_name_and_reports_errors(both):
    both(lambda root: write_file(j(root, "f"), b"x"), expect=OK)
    both(lambda root: os.mkdir(j(root, "d")), expect=OK)
    both(lambda root: (os.unlink(j(root, "f")), os.path.lexists(j(root, "f")), os.listdir(root)),
         expect=OK)
    both(lambda root: os.unlink(j(root, "f")), expect=errno.ENOENT)
    both(lambda root: os.unlink(j(root, "d")), expect=errno.EISDIR)
    both(lambda root: os.unlink(j(root, "d", "x", "y")), expect=errno.ENOENT)
    both(lambda root: write_file(j(root, "g"), b"x"), expect=OK)
    both(lambda root: os.unlink(j(root, "g", "x")), expect=errno.ENOTDIR)


def test_unlinked_open_file_stays_usable_until_closed(both):
    def orphan(root):
        p = j(root, "f")
        with opened(p, os.O_CREAT | os.O_RDWR) as fd:
            os.write(fd, pattern(50_000, 4))
            os.unlink(p)
            listed = os.listdir(root)
            nlink = os.fstat(fd).st_nlink
            os.pwrite(fd, b"more", 50_000)
            data = pread_all(fd, 60_000, 0)
        return listed, nlink, data == pattern(50_000, 4) + b"more", os.path.lexists(p)

    assert both(orphan, expect=OK) == ([], 0, True, False)


def test_mkdir_errors_and_directory_link_counts(both):
    def tree(root):
        out = [os.stat(root).st_nlink]
        os.mkdir(j(root, "a"))
        out.append(os.stat(root).st_nlink)
        os.mkdir(j(root, "b"))
        os.mkdir(j(root, "a", "x"))
        out.append((os.stat(root).st_nlink, os.stat(j(root, "a")).st_nlink, os.stat(j(root, "a", "x")).st_nlink))
        os.rmdir(j(root, "b"))
        out.append(os.stat(root).st_nlink)
        return out

    assert both(tree, expect=OK) == [2, 3, (4, 3, 2), 3]
    both(lambda root: os.mkdir(j(root, "a")), expect=errno.EEXIST)
    both(lambda root: write_file(j(root, "f"), b""), expect=OK)
    both(lambda root: os.mkdir(j(root, "f")), expect=errno.EEXIST)
    both(lambda root: os.mkdir(j(root, "missing", "x")), expect=errno.ENOENT)
    both(lambda root: os.mkdir(j(root, "f", "x")), expect=errno.ENOTDIR)


def test_rmdir_refuses_non_empty_and_non_directories(both):
    def setup(root):
        os.makedirs(j(root, "full", "sub"))
        os.mkdir(j(root, "withfile"))
        write_file(j(root, "withfile", "f"), b"x")
        write_file(j(root, "file"), b"x")
        os.mkdir(j(root, "empty"))

    both(setup, expect=OK)
    both(lambda root: os.rmdir(j(root, "full")), expect=errno.ENOTEMPTY)
    both(lambda root: os.rmdir(j(root, "withfile")), expect=errno.ENOTEMPTY)
    both(lambda root: os.rmdir(j(root, "file")), expect=errno.ENOTDIR)
    both(lambda root: os.rmdir(j(root, "missing")), expect=errno.ENOENT)
    both(lambda root: os.rmdir(j(root, "empty", ".")), expect=errno.EINVAL)
    both(lambda root: (os.rmdir(j(root, "empty")), sorted(os.listdir(root))), expect=OK)


# ---------------------------------------------------------------------------
# rename
# ---------------------------------------------------------------------------


def test_rename_over_existing_file_replaces_it_atomically(both):
    def over(root):
        write_file(j(root, "src"), b"new content")
        write_file(j(root, "dst"), b"old content")
        with opened(j(root, "dst")) as old_fd:
            os.rename(j(root, "src"), j(root, "dst"))
            still_old = read_fd(old_fd)
        return sorted(os.listdir(root)), read_file(j(root, "dst")), still_old

    assert both(over, expect=OK) == (["dst"], b"new content", b"old content")


def test_rename_across_directories_moves_files_and_subtrees(both):
    def move(root):
        os.makedirs(j(root, "a", "sub", "deep"))
        os.mkdir(j(root, "b"))
        write_file(j(root, "a", "f"), b"file")
        write_file(j(root, "a", "sub", "deep", "g"), b"deep file")
        os.rename(j(root, "a", "f"), j(root, "b", "f2"))
        os.rename(j(root, "a", "sub"), j(root, "b", "sub"))
        dotdot_ok = os.stat(j(root, "b", "sub", "..")).st_ino == os.stat(j(root, "b")).st_ino
        return (sorted(os.listdir(j(root, "a"))), sorted(os.listdir(j(root, "b"))),
                read_file(j(root, "b", "f2")), read_file(j(root, "b", "sub", "deep", "g")),
                os.stat(j(root, "a")).st_nlink, os.stat(j(root, "b")).st_nlink, dotdot_ok)

    assert both(move, expect=OK) == ([], ["f2", "sub"], b"file", b"deep file", 2, 3, True)


def test_rename_errors_match_native(both):
    def setup(root):
        os.makedirs(j(root, "dir", "sub"))
        os.makedirs(j(root, "full", "x"))
        os.mkdir(j(root, "empty"))
        write_file(j(root, "file"), b"f")
        os.link(j(root, "file"), j(root, "hard"))

    both(setup, expect=OK)
    both(lambda root: os.rename(j(root, "dir"), j(root, "full")), expect=errno.ENOTEMPTY)
    both(lambda root: os.rename(j(root, "dir"), j(root, "dir", "sub", "inside")), expect=errno.EINVAL)
    both(lambda root: os.rename(j(root, "file"), j(root, "empty")), expect=errno.EISDIR)
    both(lambda root: os.rename(j(root, "dir"), j(root, "file")), expect=errno.ENOTDIR)
    both(lambda root: os.rename(j(root, "missing"), j(root, "x")), expect=errno.ENOENT)
    both(lambda root: os.rename(j(root, "file"), j(root, "missing", "x")), expect=errno.ENOENT)
    both(lambda root: os.rename(j(root, "file"), j(root, "file", "x")), expect=errno.ENOTDIR)
    # Renaming a name onto itself, or onto another hard link of the same inode, is a no-op.
    both(lambda root: (os.rename(j(root, "file"), j(root, "file")), sorted(os.listdir(root))), expect=OK)
    both(lambda root: (os.rename(j(root, "file"), j(root, "hard")), sorted(os.listdir(root)),
                       os.stat(j(root, "file")).st_nlink), expect=OK)
    # A directory may replace an empty directory.
    both(lambda root: (os.rename(j(root, "dir"), j(root, "empty")), sorted(os.listdir(root)),
                       os.listdir(j(root, "empty"))), expect=OK)


def test_rename_noreplace_fails_eexist_and_leaves_both_names(both):
    def setup(root):
        write_file(j(root, "a"), b"A")
        write_file(j(root, "b"), b"B")

    both(setup, expect=OK)
    both(lambda root: renameat2(j(root, "a"), j(root, "b"), RENAME_NOREPLACE), expect=errno.EEXIST)
    both(lambda root: (read_file(j(root, "a")), read_file(j(root, "b"))), expect=OK)
    assert both(lambda root: (renameat2(j(root, "a"), j(root, "c"), RENAME_NOREPLACE),
                              sorted(os.listdir(root)), read_file(j(root, "c"))),
                expect=OK)[1:] == (["b", "c"], b"A")


def test_rename_exchange_swaps_files_and_directories(both):
    def exchange(root):
        os.makedirs(j(root, "p1", "d"))
        os.mkdir(j(root, "p2"))
        write_file(j(root, "p1", "d", "inside"), b"in d")
        write_file(j(root, "p2", "f"), b"file f")
        renameat2(j(root, "p1", "d"), j(root, "p2", "f"), RENAME_EXCHANGE)
        return (kind(os.lstat(j(root, "p1", "d"))), read_file(j(root, "p1", "d")),
                kind(os.lstat(j(root, "p2", "f"))), read_file(j(root, "p2", "f", "inside")),
                os.stat(j(root, "p2", "f", "..")).st_ino == os.stat(j(root, "p2")).st_ino,
                os.stat(j(root, "p1")).st_nlink, os.stat(j(root, "p2")).st_nlink)

    assert both(exchange, expect=OK) == ("REG", b"file f", "DIR", b"in d", True, 2, 3)
    both(lambda root: renameat2(j(root, "p1", "d"), j(root, "p1", "nope"), RENAME_EXCHANGE),
         expect=errno.ENOENT)
    both(lambda root: renameat2(j(root, "p1", "d"), j(root, "p2", "f"), RENAME_EXCHANGE | RENAME_NOREPLACE),
         expect=errno.EINVAL)


def test_rename_on_terrace_never_returns_exdev(parity_fs, roots):
    """Every rename inside one Terrace mount stays on one file system: never EXDEV."""
    root = roots.terrace
    os.makedirs(j(root, "x", "y", "z"))
    os.makedirs(j(root, "other"))
    write_file(j(root, "x", "big"), pattern(5 * MiB, 5))
    write_file(j(root, "x", "y", "small"), b"s")
    os.symlink("small", j(root, "x", "y", "link"))
    os.mkfifo(j(root, "x", "fifo"))
    moves = [("x/big", "other/big"), ("x/y/small", "small"), ("x/y/link", "other/link"),
             ("x/fifo", "x/y/z/fifo"), ("x/y", "other/y"), ("other", "x/other"), ("x/other/big", "big")]
    for src, dst in moves:
        try:
            os.rename(j(root, src), j(root, dst))
        except OSError as e:
            pytest.fail(f"rename {src} -> {dst} failed with {errno.errorcode.get(e.errno)}"
                        + (" (EXDEV is never allowed)" if e.errno == errno.EXDEV else ""))
    assert read_file(j(root, "big")) == pattern(5 * MiB, 5)


# ---------------------------------------------------------------------------
# hard links, symlinks, special files
# ---------------------------------------------------------------------------


def test_hard_links_share_data_and_count_links(both):
    def links(root):
        write_file(j(root, "a"), b"one")
        os.link(j(root, "a"), j(root, "b"))
        os.mkdir(j(root, "sub"))
        os.link(j(root, "b"), j(root, "sub", "c"))
        counts = [os.stat(j(root, n)).st_nlink for n in ("a", "b", "sub/c")]
        write_file(j(root, "sub", "c"), b"changed through c", os.O_WRONLY | os.O_TRUNC)
        via_a = read_file(j(root, "a"))
        os.unlink(j(root, "a"))
        return counts, via_a, os.stat(j(root, "b")).st_nlink, read_file(j(root, "b"))

    assert both(links, expect=OK) == ([3, 3, 3], b"changed through c", 2, b"changed through c")
    both(lambda root: os.link(j(root, "sub"), j(root, "sublink")), expect=errno.EPERM)
    both(lambda root: os.link(j(root, "b"), j(root, "sub", "c")), expect=errno.EEXIST)
    both(lambda root: os.link(j(root, "missing"), j(root, "x")), expect=errno.ENOENT)


def test_symlink_and_readlink_round_trip_targets(both):
    def links(root):
        write_file(j(root, "target"), b"via link")
        os.symlink("target", j(root, "rel"))
        os.symlink("/nonexistent/absolute/path", j(root, "abs"))
        long_target = "d/" * 2047 + "x"  # 4095 bytes, the longest allowed
        os.symlink(long_target, j(root, "long"))
        return (os.readlink(j(root, "rel")), read_file(j(root, "rel")), os.readlink(j(root, "abs")),
                os.readlink(j(root, "long")) == long_target, summary(j(root, "long"), follow=False),
                summary(j(root, "rel"), follow=False), sorted(os.listdir(root)))

    both(links, expect=OK)
    both(lambda root: os.symlink("y" * 4096, j(root, "toolong")), expect=errno.ENAMETOOLONG)
    both(lambda root: os.stat(j(root, "abs")), expect=errno.ENOENT)
    both(lambda root: os.symlink("target", j(root, "rel")), expect=errno.EEXIST)
    both(lambda root: os.readlink(j(root, "target")), expect=errno.EINVAL)

    def loop(root):
        os.symlink("loop2", j(root, "loop1"))
        os.symlink("loop1", j(root, "loop2"))
        os.stat(j(root, "loop1"))

    both(loop, expect=errno.ELOOP)


def test_special_files_are_stored_as_inodes(both):
    def special(root):
        os.mkfifo(j(root, "fifo1"), 0o640)
        os.mknod(j(root, "fifo2"), stat.S_IFIFO | 0o600)
        os.mknod(j(root, "sock"), stat.S_IFSOCK | 0o644)
        os.mknod(j(root, "null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.mknod(j(root, "blk"), stat.S_IFBLK | 0o600, os.makedev(7, 200))
        os.mknod(j(root, "regular"), stat.S_IFREG | 0o600)
        names = sorted(os.listdir(root))
        return names, [summary(j(root, n), follow=False) for n in names], \
            sorted((e.name, e.is_file(follow_symlinks=False), e.is_dir(follow_symlinks=False))
                   for e in os.scandir(root))

    both(special, expect=OK)
    both(lambda root: os.mkfifo(j(root, "fifo1")), expect=errno.EEXIST)


def test_fifo_on_the_mount_carries_data(both):
    def fifo(root):
        os.mkfifo(j(root, "p"))
        with opened(j(root, "p"), os.O_RDWR | os.O_NONBLOCK) as fd:
            os.write(fd, b"through the pipe")
            return os.read(fd, 100)

    assert both(fifo, expect=OK) == b"through the pipe"


def test_unix_socket_binds_and_connects_on_the_mount(both):
    def sock(root):
        path = j(root, "s")
        # sun_path is limited to 107 bytes: bind through a short relative path.
        old = os.getcwd()
        os.chdir(root)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv, \
                    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as cli:
                srv.bind("s")
                cli.sendto(b"hello", "s")
                msg = srv.recv(100)
        finally:
            os.chdir(old)
        return msg, kind(os.lstat(path))

    assert both(sock, expect=OK) == (b"hello", "SOCK")


# ---------------------------------------------------------------------------
# names and paths
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["a", "é"], ids=["ascii", "two-byte-utf8"])
def test_names_of_255_bytes_work_and_256_fail_enametoolong(both, char):
    unit = len(char.encode())
    name255 = char * (255 // unit) + "z" * (255 % unit)
    name256 = name255 + "z"
    assert len(name255.encode()) == 255

    def ok(root):
        write_file(j(root, name255), b"long")
        os.mkdir(j(root, "d" + name255[1:]))
        os.symlink("x", j(root, "s" + name255[1:]))
        os.link(j(root, name255), j(root, "l" + name255[1:]))
        os.rename(j(root, "l" + name255[1:]), j(root, "r" + name255[1:]))
        return sorted(os.listdir(root)), read_file(j(root, name255))

    both(ok, expect=OK)
    both(lambda root: write_file(j(root, name256), b""), expect=errno.ENAMETOOLONG)
    both(lambda root: os.mkdir(j(root, name256)), expect=errno.ENAMETOOLONG)
    both(lambda root: os.symlink("x", j(root, name256)), expect=errno.ENAMETOOLONG)
    both(lambda root: os.link(j(root, name255), j(root, name256)), expect=errno.ENAMETOOLONG)
    both(lambda root: os.rename(j(root, name255), j(root, name256)), expect=errno.ENAMETOOLONG)
    both(lambda root: os.stat(j(root, name256)), expect=errno.ENAMETOOLONG)


def test_paths_near_path_max_resolve_like_native(both):
    """Relative paths (from a dir fd at the test root) of 4095 bytes work; 4096 fail."""
    comp = "n" * 250

    def deep(root):
        rootfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            rel = ""
            # 16 components of 251 bytes: 4016 bytes of directories.
            fd = os.dup(rootfd)
            for _ in range(16):
                os.mkdir(comp, dir_fd=fd)
                nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = nfd
                rel += comp + "/"
            os.close(fd)
            fill = 4095 - len(rel)  # a file name that makes the path exactly 4095 bytes
            name = "f" * fill
            with opened(rel + name, os.O_CREAT | os.O_WRONLY, dir_fd=rootfd) as f:
                os.write(f, b"deep")
            with opened(rel + name, os.O_RDONLY, dir_fd=rootfd) as f:
                data = os.read(f, 10)
            st = os.stat(rel + name, dir_fd=rootfd)
            try:
                os.stat(rel + name + "g", dir_fd=rootfd)
                too_long = None
            except OSError as e:
                too_long = errno.errorcode[e.errno]
            return len(rel + name), data, st.st_size, too_long
        finally:
            os.close(rootfd)

    assert both(deep, expect=OK) == (4095, b"deep", 4, "ENAMETOOLONG")


# ---------------------------------------------------------------------------
# chmod / chown / timestamps
# ---------------------------------------------------------------------------

T_OLD = 1_000_000_000_123_456_789  # 2001-09-09, with nanoseconds


def _settle():
    """Let the coarse kernel clock tick (timestamps have ~4 ms granularity)."""
    time.sleep(0.03)


def test_write_updates_mtime_and_ctime(both):
    def write_times(root):
        p = j(root, "f")
        write_file(p, b"x")
        os.utime(p, ns=(T_OLD, T_OLD))
        c0 = os.stat(p).st_ctime_ns
        _settle()
        with opened(p, os.O_WRONLY) as fd:
            os.pwrite(fd, b"y", 10)
        st = os.stat(p)
        return st.st_mtime_ns > T_OLD, st.st_ctime_ns > c0, st.st_atime_ns == T_OLD

    assert both(write_times, expect=OK) == (True, True, True)


def test_truncate_to_a_new_size_updates_mtime_and_ctime(both):
    def trunc_times(root):
        p = j(root, "f")
        write_file(p, b"x" * 100)
        out = []
        for size in (10, 5000):
            os.utime(p, ns=(T_OLD, T_OLD))
            c0 = os.stat(p).st_ctime_ns
            _settle()
            os.truncate(p, size)
            st = os.stat(p)
            out.append((st.st_mtime_ns > T_OLD, st.st_ctime_ns > c0))
        return out

    assert both(trunc_times, expect=OK) == [(True, True), (True, True)]


def test_truncate_to_the_same_size_sets_both_times_like_ext4(both):
    """truncate(2) and ftruncate(2) to the size a file has set mtime and
    ctime on ext4; Terrace moved ctime only."""
    def same_size(root):
        p = j(root, "f")
        write_file(p, b"x" * 100)
        os.utime(p, ns=(T_OLD, T_OLD))
        c0 = os.stat(p).st_ctime_ns
        _settle()
        os.truncate(p, 100)
        st = os.stat(p)
        by_path = (st.st_mtime_ns == T_OLD, st.st_ctime_ns == c0)
        _settle()
        with opened(p, os.O_WRONLY) as fd:
            os.ftruncate(fd, 100)
        st = os.stat(p)
        return by_path, (st.st_mtime_ns > T_OLD, st.st_ctime_ns > c0)

    assert both(same_size, expect=OK) == ((False, False), (True, True))


def test_chmod_changes_mode_and_ctime_but_not_mtime(both):
    def chmod(root):
        p = j(root, "f")
        write_file(p, b"x")
        os.utime(p, ns=(T_OLD, T_OLD))
        c0 = os.stat(p).st_ctime_ns
        _settle()
        os.chmod(p, 0o4751)
        st = os.stat(p)
        os.mkdir(j(root, "d"))
        os.chmod(j(root, "d"), 0o1777)
        return (oct(stat.S_IMODE(st.st_mode)), st.st_ctime_ns > c0, st.st_mtime_ns == T_OLD,
                st.st_atime_ns == T_OLD, oct(stat.S_IMODE(os.stat(j(root, "d")).st_mode)))

    assert both(chmod, expect=OK) == ("0o4751", True, True, True, "0o1777")


def test_chown_changes_owner_and_clears_setuid(both):
    def chown(root):
        p = j(root, "f")
        write_file(p, b"x")
        os.chmod(p, 0o6755)
        c0 = os.stat(p).st_ctime_ns
        _settle()
        os.chown(p, 1234, 5678)
        st = os.stat(p)
        after_chown = (st.st_uid, st.st_gid, oct(stat.S_IMODE(st.st_mode)), st.st_ctime_ns > c0)
        os.chown(p, -1, 42)
        st2 = os.stat(p)
        os.symlink("f", j(root, "l"))
        os.lchown(j(root, "l"), 77, 88)
        lst = os.lstat(j(root, "l"))
        return after_chown, (st2.st_uid, st2.st_gid), (lst.st_uid, lst.st_gid), os.stat(p).st_uid

    assert both(chown, expect=OK) == ((1234, 5678, "0o755", True), (1234, 42), (77, 88), 1234)


# The cases of xfstests generic/683-684 (and more modification paths): which
# set-ID bits a modification by an unprivileged user, a user in the file's
# group, or root leaves behind.
SETID_MODES = [0o6666, 0o6676, 0o6766, 0o6777, 0o2676, 0o2777, 0o2666, 0o4666]
SETID_CALLERS = {
    "nobody": (NOBODY, NOBODY, ()),
    "in_group": (NOBODY, NOBODY, (4242,)),  # the file's group as a supplementary group
    "root": (0, 0, ()),
    # nobody in a user namespace of its own: all capabilities there, none
    # over the files of this mount (the kernel checks them in the initial
    # namespace). Terrace once read them from /proc as if they counted.
    "nobody_in_own_userns": (NOBODY, NOBODY, ()),
}

CLONE_NEWUSER = 0x10000000


def _in_own_user_namespace(fn, *args):
    """Runs fn(*args) after unsharing a new user namespace (no id maps)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return fn(*args)


def _unprivileged_user_namespaces_work() -> bool:
    try:
        run_as(NOBODY, NOBODY, _in_own_user_namespace, lambda: None)
        return True
    except OSError:
        return False


def _run_setid_caller(caller: str, fn, *args):
    uid, gid, groups = SETID_CALLERS[caller]
    if caller == "nobody_in_own_userns":
        return run_as(uid, gid, _in_own_user_namespace, fn, *args, groups=groups)
    return run_as(uid, gid, fn, *args, groups=groups)


def _setid_modify(how: str, p: str) -> None:
    if how == "truncate":
        os.truncate(p, 100)
        return
    with opened(p, os.O_WRONLY) as fd:
        if how == "write":
            os.pwrite(fd, b"y", 10)
        elif how == "fallocate":
            fallocate(fd, 0, 64 * 1024, 64 * 1024)
        elif how == "fallocate_keep_size":
            fallocate(fd, FALLOC_FL_KEEP_SIZE, 64 * 1024, 64 * 1024)
        elif how == "punch_hole":
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 4096)
        elif how == "ftruncate":
            os.ftruncate(fd, 100)
        elif how == "copy_file_range":
            # Whole blocks: Terrace shares them (a clone), still a modification.
            src = p + ".src"
            write_file(src, b"z" * 8192)
            with opened(src, os.O_RDONLY) as s:
                os.copy_file_range(s, fd, 8192, 0, 0)
        else:
            raise AssertionError(how)


@pytest.mark.parametrize("caller", sorted(SETID_CALLERS))
@pytest.mark.parametrize("how", ["write", "fallocate", "fallocate_keep_size", "punch_hole",
                                 "truncate", "ftruncate", "copy_file_range"])
def test_modifications_drop_set_id_bits_exactly_as_the_native_file_system_does(both, how, caller):
    if caller == "nobody_in_own_userns" and not _unprivileged_user_namespaces_work():
        pytest.skip("unprivileged user namespaces are off on this kernel")

    def modify_all(root):
        os.chmod(root, 0o777)
        seen = []
        for i, mode in enumerate(SETID_MODES):
            p = j(root, f"f{i}")
            write_file(p, pattern(8192, i))
            os.chown(p, 0, 4242)
            os.chmod(p, mode)
            _run_setid_caller(caller, _setid_modify, how, p)
            seen.append((oct(mode), oct(stat.S_IMODE(os.stat(p).st_mode))))
        return seen

    seen = both(modify_all, expect=OK)
    if caller.startswith("nobody"):  # the security property, stated without the reference
        assert all(int(after, 8) & 0o6000 == 0 for _, after in seen), seen


# A file capability (cap_chown+ep: vfs_cap_data revision 2, effective).
FILE_CAPABILITY = (0x02000001).to_bytes(4, "little") + (1).to_bytes(4, "little") + bytes(12)


@pytest.mark.parametrize("caller", ["nobody", "root"])
@pytest.mark.parametrize("how", ["write", "truncate", "fallocate", "copy_file_range"])
def test_any_modification_drops_file_capabilities_like_ext4(both, how, caller):
    """xfstests generic/093: a write — by root too — takes the file's
    capabilities away (a changed program must not keep cap_chown)."""
    uid, gid, groups = SETID_CALLERS[caller]

    def modify(root):
        os.chmod(root, 0o777)
        p = j(root, "prog")
        write_file(p, pattern(8192, 1))
        os.chmod(p, 0o777)
        os.setxattr(p, "trusted.keep", b"other xattrs stay")
        os.setxattr(p, "security.capability", FILE_CAPABILITY)
        run_as(uid, gid, _setid_modify, how, p, groups=groups)
        try:
            cap = os.getxattr(p, "security.capability")
        except OSError as e:
            cap = errno.errorcode[e.errno]
        return cap, os.getxattr(p, "trusted.keep")

    assert both(modify, expect=OK) == ("ENODATA", b"other xattrs stay")


def test_a_directory_read_while_its_entries_are_renamed_sees_each_once(both):
    """xfstests generic/736: rename every entry to a temporary name and back
    while reading the directory; the read must end (ext4 returns each once)."""

    def read_while_renaming(root):
        d = j(root, "d")
        os.mkdir(d)
        for i in range(1, 3001):
            open(j(d, str(i)), "w").close()
        seen = []
        with os.scandir(d) as it:
            for e in it:
                seen.append(e.name)
                if len(seen) > 9000:
                    break
                os.rename(j(d, e.name), j(d, "TEMPFILE"))
                os.rename(j(d, "TEMPFILE"), j(d, e.name))
        return len(seen), len(set(seen)), sorted(os.listdir(d)) == sorted(str(i) for i in range(1, 3001))

    assert both(read_while_renaming, expect=OK) == (3000, 3000, True)


def test_a_mount_by_root_honours_set_user_id_programs_and_device_nodes_like_ext4(both):
    """mount(8) by root gives suid,dev (xfstests generic/184, 434, vfstest's
    "setid binaries on regular mounts"); nosuid,nodev are options, not defaults."""

    def setid_program_and_device(root):
        prog = j(root, "id")
        shutil.copy("/usr/bin/id", prog)
        os.chmod(prog, 0o4755)
        euid = run_as(NOBODY, NOBODY, lambda: subprocess.run(
            [prog, "-u"], capture_output=True, text=True, check=True).stdout.strip())
        os.mknod(j(root, "null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
        with opened(j(root, "null"), os.O_WRONLY) as fd:
            written = os.write(fd, b"x")
        return euid, written

    assert both(setid_program_and_device, expect=OK) == ("0", 1)


# Before the epoch with a fraction of a second: the kernel sends (-1, 500000000)
# for -0.5 s, which once read back a second early (-1.5 s).
@pytest.mark.parametrize("when", [T_OLD, 0, 1, -500_000_000, -31_536_000 * 10**9 - 1,
                                  2**33 * 10**9 + 999_999_999, 1_700_000_000_000_000_001])
def test_utime_sets_atime_and_mtime_exactly_with_nanoseconds(both, when):
    def utime(root):
        p = j(root, "f")
        write_file(p, b"x")
        os.utime(p, ns=(when, when + 1000))
        st = os.stat(p)
        os.mkdir(j(root, "d"))
        os.utime(j(root, "d"), ns=(when + 5, when))
        sd = os.stat(j(root, "d"))
        return st.st_atime_ns, st.st_mtime_ns, sd.st_atime_ns, sd.st_mtime_ns

    assert both(utime, expect=OK) == (when, when + 1000, when + 5, when)


def test_utimensat_omit_and_now_follow_the_rules(both):
    def omit(root):
        p = j(root, "f")
        write_file(p, b"x")
        os.utime(p, ns=(T_OLD, T_OLD))
        utimensat(p, (0, UTIME_OMIT), (123, 456))  # atime untouched, mtime set
        st = os.stat(p)
        res = [st.st_atime_ns == T_OLD, st.st_mtime_ns == 123 * 10**9 + 456]
        before = time.time_ns()
        utimensat(p, (0, UTIME_NOW), (0, UTIME_OMIT))  # atime = now, mtime untouched
        st = os.stat(p)
        res += [abs(st.st_atime_ns - before) < 5 * 10**9, st.st_mtime_ns == 123 * 10**9 + 456]
        os.utime(p)  # both now
        st = os.stat(p)
        res += [abs(st.st_mtime_ns - time.time_ns()) < 5 * 10**9]
        return res

    assert both(omit, expect=OK) == [True] * 5


def test_directory_mtime_and_ctime_change_when_entries_change(both):
    def dir_times(root):
        d = j(root, "d")
        os.mkdir(d)
        os.mkdir(j(root, "other"))
        results = []
        ops = [
            ("create", lambda: write_file(j(d, "f"), b"x")),
            ("mkdir", lambda: os.mkdir(j(d, "sub"))),
            ("symlink", lambda: os.symlink("f", j(d, "l"))),
            ("link", lambda: os.link(j(d, "f"), j(d, "f2"))),
            ("rename-within", lambda: os.rename(j(d, "f2"), j(d, "f3"))),
            ("rename-out", lambda: os.rename(j(d, "f3"), j(root, "other", "f3"))),
            ("unlink", lambda: os.unlink(j(d, "l"))),
            ("rmdir", lambda: os.rmdir(j(d, "sub"))),
            ("write-to-child", lambda: write_file(j(d, "f"), b"more", os.O_WRONLY | os.O_APPEND)),
        ]
        for name, op in ops:
            os.utime(d, ns=(T_OLD, T_OLD))
            c0 = os.stat(d).st_ctime_ns
            _settle()
            op()
            st = os.stat(d)
            results.append((name, st.st_mtime_ns != T_OLD, st.st_ctime_ns > c0))
        return results

    got = both(dir_times, expect=OK)
    assert [r for r in got if r[0] != "write-to-child"] == [(r[0], True, True) for r in got
                                                             if r[0] != "write-to-child"]


def test_link_rename_and_unlink_update_the_inode_ctime(both):
    def inode_ctime(root):
        p = j(root, "f")
        write_file(p, b"x")
        out = []
        for name, op in (("link", lambda: os.link(p, j(root, "g"))),
                         ("unlink-other-name", lambda: os.unlink(j(root, "g"))),
                         ("rename", lambda: os.rename(p, j(root, "h")))):
            target = j(root, "h") if name == "rename" else p
            c0 = os.stat(p).st_ctime_ns
            _settle()
            op()
            out.append((name, os.stat(target).st_ctime_ns > c0))
        return out

    assert both(inode_ctime, expect=OK) == [("link", True), ("unlink-other-name", True), ("rename", True)]


def test_setgid_directory_passes_its_group_and_bit_to_new_entries(both):
    def setgid(root):
        d = j(root, "shared")
        os.mkdir(d)
        os.chown(d, 0, 4321)
        os.chmod(d, 0o2775)
        write_file(j(d, "file"), b"")
        os.mkdir(j(d, "subdir"), 0o755)
        os.mknod(j(d, "fifo"), stat.S_IFIFO | 0o644)
        os.symlink("file", j(d, "link"))
        return [summary(j(d, n), follow=False) for n in ("file", "subdir", "fifo", "link")]

    got = both(setgid, expect=OK)
    assert got[0][5] == 4321 and got[1][1] == "0o2755"


def test_files_created_by_another_user_are_owned_by_that_user(both):
    def create_as_nobody(root):
        os.mkdir(j(root, "open"))
        os.chmod(j(root, "open"), 0o777)
        run_as(NOBODY, NOBODY, lambda: (write_file(j(root, "open", "f"), b"x"),
                                        os.mkdir(j(root, "open", "d")),
                                        os.symlink("f", j(root, "open", "l"))))
        return [summary(j(root, "open", n), follow=False) for n in ("f", "d", "l")]

    got = both(create_as_nobody, expect=OK)
    assert all(s[4] == NOBODY and s[5] == NOBODY for s in got)


def test_lutimes_sets_times_of_the_symlink_itself(both):
    def lutimes(root):
        write_file(j(root, "f"), b"x")
        os.utime(j(root, "f"), ns=(T_OLD, T_OLD))
        os.symlink("f", j(root, "l"))
        os.utime(j(root, "l"), ns=(5_000_000_000, 6_000_000_007), follow_symlinks=False)
        lst, st = os.lstat(j(root, "l")), os.stat(j(root, "f"))
        return lst.st_atime_ns, lst.st_mtime_ns, st.st_mtime_ns == T_OLD

    assert both(lutimes, expect=OK) == (5_000_000_000, 6_000_000_007, True)


def test_block_counts_on_terrace_follow_allocated_data(parity_fs, roots):
    """st_blocks (what du shows) counts allocated data: small for a sparse
    5 GiB file, at least the data written for a dense one."""
    root = roots.terrace
    with opened(j(root, "sparse"), os.O_CREAT | os.O_WRONLY) as fd:
        os.pwrite(fd, b"x", 5 * GiB)
    write_file(j(root, "dense"), pattern(2 * MiB))
    with opened(j(root, "dense")) as fd:
        os.fsync(fd)
    sparse, dense = os.stat(j(root, "sparse")), os.stat(j(root, "dense"))
    assert sparse.st_blocks * 512 <= MiB, f"a 5 GiB file with one byte uses {sparse.st_blocks} blocks"
    assert dense.st_blocks * 512 >= 2 * MiB, f"a 2 MiB file reports {dense.st_blocks} blocks"
    assert dense.st_blocks * 512 <= 3 * MiB
    assert dense.st_blksize > 0


def test_permission_checks_apply_to_other_users(both):
    def setup(root):
        write_file(j(root, "private"), b"secret")
        os.chmod(j(root, "private"), 0o600)
        write_file(j(root, "public"), b"hello")
        os.chmod(j(root, "public"), 0o644)
        os.mkdir(j(root, "closed"), 0o755)
        os.mkdir(j(root, "open"))
        os.chmod(j(root, "open"), 0o777)
        os.mkdir(j(root, "noexec"))
        write_file(j(root, "noexec", "f"), b"x")
        os.chmod(j(root, "noexec"), 0o700)

    both(setup, expect=OK)
    as_nobody = lambda fn: (lambda root: run_as(NOBODY, NOBODY, fn, root))  # noqa: E731
    both(as_nobody(lambda root: read_file(j(root, "private"))), expect=errno.EACCES)
    both(as_nobody(lambda root: read_file(j(root, "public"))), expect=OK)
    both(as_nobody(lambda root: write_file(j(root, "public"), b"x", os.O_WRONLY)), expect=errno.EACCES)
    both(as_nobody(lambda root: write_file(j(root, "closed", "f"), b"x")), expect=errno.EACCES)
    both(as_nobody(lambda root: (write_file(j(root, "open", "mine"), b"x"),
                                 summary(j(root, "open", "mine")))), expect=OK)
    both(as_nobody(lambda root: os.stat(j(root, "noexec", "f"))), expect=errno.EACCES)
    both(as_nobody(lambda root: os.chmod(j(root, "public"), 0o777)), expect=errno.EPERM)
    both(as_nobody(lambda root: os.chown(j(root, "open", "mine"), 0, 0)), expect=errno.EPERM)
    both(as_nobody(lambda root: os.utime(j(root, "public"), ns=(1, 1))), expect=errno.EPERM)


def test_sticky_directory_protects_other_users_files(both):
    def setup(root):
        os.mkdir(j(root, "tmp"))
        os.chmod(j(root, "tmp"), 0o1777)
        write_file(j(root, "tmp", "roots"), b"x")
        os.chmod(j(root, "tmp", "roots"), 0o666)

    both(setup, expect=OK)
    both(lambda root: run_as(NOBODY, NOBODY, os.unlink, j(root, "tmp", "roots")), expect=errno.EPERM)
    both(lambda root: run_as(NOBODY, NOBODY, os.rename, j(root, "tmp", "roots"), j(root, "tmp", "x")),
         expect=errno.EPERM)


# ---------------------------------------------------------------------------
# readdir, statfs
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_readdir_lists_all_of_100000_entries(both):
    count = 100_000

    def populate(root):
        d = j(root, "big")
        os.mkdir(d)
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(count):
                os.close(os.open(f"entry-{i:06d}-{'x' * (i % 40)}", os.O_CREAT | os.O_WRONLY, 0o644,
                                 dir_fd=dfd))
        finally:
            os.close(dfd)
        names = os.listdir(d)
        return len(names), len(set(names)), digest("\n".join(sorted(names)).encode())

    n, distinct, _ = both(populate, expect=OK)
    assert n == distinct == count


def test_readdir_reports_entry_types_and_survives_deletions(both):
    def listing(root):
        os.mkdir(j(root, "d"))
        for i in range(1000):
            write_file(j(root, "d", f"f{i}"), b"")
        os.mkdir(j(root, "d", "subdir"))
        os.symlink("f1", j(root, "d", "sym"))
        os.mkfifo(j(root, "d", "fifo"))
        for i in range(0, 1000, 3):
            os.unlink(j(root, "d", f"f{i}"))
        entries = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_symlink(),
                          e.is_file(follow_symlinks=False)) for e in os.scandir(j(root, "d")))
        return len(entries), digest(repr(entries).encode()), entries[:5]

    both(listing, expect=OK)


def test_readdir_while_creating_in_the_same_directory_sees_no_duplicates(both):
    def churn(root):
        for i in range(300):
            write_file(j(root, f"a{i}"), b"")
        seen = []
        with os.scandir(root) as it:
            for k, e in enumerate(it):
                seen.append(e.name)
                if k % 10 == 0:
                    write_file(j(root, f"b{k}"), b"")
        originals = [n for n in seen if n.startswith("a")]
        return len(originals) == len(set(originals)) == 300

    assert both(churn, expect=OK) is True


def test_statvfs_reports_sane_values_on_terrace(parity_fs, roots):
    if isinstance(parity_fs, ExistingDirFS):
        pytest.skip("checks the size of the suite's own 1G pool")
    st = os.statvfs(roots.terrace)
    assert st.f_bsize > 0 and st.f_frsize > 0
    assert st.f_blocks > 0 and 0 <= st.f_bavail <= st.f_bfree <= st.f_blocks
    assert st.f_files > 0 and 0 <= st.f_ffree <= st.f_files
    assert st.f_namemax == 255
    total = st.f_blocks * st.f_frsize
    assert 0.5 * GiB <= total <= 1.1 * GiB, f"a 1G pool reports {total} bytes"
    before = st.f_bfree
    write_file(j(roots.terrace, "f"), pattern(16 * MiB))
    with opened(j(roots.terrace, "f")) as fd:
        os.fsync(fd)
    after = os.statvfs(roots.terrace).f_bfree
    assert (before - after) * st.f_frsize >= 15 * MiB, "writing 16 MiB must consume free blocks"
    files_before = os.statvfs(roots.terrace).f_ffree
    for i in range(10):
        write_file(j(roots.terrace, f"g{i}"), b"")
    assert os.statvfs(roots.terrace).f_ffree <= files_before - 10


def test_statvfs_namemax_matches_native(both):
    both(lambda root: os.statvfs(root).f_namemax, expect=OK)


# ---------------------------------------------------------------------------
# extended attributes
# ---------------------------------------------------------------------------


def test_user_xattrs_set_get_list_remove(both):
    def xattrs(root):
        p = j(root, "f")
        write_file(p, b"x")
        os.setxattr(p, "user.one", b"1")
        os.setxattr(p, "user.empty", b"")
        os.setxattr(p, "user.binary", bytes(range(256)))
        os.setxattr(p, "user.big", pattern(3000))
        os.setxattr(p, "user.one", b"replaced")
        listed = sorted(os.listxattr(p))
        values = [os.getxattr(p, n) for n in ("user.one", "user.empty", "user.binary")]
        big_ok = os.getxattr(p, "user.big") == pattern(3000)
        os.removexattr(p, "user.binary")
        return listed, values, big_ok, sorted(os.listxattr(p))

    both(xattrs, expect=OK)
    both(lambda root: os.getxattr(j(root, "f"), "user.binary"), expect=errno.ENODATA)
    both(lambda root: os.getxattr(j(root, "f"), "user.never"), expect=errno.ENODATA)
    both(lambda root: os.removexattr(j(root, "f"), "user.never"), expect=errno.ENODATA)


def test_xattr_create_and_replace_flags_report_errors(both):
    both(lambda root: write_file(j(root, "f"), b"x"), expect=OK)
    both(lambda root: os.setxattr(j(root, "f"), "user.a", b"1", XATTR_CREATE), expect=OK)
    both(lambda root: os.setxattr(j(root, "f"), "user.a", b"2", XATTR_CREATE), expect=errno.EEXIST)
    both(lambda root: os.setxattr(j(root, "f"), "user.b", b"2", XATTR_REPLACE), expect=errno.ENODATA)
    both(lambda root: (os.setxattr(j(root, "f"), "user.a", b"3", XATTR_REPLACE),
                       os.getxattr(j(root, "f"), "user.a")), expect=OK)
    both(lambda root: sorted(os.listxattr(j(root, "f"))), expect=OK)


def test_xattrs_on_directories_and_symlinks(both):
    def dirs(root):
        os.mkdir(j(root, "d"))
        os.setxattr(j(root, "d"), "user.dir", b"on a dir")
        return os.getxattr(j(root, "d"), "user.dir"), [n for n in os.listxattr(j(root, "d"))
                                                      if n.startswith("user.")]

    both(dirs, expect=OK)

    def on_symlink(root):
        os.symlink("d", j(root, "l"))
        os.setxattr(j(root, "l"), "user.x", b"1", follow_symlinks=False)

    both(on_symlink, expect=errno.EPERM)


def test_trusted_xattrs_work_for_root(both):
    def trusted(root):
        p = j(root, "f")
        write_file(p, b"x")
        os.setxattr(p, "trusted.terrace-test", b"t")
        value = os.getxattr(p, "trusted.terrace-test")
        os.removexattr(p, "trusted.terrace-test")
        return value, [n for n in os.listxattr(p) if n.startswith("trusted.terrace")]

    assert both(trusted, expect=OK) == (b"t", [])


def test_xattrs_survive_rename_and_hard_link(both):
    def moved(root):
        write_file(j(root, "f"), b"x")
        os.setxattr(j(root, "f"), "user.k", b"v")
        os.rename(j(root, "f"), j(root, "g"))
        os.link(j(root, "g"), j(root, "h"))
        return os.getxattr(j(root, "g"), "user.k"), os.getxattr(j(root, "h"), "user.k")

    assert both(moved, expect=OK) == (b"v", b"v")


# ---------------------------------------------------------------------------
# fsync, mmap, SQLite, locks
# ---------------------------------------------------------------------------


def test_fsync_and_fdatasync_succeed_on_files_and_directories(both):
    def syncs(root):
        p = j(root, "f")
        with opened(p, os.O_CREAT | os.O_RDWR) as fd:
            os.write(fd, pattern(100_000))
            os.fsync(fd)
            os.pwrite(fd, b"z", 5)
            os.fdatasync(fd)
        with opened(root, os.O_RDONLY | os.O_DIRECTORY) as dfd:
            os.fsync(dfd)
        with opened(p, os.O_RDONLY) as fd:
            os.fsync(fd)  # fsync on a read-only fd is allowed
        return digest(read_file(p))

    both(syncs, expect=OK)


def test_mmap_shared_writes_reach_the_file(both):
    def mapped(root):
        p = j(root, "f")
        size = 64 * 1024 + 100
        write_file(p, bytes(size))
        with opened(p, os.O_RDWR) as fd:
            with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
                mm[0:5] = b"hello"
                mm[4096:4096 + 9] = b"page two!"
                mm[size - 4:size] = b"tail"
                mm.flush()
                seen_by_read_while_mapped = os.pread(fd, 5, 0)
        data = read_file(p)
        return seen_by_read_while_mapped, data[:5], data[4096:4105], data[-4:], len(data)

    assert both(mapped, expect=OK) == (b"hello", b"hello", b"page two!", b"tail", 64 * 1024 + 100)


def test_mmap_sees_data_written_with_write_and_extended_files(both):
    def mapped(root):
        p = j(root, "f")
        write_file(p, pattern(10_000, 2))
        with opened(p, os.O_RDWR) as fd:
            os.ftruncate(fd, 3 * 4096)
            with mmap.mmap(fd, 3 * 4096) as mm:
                first = bytes(mm[:10_000]) == pattern(10_000, 2)
                zeros = bytes(mm[10_000:]) == bytes(3 * 4096 - 10_000)
                os.pwrite(fd, b"after map", 8192)
                seen = bytes(mm[8192:8201])
                mm[100:103] = b"MAP"
                mm.flush()
        return first, zeros, seen, read_file(p)[100:103]

    assert both(mapped, expect=OK) == (True, True, b"after map", b"MAP")


def test_sqlite_in_wal_mode_keeps_all_committed_rows(both):
    def db(root):
        p = j(root, "test.db")
        con = sqlite3.connect(p)
        try:
            mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, blob BLOB)")
            for txn in range(10):
                with con:
                    con.executemany("INSERT INTO t (v, blob) VALUES (?, ?)",
                                    [(f"row {txn}-{i}", pattern(200, txn * 100 + i)) for i in range(100)])
            with con:
                con.execute("DELETE FROM t WHERE id % 10 = 0")
                con.execute("UPDATE t SET v = v || '!' WHERE id % 7 = 0")
        finally:
            con.close()
        con = sqlite3.connect(p)
        try:
            count = con.execute("SELECT count(*) FROM t").fetchone()[0]
            check = con.execute("PRAGMA integrity_check").fetchone()[0]
            bangs = con.execute("SELECT count(*) FROM t WHERE v LIKE '%!'").fetchone()[0]
            still_wal = con.execute("PRAGMA journal_mode").fetchone()[0]
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            con.close()
        return mode, count, check, bangs, still_wal

    assert both(db, expect=OK)[:3] == ("wal", 900, "ok")


_LOCK_HOLDER = r"""
import fcntl, os, sys
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
if how == "flock":
    fcntl.flock(fd, fcntl.LOCK_EX)
else:
    fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()  # hold the lock until the parent closes our stdin
"""


@contextlib.contextmanager
def lock_held_by_another_process(path: str, how: str):
    """A child process holding an exclusive flock/POSIX lock on `path`."""
    child = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, path, how],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().strip()
        assert line == "locked", f"lock holder failed to lock {path}"
        yield
    finally:
        child.stdin.close()
        child.wait(timeout=30)


@pytest.mark.parametrize("how", ["flock", "posix"])
def test_locks_succeed_and_conflicting_nonblocking_lock_fails(both, how):
    lock = (lambda fd, op: fcntl.flock(fd, op)) if how == "flock" else (lambda fd, op: fcntl.lockf(fd, op))

    def own_lock(root):
        p = j(root, "lockfile")
        write_file(p, b"lock me")
        with opened(p, os.O_RDWR) as fd:
            lock(fd, fcntl.LOCK_EX)
            lock(fd, fcntl.LOCK_UN)
            lock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            lock(fd, fcntl.LOCK_UN)

    def conflict(root):
        p = j(root, "lockfile")
        with lock_held_by_another_process(p, how):
            with opened(p, os.O_RDWR) as fd:
                lock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def after_release(root):
        with opened(j(root, "lockfile"), os.O_RDWR) as fd:
            lock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock(fd, fcntl.LOCK_UN)

    both(own_lock, expect=OK)
    both(conflict, expect=(errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES))
    both(after_release, expect=OK)


def test_flock_conflicts_between_two_open_file_descriptions(both):
    def two_fds(root):
        p = j(root, "f")
        write_file(p, b"")
        with opened(p, os.O_RDWR) as a, opened(p, os.O_RDWR) as b:
            fcntl.flock(a, fcntl.LOCK_EX)
            fcntl.flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB)

    both(two_fds, expect=errno.EWOULDBLOCK)


# ---------------------------------------------------------------------------
# inode flags (chattr): immutable and append-only as ext4 enforces them
# ---------------------------------------------------------------------------

FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_IMMUTABLE_FL = 0x10
FS_APPEND_FL = 0x20
FS_NODUMP_FL = 0x40
FS_NOATIME_FL = 0x80
# The flags both file systems keep (ext4 adds its own, e.g. extents).
KEPT_FLAGS = FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL


def get_flags(path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return int.from_bytes(fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(4)), sys.byteorder)
    finally:
        os.close(fd)


def set_flags(path, on: int = 0, off: int = 0) -> int:
    """Turns flags `on` and `off` as chattr does (read, change, write back);
    returns the kept flags after."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(4)), sys.byteorder)
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, ((flags | on) & ~off).to_bytes(4, sys.byteorder))
    finally:
        os.close(fd)
    return get_flags(path) & KEPT_FLAGS


@contextlib.contextmanager
def flags_cleared_afterwards(roots):
    """Clears the immutable and append-only flags of everything under both
    roots at the end, so a failing test leaves nothing undeletable."""
    try:
        yield
    finally:
        for root in (roots.terrace, roots.reference):
            for dirpath, dirnames, filenames in os.walk(root):
                for n in [*dirnames, *filenames]:
                    with contextlib.suppress(OSError):
                        set_flags(j(dirpath, n), off=FS_IMMUTABLE_FL | FS_APPEND_FL)


def test_an_immutable_file_refuses_changes_like_ext4(both):
    with flags_cleared_afterwards(both.roots):
        def setup(root):
            p = j(root, "f")
            write_file(p, b"frozen")
            os.setxattr(p, "user.k", b"v")
            return set_flags(p, on=FS_IMMUTABLE_FL)

        assert both(setup, expect=OK) == FS_IMMUTABLE_FL
        f = lambda root: j(root, "f")  # noqa: E731
        both(lambda root: os.close(os.open(f(root), os.O_WRONLY)), expect=errno.EPERM)
        both(lambda root: os.close(os.open(f(root), os.O_RDONLY | os.O_TRUNC)), expect=errno.EPERM)
        both(lambda root: os.truncate(f(root), 0), expect=errno.EPERM)
        both(lambda root: os.chmod(f(root), 0o600), expect=errno.EPERM)
        both(lambda root: os.chown(f(root), 1, 1), expect=errno.EPERM)
        both(lambda root: os.utime(f(root), (0, 0)), expect=errno.EPERM)
        both(lambda root: os.utime(f(root)), expect=errno.EPERM)
        both(lambda root: os.link(f(root), j(root, "g")), expect=errno.EPERM)
        both(lambda root: os.unlink(f(root)), expect=errno.EPERM)
        both(lambda root: os.rename(f(root), j(root, "g")), expect=errno.EPERM)
        both(lambda root: os.setxattr(f(root), "user.k", b"w"), expect=errno.EPERM)
        both(lambda root: os.removexattr(f(root), "user.k"), expect=errno.EPERM)
        both(lambda root: (read_file(f(root)), os.getxattr(f(root), "user.k")), expect=OK)

        def clear_and_change(root):
            after = set_flags(f(root), off=FS_IMMUTABLE_FL)
            write_file(f(root), b"thawed")
            return after, read_file(f(root))

        assert both(clear_and_change, expect=OK) == (0, b"thawed")


def test_a_write_through_a_descriptor_opened_before_chattr_i_fails_like_ext4(both):
    with flags_cleared_afterwards(both.roots):
        def write_after_freeze(root):
            p = j(root, "f")
            write_file(p, b"before")
            with opened(p, os.O_RDWR) as fd:
                set_flags(p, on=FS_IMMUTABLE_FL)
                try:
                    os.pwrite(fd, b"after", 0)
                finally:
                    set_flags(p, off=FS_IMMUTABLE_FL)

        both(write_after_freeze, expect=errno.EPERM)
        both(lambda root: read_file(j(root, "f")), expect=OK)


def test_an_append_only_file_only_grows_like_ext4(both):
    with flags_cleared_afterwards(both.roots):
        def setup(root):
            write_file(j(root, "log"), b"line 1\n")
            return set_flags(j(root, "log"), on=FS_APPEND_FL)

        assert both(setup, expect=OK) == FS_APPEND_FL
        log = lambda root: j(root, "log")  # noqa: E731
        both(lambda root: os.close(os.open(log(root), os.O_WRONLY)), expect=errno.EPERM)
        both(lambda root: os.close(os.open(log(root), os.O_WRONLY | os.O_APPEND | os.O_TRUNC)),
             expect=errno.EPERM)

        def append(root):
            with opened(log(root), os.O_WRONLY | os.O_APPEND) as fd:
                os.write(fd, b"line 2\n")
            return read_file(log(root))

        assert both(append, expect=OK) == b"line 1\nline 2\n"
        both(lambda root: os.truncate(log(root), 0), expect=errno.EPERM)
        both(lambda root: os.utime(log(root), (0, 0)), expect=errno.EPERM)
        both(lambda root: os.utime(log(root)), expect=OK)
        both(lambda root: os.unlink(log(root)), expect=errno.EPERM)
        both(lambda root: os.rename(log(root), j(root, "old")), expect=errno.EPERM)
        both(lambda root: os.setxattr(log(root), "user.k", b"v"), expect=errno.EPERM)


FS_IOC32_SETFLAGS = 0x40046602  # the 32-bit form; a 64-bit caller's is unchecked


def test_flags_change_only_through_the_ioctl_the_kernel_checks_like_ext4(both):
    """A user may not set flags on another user's file. The kernel checks
    FS_IOC_SETFLAGS itself, but sends the 32-bit command of a 64-bit caller
    on unchecked: Terrace answered it, so anyone could set or clear +a and
    +i on any file they could open."""
    with flags_cleared_afterwards(both.roots):
        def setup(root):
            write_file(j(root, "roots"), b"root's\n")
            os.chmod(j(root, "roots"), 0o644)
            return get_flags(j(root, "roots")) & KEPT_FLAGS

        assert both(setup, expect=OK) == 0

        def set_by_nobody(root):
            def attempt():
                fd = os.open(j(root, "roots"), os.O_RDONLY)
                try:
                    fcntl.ioctl(fd, FS_IOC32_SETFLAGS, FS_APPEND_FL.to_bytes(4, sys.byteorder))
                finally:
                    os.close(fd)
            return run_as(NOBODY, NOBODY, attempt)

        both(set_by_nobody, expect=errno.ENOTTY)
        assert both(lambda root: get_flags(j(root, "roots")) & KEPT_FLAGS, expect=OK) == 0


def test_an_append_only_file_is_not_overwritten_through_fcntl_or_a_mapping(both):
    """ext4 refuses to clear O_APPEND of an append-only file (fcntl) and
    to map it shared and writable (mmap): the kernel does neither for a FUSE
    file, so Terrace refuses the writes below the end that follow."""
    with flags_cleared_afterwards(both.roots):
        def setup(root):
            write_file(j(root, "log"), b"line 1\n")
            return set_flags(j(root, "log"), on=FS_APPEND_FL)

        assert both(setup, expect=OK) == FS_APPEND_FL
        log = lambda root: j(root, "log")  # noqa: E731

        def overwrite_after_fcntl(root):
            with opened(log(root), os.O_WRONLY | os.O_APPEND) as fd:
                try:
                    fcntl.fcntl(fd, fcntl.F_SETFL, 0)
                except OSError as e:
                    return ("fcntl", errno.errorcode[e.errno])
                try:
                    os.pwrite(fd, b"X", 0)
                except OSError as e:
                    return ("pwrite", errno.errorcode[e.errno])
                return ("overwritten",)

        def overwrite_through_a_mapping(root):
            with opened(log(root), os.O_RDWR | os.O_APPEND) as fd:
                try:
                    m = mmap.mmap(fd, 7, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                except OSError as e:
                    return ("mmap", errno.errorcode[e.errno])
                try:
                    m[0:1] = b"X"
                    try:
                        m.flush()
                    except OSError as e:
                        return ("msync", errno.errorcode[e.errno])
                    return ("stored",)
                finally:
                    m.close()

        ref = overwrite_after_fcntl(both.roots.reference)
        ter = overwrite_after_fcntl(both.roots.terrace)
        assert ref == ("fcntl", "EPERM"), ref
        assert ter in (("fcntl", "EPERM"), ("pwrite", "EPERM")), ter
        ref = overwrite_through_a_mapping(both.roots.reference)
        ter = overwrite_through_a_mapping(both.roots.terrace)
        assert ref == ("mmap", "EACCES"), ref
        assert ter[0] in ("mmap", "msync", "stored"), ter
        # Whatever the mapping showed, the file was not changed: a new open
        # reads it from the pool.
        assert both(lambda root: read_file(log(root)), expect=OK) == b"line 1\n"

        def append(root):
            with opened(log(root), os.O_WRONLY | os.O_APPEND) as fd:
                os.write(fd, b"line 2\n")
            return read_file(log(root))

        assert both(append, expect=OK) == b"line 1\nline 2\n"


def test_a_user_append_to_an_append_only_set_uid_file_is_refused_like_ext4(both):
    """A write must drop the set-user-ID bit first, which an append-only
    file refuses: ext4 fails the write with EPERM. Terrace wrote, and the
    bit stayed on the changed file."""
    with flags_cleared_afterwards(both.roots):
        def setup(root):
            os.chmod(root, 0o777)
            write_file(j(root, "prog"), b"#!/bin/sh\n")
            os.chmod(j(root, "prog"), 0o4777)
            return set_flags(j(root, "prog"), on=FS_APPEND_FL)

        assert both(setup, expect=OK) == FS_APPEND_FL

        def append_as_nobody(root):
            def append():
                with opened(j(root, "prog"), os.O_WRONLY | os.O_APPEND) as fd:
                    os.write(fd, b"echo hi\n")
            run_as(NOBODY, NOBODY, append)
            return oct(stat.S_IMODE(os.stat(j(root, "prog")).st_mode)), read_file(j(root, "prog"))

        both(append_as_nobody, expect=errno.EPERM)
        assert both(lambda root: (oct(stat.S_IMODE(os.stat(j(root, "prog")).st_mode)),
                                  read_file(j(root, "prog"))),
                    expect=OK) == ("0o4777", b"#!/bin/sh\n")


def test_trusted_xattr_names_are_listed_to_privileged_callers_only_like_ext4(both):
    """The kernel passes a FUSE file system's listxattr answer on as it is;
    ext4 leaves `trusted.*` names out for callers without CAP_SYS_ADMIN,
    and Terrace listed them to everyone."""
    def names(root):
        os.chmod(root, 0o755)
        p = j(root, "f")
        write_file(p, b"x")
        os.setxattr(p, "trusted.overlay.opaque", b"y")
        os.setxattr(p, "user.open", b"1")
        return (sorted(os.listxattr(p)),
                sorted(run_as(NOBODY, NOBODY, os.listxattr, p)),
                run_as(NOBODY, NOBODY, lambda: len(os.listxattr(p))))

    assert both(names, expect=OK) == (["trusted.overlay.opaque", "user.open"], ["user.open"], 1)


def test_directory_flags_guard_names_like_ext4(both):
    with flags_cleared_afterwards(both.roots):
        def setup(root):
            os.mkdir(j(root, "d"))
            write_file(j(root, "d", "inside"), b"x")
            return set_flags(j(root, "d"), on=FS_IMMUTABLE_FL)

        assert both(setup, expect=OK) == FS_IMMUTABLE_FL
        both(lambda root: write_file(j(root, "d", "new"), b"x"), expect=errno.EPERM)
        both(lambda root: os.mkdir(j(root, "d", "sub")), expect=errno.EPERM)
        both(lambda root: os.unlink(j(root, "d", "inside")), expect=errno.EPERM)
        both(lambda root: os.rename(j(root, "d", "inside"), j(root, "out")), expect=errno.EPERM)
        both(lambda root: write_file(j(root, "d", "inside"), b"its files still change"),
             expect=OK)
        both(lambda root: set_flags(j(root, "d"), on=FS_APPEND_FL, off=FS_IMMUTABLE_FL),
             expect=OK)
        both(lambda root: write_file(j(root, "d", "new"), b"x"), expect=OK)
        both(lambda root: os.unlink(j(root, "d", "new")), expect=errno.EPERM)
        both(lambda root: sorted(os.listdir(j(root, "d"))), expect=OK)


def test_nodump_and_noatime_flags_round_trip_like_ext4(both):
    def flags(root):
        p = j(root, "f")
        write_file(p, b"x")
        on = set_flags(p, on=FS_NODUMP_FL | FS_NOATIME_FL)
        off = set_flags(p, off=FS_NODUMP_FL)
        return on, off

    assert both(flags, expect=OK) == (FS_NODUMP_FL | FS_NOATIME_FL, FS_NOATIME_FL)


# ---------------------------------------------------------------------------
# POSIX ACLs (setfacl/getfacl; design.md §5r)
# ---------------------------------------------------------------------------


def _acl_of(root: str, *names: str) -> str:
    """getfacl's text for `names` (numeric ids, paths relative to `root`)."""
    cp = subprocess.run(["getfacl", "-n", *names], cwd=root, capture_output=True, text=True)
    if cp.returncode != 0:
        raise AssertionError(f"getfacl {names}: {cp.stderr}")
    return cp.stdout


def _setfacl(root: str, *args: str) -> None:
    cp = subprocess.run(["setfacl", *args], cwd=root, capture_output=True, text=True)
    if cp.returncode != 0:
        err = re.search(r": (.+)$", cp.stderr.strip())
        code = {v: k for k, v in ((e, os.strerror(e)) for e in errno.errorcode)}.get(
            err.group(1) if err else "", errno.EIO)
        raise OSError(code, cp.stderr.strip())


def _mode(p: str) -> str:
    return oct(stat.S_IMODE(os.lstat(p).st_mode))


def test_access_acls_set_the_mode_grant_named_users_and_follow_chmod_like_ext4(both):
    def acls(root):
        f = j(root, "f")
        write_file(f, b"shared")
        os.chmod(f, 0o640)
        out = []
        _setfacl(root, "-m", f"u:{NOBODY}:rw", "f")
        out += [_acl_of(root, "f"), _mode(f)]
        # The named user may write now, through the kernel's ACL check.
        run_as(NOBODY, NOBODY, lambda: open(f, "ab").close())
        # A mask that takes write away denies it.
        _setfacl(root, "-m", "m::r", "f")
        out += [_acl_of(root, "f"), _mode(f)]
        try:
            run_as(NOBODY, NOBODY, lambda: open(f, "ab").close())
            out.append("write allowed")
        except OSError as e:
            out.append(errno.errorcode[e.errno])
        # chmod rewrites owner, mask and other; -b drops the extended entries.
        os.chmod(f, 0o604)
        out += [_acl_of(root, "f"), _mode(f)]
        _setfacl(root, "-b", "f")
        out += [_acl_of(root, "f"), _mode(f), os.listxattr(f)]
        # An ACL the mode says entirely is not kept as an xattr.
        _setfacl(root, "-m", "u::rwx,g::r,o::-", "f")
        out += [_mode(f), os.listxattr(f)]
        return out

    got = both(acls, expect=OK)
    assert "user:65534:rw-" in got[0] and got[1] == "0o660", got[:2]
    assert got[4] == "EACCES", got


def test_default_acls_pass_to_new_files_and_directories_instead_of_the_umask_like_ext4(both):
    def inherit(root):
        d = j(root, "d")
        os.mkdir(d, 0o755)
        _setfacl(root, "-d", "-m", f"u:{NOBODY}:rwx,g::rx,o::-", "d")
        old = os.umask(0o077)
        try:
            write_file(j(d, "file"), b"x")
            os.mkdir(j(d, "sub"))
            os.mkfifo(j(d, "fifo"), 0o666)
            os.symlink("file", j(d, "link"))
            fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o644)
            tmp_mode = oct(stat.S_IMODE(os.fstat(fd).st_mode))
            os.close(fd)
            # Without a default ACL the umask applies again.
            write_file(j(root, "plain"), b"y")
        finally:
            os.umask(old)
        return [_acl_of(root, "d", "d/file", "d/sub", "d/fifo"), _mode(j(d, "file")),
                _mode(j(d, "sub")), _mode(j(d, "fifo")), _mode(j(d, "link")), tmp_mode,
                _mode(j(root, "plain")), _acl_of(j(d, "sub"), ".")]

    got = both(inherit, expect=OK)
    assert got[1] == "0o640" and got[6] == "0o600", got


def test_acl_errors_like_ext4(both):
    def errors(root):
        write_file(j(root, "f"), b"x")
        out = []
        for args in (["-d", "-m", "u::rwx", "f"],          # a default ACL on a file
                     ["-m", "u:nosuchuser:rw", "f"]):        # setfacl refuses it itself
            try:
                _setfacl(root, *args)
                out.append("ok")
            except OSError as e:
                out.append(errno.errorcode.get(e.errno, str(e.errno)))
        # A malformed value straight through setxattr.
        try:
            os.setxattr(j(root, "f"), "system.posix_acl_access", b"\x02\x00\x00\x00\x01\x00")
            out.append("ok")
        except OSError as e:
            out.append(errno.errorcode[e.errno])
        return out

    both(errors, expect=OK)


def test_reads_through_an_o_noatime_open_leave_the_access_time_alone(both):
    """Backup tools (tar --atime-preserve=system, rsync --open-noatime) read
    so; an ordinary read after them still moves it (relatime: atime older
    than mtime)."""
    old = 946684800 * 10**9  # 2000-01-01

    def noatime_then_plain(root):
        p = j(root, "f")
        write_file(p, b"data " * 1000)
        os.utime(p, ns=(old, time.time_ns()))
        with opened(p, os.O_RDONLY | os.O_NOATIME) as fd:
            os.read(fd, 100)
        kept = os.stat(p).st_atime_ns == old
        with opened(p, os.O_RDONLY) as fd:
            os.read(fd, 100)
        moved = os.stat(p).st_atime_ns > old
        return kept, moved

    assert both(noatime_then_plain, expect=OK) == (True, True)
