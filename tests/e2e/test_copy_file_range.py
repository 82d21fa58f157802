"""copy_file_range(2) through a real mount (issue 21): results and contents
match the native file system (ext4) call for call; a block-aligned copy
shares the source's blocks, so `df` does not move; a write to either file
splits them; and shared blocks survive kill -9 of the daemon (fsck clean,
both files intact, space returned when both are deleted).

The kernel forwards copy_file_range to the daemon (FUSE_COPY_FILE_RANGE);
the core clones whole blocks (crates/core/src/ops_clone.rs) and copies the
rest. The set-ID side (an unprivileged copy into a set-ID file drops the
bits) is in test_posix_parity.py with the other modification paths.
"""

from __future__ import annotations

import json
import os
import subprocess

import helpers
from test_posix_parity import (  # noqa: F401 - fixtures used by name
    OK,
    both,
    j,
    parity_fs,
    pattern,
    reference_base,
    roots,
    write_file,
    opened,
)

BS = 4096
MiB = 1 << 20


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def copy_range(src: str, dst: str, count: int, off_src: int, off_dst: int) -> int:
    with opened(src, os.O_RDONLY) as s, opened(dst, os.O_WRONLY | os.O_CREAT, 0o644) as d:
        return os.copy_file_range(s, d, count, off_src, off_dst)


def copy_all(src: str, dst: str) -> int:
    """Copies the whole file with copy_file_range, looping on short counts."""
    total = 0
    with opened(src, os.O_RDONLY) as s, opened(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) as d:
        while True:
            n = os.copy_file_range(s, d, 1 << 30)
            if n == 0:
                return total
            total += n


def test_copy_file_range_gives_the_native_results_and_contents(both):
    """Aligned and unaligned copies, into holes and past the end, to the
    source's end, within one file, of nothing: the same counts, errors and
    bytes as ext4."""

    def copies(root):
        a, b = j(root, "a"), j(root, "b")
        write_file(a, pattern(40 * BS + 333, 1))
        write_file(b, pattern(10 * BS, 2))
        results = [
            copy_range(a, b, 8 * BS, 0, 0),  # aligned, inside b
            copy_range(a, b, 5 * BS, 4 * BS, 20 * BS),  # aligned, past b's end (hole between)
            copy_range(a, b, 3 * BS + 17, 1000, 7),  # unaligned
            copy_range(a, b, 1 << 20, 36 * BS, 30 * BS),  # to a's end (partial last block)
            copy_range(a, b, 100, 1 << 30, 0),  # past a's end: 0
            copy_range(a, b, 0, 0, 0),  # nothing
            copy_range(a, a, 4 * BS, 0, 60 * BS),  # within a, not overlapping
        ]
        c = j(root, "c")
        results.append(copy_all(a, c))
        try:
            copy_range(a, a, 4 * BS, 0, BS)  # overlapping ranges of one file
            results.append("no error")
        except OSError as e:
            results.append(e.errno)
        return results, [(len(read_file(p)), read_file(p)) for p in (a, b, c)]

    both(copies, expect=OK)


def test_a_copy_shares_blocks_so_df_does_not_move_and_a_write_splits_them(terrace_bin, pool, mountpoint):
    with helpers.mounted_pool(pool, mountpoint) as m:
        src, dst = j(m.path, "src"), j(m.path, "dst")
        helpers.write_pattern_file(src, 64 * MiB, seed=3)
        os.sync()
        free0 = os.statvfs(m.path).f_bfree * os.statvfs(m.path).f_frsize
        assert copy_all(src, dst) == 64 * MiB
        free1 = os.statvfs(m.path).f_bfree * os.statvfs(m.path).f_frsize
        assert free0 - free1 < 1 * MiB, f"a 64 MiB clone took {(free0 - free1) / MiB:.1f} MiB"
        assert helpers.sha256_file(src) == helpers.sha256_file(dst)
        assert os.stat(dst).st_blocks == os.stat(src).st_blocks
        status = helpers.terrace("status", m.path).stdout
        assert "shared by copies" in status and "saving 64.0 MiB" in status, status
        # A write to the copy takes new blocks and leaves the source alone.
        before = helpers.sha256_file(src)
        with open(dst, "r+b") as f:
            f.seek(10 * MiB)
            f.write(b"\xab" * MiB)
        assert helpers.sha256_file(src) == before
        with open(dst, "rb") as f:
            f.seek(10 * MiB)
            assert f.read(MiB) == b"\xab" * MiB
        free2 = os.statvfs(m.path).f_bfree * os.statvfs(m.path).f_frsize
        assert 0.9 * MiB < free1 - free2 < 3 * MiB, f"a 1 MiB write took {(free1 - free2) / MiB:.1f} MiB"
        # coreutils cp uses copy_file_range: it shares too.
        subprocess.run(["cp", src, j(m.path, "by-cp")], check=True)
        free3 = os.statvfs(m.path).f_bfree * os.statvfs(m.path).f_frsize
        assert free2 - free3 < 1 * MiB, f"cp of 64 MiB took {(free2 - free3) / MiB:.1f} MiB"
        assert helpers.sha256_file(j(m.path, "by-cp")) == before
    helpers.assert_fsck_clean(pool, "after clones")


