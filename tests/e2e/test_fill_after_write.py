"""The kernel's page cache is filled with what a write-only descriptor
wrote once it is closed (issue 16: readers of files just written, such as
RocksDB's reads of the tables it wrote, with read-ahead off), and stays
coherent while a fill runs: a write, truncate or hole punch made during a
fill is seen by every later reader, and a reader that opens during a fill
reads the file as written.
"""

from __future__ import annotations

import mmap
import os
import random
import subprocess
import sys
import threading
import time

import helpers
from helpers import mounted_pool, temp_mountpoint, temp_pool_path, terrace
from test_page_cache import other_process_reads, punch, read_all

MiB = 1 << 20


def write_through_a_write_only_descriptor(path, data: bytes, piece: int = 65536 + 7) -> None:
    """Unaligned pieces, as an appender writes: each one request (direct I/O)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for off in range(0, len(data), piece):
            os.pwrite(fd, data[off:off + piece], off)
    finally:
        os.close(fd)


# This VM runs DAMON with a `pageout` scheme (/sys/kernel/mm/damon/admin:
# kdamond on physical memory, unmapped file pages in regions idle for 12
# aggregations of 5 s): it reclaims clean page-cache pages that nobody has
# touched, within seconds of their caching when they land in a region of
# memory that was idle, whether a fill stored them or a read brought them in
# (traced with the `mm_filemap_delete_from_page_cache` event: every page of
# a filled file that left the cache before the unmount left it in
# `damon_pa_apply_scheme`; measured up to 344 KiB of one 336 KiB file, most
# files keep every page). So the tests below take the daemon's counters for
# what the fill stored, and check the kernel's side where it can be
# checked: a reader fetches from the daemon no more than the pages the page
# cache lacked just before it read, plus what the reclaimer may take
# meanwhile.
PAGES_LOST_ALLOWANCE = 16 * 4096


def wait_for_fills(m, files, before: int = 0) -> None:
    """Waits until the daemon counts a whole fill of each file of `files`
    since its status showed `before` fills (a fill that never comes, or
    stops early, fails here)."""
    want = before + len(files)
    assert helpers.wait_until(lambda: m.status()["cache_fills"] >= want, 10), \
        (m.status()["cache_fills"], want)
    st = m.status()
    assert st["cache_fills"] == want, (st["cache_fills"], want)


def assert_read_from_the_page_cache(m, files) -> None:
    """Every file of `files` reads back as written, and a reader fetches
    from the daemon only the pages the kernel's page cache lacked just
    before the read (a few more may be reclaimed meanwhile); most pages are
    still there (else this would check nothing)."""
    fetched = []
    resident_total = 0
    for path, data in files:
        resident = resident_bytes(path)
        resident_total += resident
        before = m.status()["bytes_read"]
        assert other_process_reads(path) == data
        n = m.status()["bytes_read"] - before
        fetched.append((path.name, n, len(data) - resident))
    over = [(name, n, lacked) for name, n, lacked in fetched if n > lacked + PAGES_LOST_ALLOWANCE]
    assert not over, f"bytes of files just written read from the daemon (name, read, lacked): {over}"
    total = sum(len(d) for _, d in files)
    assert resident_total >= total // 4, \
        f"only {resident_total} of {total} bytes were in the page cache when read"


def resident_bytes(path) -> int:
    """Bytes of `path` in the kernel's page cache (util-linux `fincore`)."""
    cp = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                        capture_output=True, text=True, check=True)
    return int(cp.stdout.strip() or 0)


def test_files_a_writer_closed_are_read_without_a_request_to_the_daemon():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:256M")
        with mounted_pool(pool, mnt) as m:
            files = []
            for k in range(6):
                data = os.urandom(3 * MiB + 123 * k)
                write_through_a_write_only_descriptor(mnt / f"f{k}", data)
                files.append((mnt / f"f{k}", data))
            # The releases may still be on their way to the daemon (the
            # kernel sends them after close returned), and the fills take
            # a while on a loaded machine: wait for them.
            atimes = [os.stat(path).st_atime_ns for path, _ in files]
            wait_for_fills(m, files)
            assert_read_from_the_page_cache(m, files)
            for (path, data), atime in zip(files, atimes):
                # relatime: the first read-only open after the write (the
                # reader's, or fincore's above) updated the access time.
                assert os.stat(path).st_atime_ns != atime, path


def test_a_reader_that_opens_just_after_the_writer_closed_does_not_cancel_the_fill():
    """The kernel sends a writer's release after close() returned, so an
    open right after the close may reach the daemon first: the fill after
    the writer is still due (it was skipped, and every later read of the
    file went to the daemon)."""
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:256M")
        with mounted_pool(pool, mnt, "fill_after_write=always") as m:
            files = []
            for k in range(64):
                data = os.urandom(256 * 1024 + 4096 * k)
                path = mnt / f"f{k}"
                write_through_a_write_only_descriptor(path, data)
                os.close(os.open(path, os.O_RDONLY))
                files.append((path, data))
            wait_for_fills(m, files)
            assert_read_from_the_page_cache(m, files)


