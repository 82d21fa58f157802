"""Writes that bypass the kernel's page cache (O_DIRECT, write-only opens)
make the daemon drop the kernel's cached pages of the range before it
acknowledges them. The kernel waits for the page locks of that range, and a
page stays locked while its own read request waits for the daemon: the
invalidation must never hold a request thread, or every thread ends up
waiting for pages only a free thread could read (xfstests generic/095 hung
the mount this way, with fio's direct writes beside buffered and mmap I/O).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import helpers
from helpers import mounted_pool, temp_mountpoint, temp_pool_path, terrace

# generic/095's job mix: direct and buffered reads, direct and buffered
# writes through sync, libaio, posixaio, splice and mmap engines, all on the
# same two files.
FIO_JOBS = """
[global]
bs=8k
iodepth=8
iodepth_batch=4
randrepeat=1
size=1m
directory={dir}
numjobs=4
loops={loops}
[job1]
ioengine=sync
bs=4k
direct=1
rw=randread
filename=file1:file2
[job2]
ioengine=libaio
rw=randwrite
direct=1
filename=file1:file2
[job3]
bs=4k
ioengine=posixaio
rw=randwrite
direct=1
filename=file1:file2
[job4]
ioengine=splice
direct=1
rw=randwrite
filename=file1:file2
[job5]
bs=1k
ioengine=sync
rw=randread
filename=file1:file2
[job6]
ioengine=posixaio
rw=randwrite
filename=file1:file2
[job7]
ioengine=splice
rw=randwrite
filename=file1:file2
[job8]
ioengine=mmap
rw=randwrite
bs=1k
filename=file1:file2
[job9]
ioengine=mmap
rw=randwrite
direct=1
filename=file1:file2
"""


def abort_fuse_connection(mnt: Path) -> None:
    """Ends a hung FUSE mount's requests (fusectl), so the test can clean up."""
    conns = Path("/sys/fs/fuse/connections")
    if not any(conns.iterdir()) if conns.exists() else True:
        subprocess.run(["mount", "-t", "fusectl", "none", str(conns)], check=False)
    dev = os.stat(mnt).st_dev
    with contextlib.suppress(OSError):
        (conns / str(os.minor(dev)) / "abort").write_text("1")


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (make setup installs it)")
def test_direct_writes_beside_cached_reads_and_mappings_never_hang_the_mount(tmp_path):
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:256M")
        with mounted_pool(pool, mnt):
            job = tmp_path / "mix.fio"
            job.write_text(FIO_JOBS.format(dir=mnt, loops=10))
            fio = subprocess.Popen(["fio", str(job), "--ignore_error=,EIO",
                                    f"--output={tmp_path / 'fio.out'}"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                out, _ = fio.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                # The mount hung: free the stuck processes, then fail.
                abort_fuse_connection(mnt)
                fio.kill()
                fio.communicate(timeout=60)
                pytest.fail("fio's mixed direct/buffered/mmap I/O hung the mount for 240 s")
            assert fio.returncode == 0, out + (tmp_path / "fio.out").read_text()
            # The daemon still answers and the files read back whole (each
            # job's 1 MiB is spread over the two files).
            for name in ("file1", "file2"):
                size = (mnt / name).stat().st_size
                assert size == 1 << 19, f"{name}: {size} bytes"
                assert len((mnt / name).read_bytes()) == size
            terrace("status", mnt)
        helpers.assert_fsck_clean(pool, "after the mixed I/O")
