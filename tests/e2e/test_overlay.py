"""overlayfs on a Terrace mount (container storage: Docker's and Podman's
overlay drivers put their layers and upper directories on the host's file
system). overlayfs needs `RENAME_WHITEOUT`, trusted.* xattrs and d_type of
its upper file system; with them, a merged view over Terrace behaves as over
ext4, and what it wrote (whiteouts, opaque directories, copied-up files)
survives a kill -9 of the daemon and a new mount.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import subprocess
from pathlib import Path

import pytest

import helpers
from helpers import mounted_pool, run, temp_mountpoint, temp_pool_path, terrace

RENAME_WHITEOUT = 1 << 2
RENAME_EXCHANGE = 1 << 1
AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


def renameat2(src: Path, dst: Path, flags: int) -> None:
    r = _libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), str(src))


def whiteout_facts(p: Path) -> tuple:
    st = os.lstat(p)
    return (stat.S_ISCHR(st.st_mode), stat.S_IMODE(st.st_mode), os.major(st.st_rdev),
            os.minor(st.st_rdev), st.st_uid, st.st_nlink)


def exercise_whiteouts(root: Path) -> dict:
    """renameat2 with RENAME_WHITEOUT in `root`: what ext4 shows is the
    reference."""
    (root / "a").write_bytes(b"A")
    (root / "d").mkdir()
    renameat2(root / "a", root / "d" / "b", RENAME_WHITEOUT)
    out = {"whiteout": whiteout_facts(root / "a"),
           "moved": (root / "d" / "b").read_bytes()}
    (root / "c").write_bytes(b"C")
    with pytest.raises(OSError) as e:
        renameat2(root / "c", root / "d" / "b", RENAME_WHITEOUT | RENAME_EXCHANGE)
    out["exchange+whiteout"] = e.value.errno
    # Over an existing name, and without CAP_MKNOD (Linux allows whiteouts
    # without it since 5.8: an answer to compare, not a refusal to expect).
    renameat2(root / "c", root / "d" / "b", RENAME_WHITEOUT)
    out["replaced"] = ((root / "d" / "b").read_bytes(), whiteout_facts(root / "c"))
    (root / "e").write_bytes(b"E")
    cp = run(["setpriv", "--bounding-set=-mknod", "python3", "-c",
              "import ctypes,os,sys; l=ctypes.CDLL(None,use_errno=True);"
              f"r=l.renameat2(-100,b'{root}/e',-100,b'{root}/f',{RENAME_WHITEOUT});"
              "print(0 if r==0 else ctypes.get_errno())"])
    out["without CAP_MKNOD"] = int(cp.stdout.strip())
    out["names"] = sorted(os.listdir(root))
    return out


def test_rename_whiteout_leaves_the_whiteout_ext4_leaves():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        helpers.mkfs(pool, "128M")
        with mounted_pool(pool, mnt):
            (mnt / "w").mkdir()
            got = exercise_whiteouts(mnt / "w")
    ref_root = Path("/var/tmp") / helpers.unique_name("whiteout-ref")
    ref_root.mkdir()
    try:
        want = exercise_whiteouts(ref_root)
    finally:
        run(["rm", "-rf", str(ref_root)])
    assert got == want


@contextlib.contextmanager
def overlay(mnt: Path, tag: str):
    merged = mnt / f"merged{tag}"
    for d in (merged, mnt / f"upper{tag}", mnt / f"work{tag}"):
        d.mkdir(exist_ok=True)
    opts = f"lowerdir={mnt}/lower,upperdir={mnt}/upper{tag},workdir={mnt}/work{tag}"
    run(["mount", "-t", "overlay", "overlay", "-o", opts, str(merged)])
    try:
        yield merged
    finally:
        subprocess.run(["umount", str(merged)], capture_output=True)
        if helpers.is_mounted(merged):
            subprocess.run(["umount", "-l", str(merged)], capture_output=True)


def view(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out[rel] = "dir"
        for f in filenames:
            out[os.path.join(rel, f)] = Path(dirpath, f).read_bytes()
    return out


def test_an_overlay_over_terrace_merges_and_keeps_its_whiteouts_after_kill_9():
    if "overlay" not in Path("/proc/filesystems").read_text():
        run(["modprobe", "overlay"], check=False)
        if "overlay" not in Path("/proc/filesystems").read_text():
            pytest.skip("no overlayfs in this kernel")
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:128M")
        with mounted_pool(pool, mnt) as m:
            lower = mnt / "lower"
            (lower / "etc").mkdir(parents=True)
            (lower / "etc" / "access.conf").write_bytes(b"salts\n")
            (lower / "keep").write_bytes(b"lower keep\n")
            (lower / "gone").write_bytes(b"deleted in the upper\n")
            (lower / "olddir" / "sub").mkdir(parents=True)
            (lower / "olddir" / "sub" / "x").write_bytes(b"x")
            with overlay(mnt, "0") as merged:
                # generic/631's steps, then a copy-up, a delete and an opaque dir.
                os.rename(merged / "etc" / "access.conf", merged / "etc" / "access.conf.bak")
                (merged / "etc" / "access.conf").touch()
                (merged / "keep").write_bytes(b"upper keep\n")
                os.unlink(merged / "gone")
                run(["rm", "-rf", str(merged / "olddir")])
                (merged / "olddir").mkdir()
                (merged / "olddir" / "new").write_bytes(b"new")
                want = view(merged)
            assert (lower / "gone").read_bytes() == b"deleted in the upper\n", "lower untouched"
            wo = os.lstat(mnt / "upper0" / "gone")
            assert stat.S_ISCHR(wo.st_mode) and wo.st_rdev == 0, "a whiteout in the upper"
            m.kill()
        helpers.lazy_unmount(mnt)
        with mounted_pool(pool, mnt):
            with overlay(mnt, "0") as merged:
                assert view(merged) == want
        helpers.assert_fsck_clean(pool, "after overlay use and a crash")
