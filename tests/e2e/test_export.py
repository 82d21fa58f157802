"""File handles (name_to_handle_at / open_by_handle_at), what an NFS
re-export of a Terrace mount needs (xfstests generic/426, 467, 477, 756,
777): a handle opens its file after the kernel dropped its caches and after
a remount, and a deleted file's handle is stale even when its inode slot
was reused."""

from __future__ import annotations

import ctypes
import errno
import os

import helpers

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
MAX_HANDLE_SZ = 128


class FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                ("f_handle", ctypes.c_ubyte * MAX_HANDLE_SZ)]


def handle_of(path) -> FileHandle:
    h = FileHandle()
    h.handle_bytes = MAX_HANDLE_SZ
    mount_id = ctypes.c_int()
    AT_FDCWD = -100
    if _libc.name_to_handle_at(AT_FDCWD, os.fsencode(path), ctypes.byref(h),
                               ctypes.byref(mount_id), 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return h


def open_by_handle(mount_dir, h: FileHandle, flags=os.O_RDONLY) -> int:
    mfd = os.open(mount_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = _libc.open_by_handle_at(mfd, ctypes.byref(h), flags)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return fd
    finally:
        os.close(mfd)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")  # dentries and inodes: the kernel forgets the files


def read_by_handle(mnt, h) -> bytes:
    fd = open_by_handle(mnt, h)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def test_handles_open_files_after_the_kernel_forgot_them_and_after_a_remount():
    with helpers.temp_pool_path() as pool, helpers.temp_mountpoint() as mnt:
        helpers.mkfs(pool, "64M")
        with helpers.mounted_pool(pool, mnt):
            (mnt / "d").mkdir()
            files = {}
            for i in range(20):
                p = mnt / "d" / f"f{i}"
                p.write_bytes(b"file %d\n" % i)
                files[p] = handle_of(p)
            os.link(mnt / "d" / "f0", mnt / "linked")
            dh = handle_of(mnt / "d")
            drop_caches()
            for p, h in files.items():
                assert read_by_handle(mnt, h) == p.read_bytes(), p
            fd = open_by_handle(mnt, dh, os.O_RDONLY | os.O_DIRECTORY)
            os.close(fd)
        with helpers.mounted_pool(pool, mnt):
            drop_caches()
            for p, h in files.items():
                assert read_by_handle(mnt, h) == p.read_bytes(), f"{p} after a remount"


def test_the_handle_of_a_deleted_file_is_stale_even_when_its_slot_is_reused():
    with helpers.temp_pool_path() as pool, helpers.temp_mountpoint() as mnt:
        helpers.mkfs(pool, "64M")
        with helpers.mounted_pool(pool, mnt):
            p = mnt / "old"
            p.write_bytes(b"old")
            h = handle_of(p)
            ino = os.stat(p).st_ino
            os.unlink(p)
            drop_caches()
            reused = None
            for i in range(50):  # a new file gets the freed slot, generation + 1
                q = mnt / f"new{i}"
                q.write_bytes(b"new")
                if os.stat(q).st_ino == ino:
                    reused = q
                    break
            assert reused is not None, "the freed inode slot was not reused"
            drop_caches()
            try:
                fd = open_by_handle(mnt, h)
                os.close(fd)
                raise AssertionError("a deleted file's handle opened another file")
            except OSError as e:
                assert e.errno == errno.ESTALE, e