def test_shared_blocks_survive_a_kill_and_are_freed_with_the_last_copy(terrace_bin, pool, mountpoint):
    m = helpers.mount(pool, mountpoint)
    try:
        src, dst = j(m.path, "src"), j(m.path, "dst")
        want = helpers.write_pattern_file(src, 16 * MiB, seed=4)
        free0 = os.statvfs(m.path).f_bfree
        copy_all(src, dst)
        # Both names durable; the clone itself committed when the call returned.
        fd = os.open(m.path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        m.kill()
    finally:
        helpers.lazy_unmount(mountpoint)
    helpers.assert_fsck_clean(pool, "after kill -9 with shared blocks")
    with helpers.mounted_pool(pool, mountpoint) as m:
        src, dst = j(m.path, "src"), j(m.path, "dst")
        assert helpers.sha256_file(src) == want
        assert helpers.sha256_file(dst) == want
        os.unlink(src)
        assert helpers.sha256_file(dst) == want
        os.unlink(dst)
        free = os.statvfs(m.path).f_bfree
        # Everything the 16 MiB took is back (within a few log blocks).
        assert free >= free0 + (16 * MiB // BS) - 16, (free, free0)
    helpers.assert_fsck_clean(pool, "after deleting both copies")


def test_a_file_and_its_cp_copy_take_one_copy_of_room_after_migration():
    """A `cp` shares the source's blocks on PM; migrating the files to the
    SSD keeps them shared (before, each file got its own copy there, and the
    room `df` had shown was gone)."""
    from helpers import temp_mountpoint, temp_pool_path, temp_ssd_image, terrace
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:128M", "--tier", f"ssd:{ssd}:512M")
        with helpers.mounted_pool(pool, mnt, "migration_threshold=95") as m:
            src, dst = j(str(mnt), "src"), j(str(mnt), "dst")
            want = helpers.write_pattern_file(src, 32 * MiB, seed=5)
            subprocess.run(["cp", src, dst], check=True)
            terrace("migrate", "--to", "ssd", mnt, src, dst)
            st = m.status()
            ssd_used = st["tiers"][1]["used"]
            assert ssd_used < 34 * MiB, f"the SSD holds {ssd_used / MiB:.1f} MiB for one 32 MiB file and its copy"
            assert st["migration"]["reshared_bytes"] >= 32 * MiB, st["migration"]
            assert helpers.sha256_file(src) == want and helpers.sha256_file(dst) == want
            where = json.loads(terrace("where", "--json", dst).stdout)["extents"]
            assert all(e["tier"] == "ssd" for e in where), where
        helpers.assert_fsck_clean(pool, "after moving shared blocks")


def test_a_kill_while_clones_follow_their_sources_to_the_ssd_loses_nothing():
    """kill -9 of the daemon while `terrace migrate` moves files and their
    `cp` copies (each copy remapped after its source moved): fsck is clean,
    every file and copy reads back, and a second migrate finishes with the
    copies still sharing (design.md §5k)."""
    import hashlib
    from helpers import temp_mountpoint, temp_pool_path, temp_ssd_image, terrace
    files = 160
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:1G", "--tier", f"ssd:{ssd}:1G")
        want = {}
        m = helpers.mount(pool, mnt, "placement_policy=pm-only,migration_threshold=99")
        try:
            os.mkdir(j(str(mnt), "a"))
            for k in range(files):
                data = os.urandom(MiB)
                with open(j(str(mnt), "a", f"f{k}"), "wb") as f:
                    f.write(data)
                want[f"a/f{k}"] = want[f"b/f{k}"] = hashlib.sha256(data).hexdigest()
            subprocess.run(["cp", "-r", j(str(mnt), "a"), j(str(mnt), "b")], check=True)
            os.sync()
            helpers.kill_daemon_during_migrate(m, ssd, 8192, "--quiet", "--to", "ssd")
        finally:
            helpers.lazy_unmount(mnt)
        helpers.assert_fsck_clean(pool, "after a kill while clones followed their sources")
        with helpers.mounted_pool(pool, mnt, "migration_threshold=99") as m:
            for name, digest in want.items():
                assert helpers.sha256_file(j(str(mnt), name)) == digest, name
            terrace("migrate", "--quiet", "--to", "ssd", mnt)
            used = m.status()["tiers"][1]["used"]
            # One copy of the data, plus at most the pairs the kill caught
            # between a source's move and its copy's remap (unshared then).
            assert used < (files + 16) * MiB, f"{used / MiB:.0f} MiB on the SSD for {files} MiB of data"
            for name, digest in want.items():
                assert helpers.sha256_file(j(str(mnt), name)) == digest, name
        helpers.assert_fsck_clean(pool, "after the second migrate")