def test_fills_stop_for_a_writer_that_changes_files_before_anyone_reads_them():
    """auto: a workload whose fills are wasted (each file is rewritten
    before it is read) stops paying for them; never: no fill at all."""
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:256M")
        with mounted_pool(pool, mnt) as m:
            data = os.urandom(256 << 10)
            for k in range(40):
                write_through_a_write_only_descriptor(mnt / "churn", data)
                # Let the fill end before the next rewrite wastes it.
                time.sleep(0.01)
            for k in range(4):
                write_through_a_write_only_descriptor(mnt / f"late{k}", data)
            time.sleep(0.3)
            before = m.status()["reads"]
            for k in range(4):
                assert other_process_reads(mnt / f"late{k}") == data
            assert m.status()["reads"] > before, "fills went on though none was ever used"
        with mounted_pool(pool, mnt, "fill_after_write=never") as m:
            write_through_a_write_only_descriptor(mnt / "f", data)
            time.sleep(0.3)
            before = m.status()["reads"]
            assert other_process_reads(mnt / "f") == data
            assert m.status()["reads"] > before, "fill_after_write=never filled"


def test_files_over_the_limit_or_written_with_o_direct_are_not_filled():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:512M")
        with mounted_pool(pool, mnt, "fill_after_write=always") as m:
            big = os.urandom(129 * MiB)
            write_through_a_write_only_descriptor(mnt / "big", big, piece=MiB)
            time.sleep(0.3)
            before = m.status()["reads"]
            assert other_process_reads(mnt / "big") == big
            assert m.status()["reads"] > before, "a file over 128 MiB was filled"

            buf = mmap.mmap(-1, MiB)  # page-aligned, as O_DIRECT wants
            buf.write(os.urandom(MiB))
            fd = os.open(mnt / "direct", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
            try:
                assert os.pwritev(fd, [buf], 0) == MiB
            finally:
                os.close(fd)
            time.sleep(0.3)
            before = m.status()["reads"]
            assert other_process_reads(mnt / "direct") == bytes(buf)
            assert m.status()["reads"] > before, "a file written with O_DIRECT was filled"


def test_changes_made_while_a_fill_runs_are_seen_by_every_later_reader():
    rng = random.Random(16)
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:512M")
        # always: the fills this test races are never skipped for not paying.
        with mounted_pool(pool, mnt, "fill_after_write=always"):
            path = mnt / "racy"
            for round_ in range(40):
                model = bytearray(os.urandom(16 * MiB))
                other = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    write_through_a_write_only_descriptor(path, bytes(model), piece=MiB)
                    # The close above starts a fill of 16 pieces; change the
                    # file while it runs (or just before or after).
                    time.sleep(rng.random() * 0.004)
                    what = round_ % 4
                    if what == 0:
                        # Large enough to overlap the piece being stored.
                        off = rng.randrange(0, len(model) - 4096)
                        new = os.urandom(rng.randrange(1, 6 * MiB))
                        new = new[:len(model) - off]
                        os.pwrite(other, new, off)
                        model[off:off + len(new)] = new
                    elif what == 1:
                        size = rng.randrange(0, len(model))
                        os.ftruncate(other, size)
                        del model[size:]
                    elif what == 2:
                        off = rng.randrange(0, len(model) // 4096) * 4096
                        length = min(rng.randrange(1, 64) * 4096, len(model) - off)
                        punch(other, off, length)
                        model[off:off + length] = bytes(length)
                    else:
                        tail = os.urandom(rng.randrange(1, 3 * MiB))
                        os.pwrite(other, tail, len(model))
                        model += tail
                finally:
                    os.close(other)
                fd = os.open(path, os.O_RDONLY)
                try:
                    got = read_all(fd)
                finally:
                    os.close(fd)
                assert len(got) == len(model), (round_, what, len(got), len(model))
                assert got == bytes(model), f"round {round_} (change {what}): stale bytes after a fill"
                assert other_process_reads(path) == bytes(model)


def test_a_reader_that_opens_while_a_fill_runs_reads_the_file_as_written():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:512M")
        with mounted_pool(pool, mnt, "fill_after_write=always"):
            for k in range(12):
                path = mnt / f"r{k}"
                data = os.urandom(32 * MiB)
                got: list[bytes] = []
                write_through_a_write_only_descriptor(path, data, piece=MiB)
                # Readers race the fill the close started; one of them
                # writes through its read-write descriptor, which must wait
                # for the fill's end (a store after it would bring back the
                # old bytes).
                def reader():
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        got.append(read_all(fd))
                    finally:
                        os.close(fd)
                ts = [threading.Thread(target=reader) for _ in range(2)]
                for t in ts:
                    t.start()
                fd = os.open(path, os.O_RDWR)
                try:
                    os.pwrite(fd, b"Z" * 5000, 7 * MiB + 11)
                finally:
                    os.close(fd)
                for t in ts:
                    t.join(60)
                model = bytearray(data)
                model[7 * MiB + 11:7 * MiB + 5011] = b"Z" * 5000
                for g in got:
                    # Each reader saw the file before or after the write,
                    # never older bytes after newer ones.
                    assert g in (data, bytes(model)) or (
                        g[:7 * MiB] == data[:7 * MiB] and g[8 * MiB:] == data[8 * MiB:]
                    ), k
                assert other_process_reads(path) == bytes(model), f"file {k}: the write was lost from the cache"
