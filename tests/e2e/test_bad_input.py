"""Bad input and full pools: every user mistake gives a one-line error and a
non-zero exit, never a panic and never a write to the pool; a full pool fails
with ENOSPC and loses nothing already written.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

import helpers
from helpers import assert_clean_error, sha256_file, terrace

SB_A, SB_B = 0, 4096  # superblock copies: blocks 0 and 1 (docs/design.md)
SB_VERSION_OFF = 8  # u32 format version
SB_CRC_OFF = 4092  # crc32c over bytes [0, 4092) of the copy
MiB = 1 << 20


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def attempt_mount(pool, mnt, *extra) -> subprocess.CompletedProcess:
    """Run `terrace mount POOL MNT --daemon` expecting failure; if it mounted
    anyway, unmount at once so the test cleans up whatever the outcome."""
    cp = terrace("mount", pool, mnt, "--daemon", *extra, check=False, timeout=60)
    if cp.returncode == 0 or helpers.is_mounted(mnt):
        m = helpers.Mount(Path(pool), Path(mnt))
        helpers.unmount(m)
    return cp


def flip_bytes(path, offset: int, count: int = 4) -> None:
    """Invert `count` bytes at `offset`."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(count)
        f.seek(offset)
        f.write(bytes(x ^ 0xFF for x in b))


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """crc32c (Castagnoli), as used by the on-media format."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def set_superblock_version(path, version: int) -> None:
    """Rewrite the format version of both superblock copies, with valid checksums."""
    with open(path, "r+b") as f:
        for base in (SB_A, SB_B):
            f.seek(base)
            block = bytearray(f.read(4096))
            struct.pack_into("<I", block, SB_VERSION_OFF, version)
            struct.pack_into("<I", block, SB_CRC_OFF, crc32c(bytes(block[:SB_CRC_OFF])))
            f.seek(base)
            f.write(block)


def write_fsynced(path, data: bytes) -> None:
    """Create `path` with `data` and fsync it; OSError (ENOSPC) propagates."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------------------
# mount: bad pools, bad paths
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 100, 8 * MiB], ids=["empty", "100B", "8MiB"])
def test_mounting_random_bytes_fails_cleanly_and_leaves_the_file_unchanged(pool_path, mountpoint, size):
    pool_path.write_bytes(os.urandom(size))
    before = sha256_file(pool_path)
    cp = attempt_mount(pool_path, mountpoint)
    assert_clean_error(cp, mentions=[str(pool_path)])
    assert sha256_file(pool_path) == before, "mount attempted on a non-pool wrote to it"
    assert not helpers.is_mounted(mountpoint)


def test_mounting_a_directory_as_pool_fails_cleanly(mountpoint, tmp_path):
    cp = attempt_mount(tmp_path, mountpoint)
    assert_clean_error(cp, mentions=[str(tmp_path)])


def test_mounting_a_pool_with_both_superblocks_corrupted_fails_cleanly(pool, mountpoint):
    flip_bytes(pool, SB_A + 100)
    flip_bytes(pool, SB_B + 100)
    before = sha256_file(pool)
    cp = attempt_mount(pool, mountpoint)
    assert_clean_error(cp, mentions=[str(pool)])
    assert sha256_file(pool) == before, "mount attempted on a corrupted pool wrote to it"
    fs = helpers.fsck(pool)
    assert fs.returncode in (1, 2) and not helpers.looks_like_panic(fs), \
        helpers.describe(fs, "fsck must report a corrupted superblock")
    assert sha256_file(pool) == before, "fsck without --repair wrote to the pool"


@pytest.mark.parametrize("copy", [SB_A, SB_B], ids=["copy-A", "copy-B"])
def test_one_corrupted_superblock_copy_is_survivable(pool, mountpoint, copy):
    with helpers.mounted_pool(pool, mountpoint):
        write_fsynced(mountpoint / "kept", b"before corruption")
    flip_bytes(pool, copy + 100)
    with helpers.mounted_pool(pool, mountpoint):
        assert read(mountpoint / "kept") == b"before corruption"


def test_mounting_a_newer_format_version_fails_cleanly(pool, mountpoint):
    set_superblock_version(pool, 99)
    before = sha256_file(pool)
    cp = attempt_mount(pool, mountpoint)
    msg = assert_clean_error(cp, mentions=[str(pool)])
    assert "version" in msg.lower(), f"the error should say the format version is unsupported: {msg!r}"
    assert sha256_file(pool) == before


def test_mounting_a_missing_pool_fails_cleanly_and_creates_nothing(pool_path, mountpoint):
    cp = attempt_mount(pool_path, mountpoint)
    assert_clean_error(cp, mentions=[str(pool_path)])
    assert not pool_path.exists(), "mount created the missing pool file"


def test_mounting_on_a_missing_mountpoint_fails_cleanly(pool, tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    cp = attempt_mount(pool, missing)
    assert_clean_error(cp, mentions=[str(missing)])


def test_mounting_on_a_mountpoint_in_use_fails_and_keeps_the_first_mount(terrace_mount):
    mnt = terrace_mount.path
    write_fsynced(mnt / "first", b"first mount")
    with helpers.temp_pool_path("second") as second:
        helpers.mkfs(second, "64M")
        before = sha256_file(second)
        cp = terrace("mount", second, mnt, "--daemon", check=False, timeout=60)
        stacked = [m for m, _ in helpers.mounts() if m == str(mnt)]
        if len(stacked) > 1:  # it mounted on top of the first: detach the top one only
            subprocess.run(["umount", "-l", str(mnt)], check=False)
            for pid in helpers.find_pids_with_arg(str(second)):
                helpers.kill_pid(pid)
        assert len(stacked) == 1, "a second pool was mounted on top of a live mount"
        assert_clean_error(cp, mentions=[str(mnt)])
        assert sha256_file(second) == before
    assert read(mnt / "first") == b"first mount"


def test_mounting_a_pool_that_is_already_mounted_fails(terrace_mount):
    write_fsynced(terrace_mount.path / "f", b"in use")
    with helpers.temp_mountpoint("second") as other:
        cp = attempt_mount(terrace_mount.pool, other)
        assert_clean_error(cp, mentions=[str(terrace_mount.pool)])
    assert read(terrace_mount.path / "f") == b"in use"


# ---------------------------------------------------------------------------
# mkfs: refusing to overwrite, validating tier specs
# ---------------------------------------------------------------------------


def test_mkfs_refuses_to_overwrite_a_pool_without_force(pool, mountpoint):
    with helpers.mounted_pool(pool, mountpoint):
        write_fsynced(mountpoint / "precious", b"data")
    before = sha256_file(pool)
    cp = terrace("mkfs", "--tier", f"pm:{pool}:256M", check=False)
    assert_clean_error(cp, mentions=[str(pool)])
    assert sha256_file(pool) == before, "mkfs without --force modified an existing pool"
    terrace("mkfs", "--tier", f"pm:{pool}:256M", "--force")
    with helpers.mounted_pool(pool, mountpoint):
        assert os.listdir(mountpoint) == [], "a pool formatted with --force must be empty"


def test_mkfs_refuses_a_file_holding_ext4_without_force(pool_path):
    with open(pool_path, "wb") as f:
        f.truncate(64 * MiB)
    helpers.run(["mkfs.ext4", "-q", "-F", str(pool_path)])
    before = sha256_file(pool_path)
    cp = terrace("mkfs", "--tier", f"pm:{pool_path}:64M", check=False)
    assert_clean_error(cp, mentions=[str(pool_path)])
    assert sha256_file(pool_path) == before, "mkfs without --force overwrote an ext4 image"
    terrace("mkfs", "--tier", f"pm:{pool_path}:64M", "--force")


BAD_TIER_SPECS = {
    "too-small": ["pm:{p}:12K"],
    "unaligned": ["pm:{p}:1000"],
    "not-a-number": ["pm:{p}:lots"],
    "zero": ["pm:{p}:0"],
    "negative": ["pm:{p}:-1G"],
    "no-size-for-new-file": ["pm:{p}"],
    "unknown-kind": ["nvme:{p}:1G"],
    "no-pm-tier": ["ssd:{p}:1G"],
    "two-pm-tiers": ["pm:{p}:64M", "pm:{p}.2:64M"],
    "empty-path": ["pm::64M"],
}


@pytest.mark.parametrize("specs", list(BAD_TIER_SPECS.values()), ids=list(BAD_TIER_SPECS))
def test_mkfs_rejects_invalid_tier_specs_with_a_clear_error(pool_path, specs):
    args = []
    for s in specs:
        args += ["--tier", s.format(p=pool_path)]
    cp = terrace("mkfs", *args, check=False)
    assert_clean_error(cp)
    for extra in ("", ".2"):
        leftover = Path(str(pool_path) + extra)
        assert not leftover.exists(), f"mkfs failed but left {leftover} behind"


def test_mkfs_without_any_tier_fails_with_usage(terrace_bin):
    cp = terrace("mkfs", check=False)
    assert_clean_error(cp, one_line=False)


def test_mkfs_with_too_many_inodes_for_the_size_fails_cleanly(pool_path):
    cp = terrace("mkfs", "--tier", f"pm:{pool_path}:4M", "--inodes", "1000000", check=False)
    assert_clean_error(cp)


def test_mkfs_on_a_tiny_file_says_how_much_it_holds(pool_path):
    pool_path.write_bytes(b"abcdef")
    cp = terrace("mkfs", "--tier", f"pm:{pool_path}", check=False)
    assert_clean_error(cp, mentions=["the file holds 6 B"])
    assert pool_path.read_bytes() == b"abcdef"


def test_a_failed_mkfs_leaves_no_tier_file_it_created(pool_path):
    """A block tier larger than its file system can hold a file of (ext4:
    16 TiB) fails at its header; the image mkfs had just created goes."""
    import helpers
    with helpers.temp_ssd_image("huge") as img:
        img.unlink(missing_ok=True)
        cp = terrace("mkfs", "--force", "--tier", f"pm:{pool_path}:16M",
                     "--tier", f"ssd:{img}:100T", check=False)
        if cp.returncode == 0:
            pytest.skip("this file system holds a 100 TiB file: nothing fails here")
        assert_clean_error(cp, mentions=[str(img)], one_line=False)
        assert not img.exists(), "the failed mkfs left the tier image behind"


# ---------------------------------------------------------------------------
# full pools
# ---------------------------------------------------------------------------


@pytest.mark.pool(size="64M")
def test_full_pool_fails_with_enospc_and_keeps_fsynced_files(pool, terrace_mount):
    mnt = terrace_mount.path
    written: dict[str, bytes] = {}
    failure = None
    for i in range(1000):  # 64M pool: ENOSPC long before 1000 MiB
        data = os.urandom(MiB)
        name = f"file{i:04d}"
        try:
            write_fsynced(mnt / name, data)
        except OSError as e:
            failure = e
            break
        written[name] = data
    assert failure is not None, "wrote 1000 MiB into a 64 MiB pool without an error"
    assert failure.errno == errno.ENOSPC, f"expected ENOSPC, got {errno.errorcode.get(failure.errno)}"
    assert len(written) >= 20, f"only {len(written)} MiB fit in a 64 MiB pool"

    for name, data in written.items():
        assert read(mnt / name) == data, f"{name} (fsync'd before the pool filled) changed"
    # Still full: small writes and metadata operations fail cleanly too.
    try:
        for k in range(100):
            write_fsynced(mnt / f"small{k}", os.urandom(4096))
    except OSError as e:
        assert e.errno == errno.ENOSPC, f"expected ENOSPC, got {errno.errorcode.get(e.errno)}"
    # Freeing space makes room again.
    for name in list(written)[:4]:
        os.unlink(mnt / name)
        del written[name]
    for k in range(100):
        if (mnt / f"small{k}").exists():
            os.unlink(mnt / f"small{k}")
    write_fsynced(mnt / "after-free", b"x" * 65536)
    written["after-free"] = b"x" * 65536
    for name, data in written.items():
        assert read(mnt / name) == data

    assert helpers.unmount(terrace_mount), "clean unmount of a full pool failed"
    helpers.assert_fsck_clean(pool, "after filling the pool")
    with helpers.mounted_pool(pool, mnt):
        for name, data in written.items():
            assert read(mnt / name) == data, f"{name} changed across remount"


@pytest.mark.pool(size="8M", inodes=64)
def test_files_beyond_the_first_inode_table_grow_it_and_a_full_pool_keeps_them(pool, terrace_mount):
    mnt = terrace_mount.path
    first = os.statvfs(mnt)
    assert first.f_files > 64 * 4, f"df -i counts the slots the table can grow by: {first}"
    created = []
    failure = None
    for i in range(5000):
        try:
            write_fsynced(mnt / f"f{i}", str(i).encode())
        except OSError as e:
            failure = e
            break
        created.append(i)
    # 63 slots at mkfs: the table grew (design.md §3.7) until the 8 MiB of
    # PM were full of the files' data blocks and logs.
    assert len(created) > 1000, f"only {len(created)} files before {failure!r}"
    assert failure is not None and failure.errno == errno.ENOSPC, \
        f"expected ENOSPC once PM is full, got {failure!r}"
    for i in created:
        assert read(mnt / f"f{i}") == str(i).encode()
    for i in created[:10]:
        os.unlink(mnt / f"f{i}")
    write_fsynced(mnt / "again", b"room again")
    st = os.statvfs(mnt)
    # In use: the root and every name (the file whose write failed too).
    assert st.f_files - st.f_ffree == len(os.listdir(mnt)) + 1
    assert helpers.unmount(terrace_mount)
    helpers.assert_fsck_clean(pool, "after growing the inode table")
    with helpers.mounted_pool(pool, mnt):
        for i in created[10:]:
            assert read(mnt / f"f{i}") == str(i).encode()
        assert read(mnt / "again") == b"room again"


# ---------------------------------------------------------------------------
# the CLI itself
# ---------------------------------------------------------------------------

HELP_MUST_MENTION = {
    "": ["mkfs", "mount", "umount", "status", "fsck"],
    "mkfs": ["--tier", "--force", "--inodes"],
    "mount": ["--daemon", "allow_other"],
    "umount": [],
    "status": ["--json"],
    "fsck": ["--repair", "--json"],
}


@pytest.mark.parametrize("sub", list(HELP_MUST_MENTION), ids=[s or "terrace" for s in HELP_MUST_MENTION])
def test_help_of_every_subcommand_exits_0_and_shows_an_example(terrace_bin, sub):
    cp = terrace(*([sub] if sub else []), "--help", check=False)
    assert cp.returncode == 0, helpers.describe(cp, "--help failed")
    text = cp.stdout
    assert "example" in text.lower(), f"`terrace {sub} --help` shows no example:\n{text}"
    for word in HELP_MUST_MENTION[sub]:
        assert word in text, f"`terrace {sub} --help` does not explain {word}:\n{text}"


def test_unknown_subcommand_is_a_usage_error(terrace_bin):
    cp = terrace("frobnicate", check=False)
    assert cp.returncode == 2, helpers.describe(cp, "expected exit status 2 (usage error)")
    assert not helpers.looks_like_panic(cp)


def test_umount_of_a_directory_that_is_not_mounted_fails_cleanly(mountpoint):
    cp = terrace("umount", mountpoint, check=False)
    assert_clean_error(cp, mentions=[str(mountpoint)])


def test_status_of_a_directory_that_is_not_terrace_fails_cleanly(mountpoint):
    cp = terrace("status", mountpoint, check=False)
    assert_clean_error(cp, mentions=[str(mountpoint)])


def test_status_reports_a_live_mount_as_text_and_json(terrace_mount):
    text = terrace("status", terrace_mount.path)
    assert text.stdout.strip(), "status printed nothing"
    status = terrace_mount.status()
    assert isinstance(status, dict) and status, f"status --json gave {status!r}"


def test_fsck_of_a_fresh_pool_is_clean_with_exit_0_and_valid_json(pool):
    helpers.assert_fsck_clean(pool, "on a freshly formatted pool")
    cp = helpers.fsck(pool, "--json")
    assert cp.returncode == 0, helpers.describe(cp, "fsck --json")
    json.loads(cp.stdout)


def test_fsck_of_a_used_and_cleanly_unmounted_pool_is_clean(pool, mountpoint):
    with helpers.mounted_pool(pool, mountpoint) as m:
        root = m.path
        os.makedirs(root / "a" / "b")
        write_fsynced(root / "a" / "b" / "f", os.urandom(300_000))
        os.link(root / "a" / "b" / "f", root / "a" / "hard")
        os.symlink("b/f", root / "a" / "sym")
        os.rename(root / "a" / "b", root / "moved")
        os.unlink(root / "a" / "hard")
        with open(root / "sparse", "wb") as f:
            f.truncate(5 << 30)
    before = sha256_file(pool)
    helpers.assert_fsck_clean(pool, "after a clean unmount")
    assert sha256_file(pool) == before, "fsck without --repair wrote to the pool"


def test_fsck_of_a_missing_pool_exits_2(pool_path):
    cp = helpers.fsck(pool_path)
    assert cp.returncode == 2, helpers.describe(cp, "fsck of a missing path must exit 2")
    assert_clean_error(cp, mentions=[str(pool_path)])


def test_fsck_of_random_bytes_reports_an_error_without_writing(pool_path):
    pool_path.write_bytes(os.urandom(4 * MiB))
    before = sha256_file(pool_path)
    cp = helpers.fsck(pool_path)
    assert cp.returncode in (1, 2), helpers.describe(cp, "fsck of random bytes")
    assert not helpers.looks_like_panic(cp)
    assert sha256_file(pool_path) == before


# ---------------------------------------------------------------------------
# settings: one validation of the finished settings, before any write
# (issue 20, finding 5)
# ---------------------------------------------------------------------------


BAD_SETTINGS = {
    "o-bad-size": (["-o", "sync_threshold_bytes=lots"], None),
    "o-out-of-range": (["-o", "migration_threads=5000"], None),
    "o-cross-key": (["-o", "nvmfs_dirty_low_percent=60,nvmfs_dirty_high_percent=40"], None),
    "o-cross-key-reversed": (["-o", "nvmfs_dirty_high_percent=40,nvmfs_dirty_low_percent=60"], None),
    "o-cross-key-split": (["-o", "nvmfs_dirty_high_percent=40", "-o", "nvmfs_dirty_low_percent=60"], None),
    "dram-cache-too-small": (["--dram-cache", "1K"], None),
    "config-out-of-range": ([], "migration_threads = 5000\n"),
    "config-bad-percent": ([], "writeback_dirty_percent = 0\n"),
    "config-bad-policy": ([], 'placement_policy = "fastest"\n'),
    "config-cross-key": ([], "nvmfs_dirty_high_percent = 40\nnvmfs_dirty_low_percent = 60\n"),
    "config-unknown-key": ([], "sync_treshold = 4096\n"),
    "config-wrong-type": ([], "log_migration = 3\n"),
    "config-not-toml": ([], "this is = = not toml\n"),
    "config-and-o-cross-key": (["-o", "nvmfs_dirty_low_percent=60"], "nvmfs_dirty_high_percent = 40\n"),
    # A bare integer for a duration meant ns in the file, seconds on -o.
    "config-duration-bare-integer": ([], "writeback_age_ns = 5\n"),
}


@pytest.mark.parametrize("args,config", list(BAD_SETTINGS.values()), ids=list(BAD_SETTINGS))
def test_bad_settings_fail_in_one_line_and_leave_every_pool_byte_unchanged(pool, mountpoint, tmp_path,
                                                                            args, config):
    extra = list(args)
    if config is not None:
        cfg = tmp_path / "terrace.toml"
        cfg.write_text(config)
        extra += ["--config", str(cfg)]
    before = sha256_file(pool)
    cp = attempt_mount(pool, mountpoint, *extra)
    assert_clean_error(cp)
    assert not helpers.is_mounted(mountpoint)
    assert sha256_file(pool) == before, "a refused setting still wrote to the pool"
    # The same settings in the foreground (no daemon) are refused the same way.
    cp = terrace("mount", pool, mountpoint, *extra, check=False, timeout=60)
    if helpers.is_mounted(mountpoint):
        helpers.unmount(helpers.Mount(pool, mountpoint))
    assert_clean_error(cp)
    assert sha256_file(pool) == before


@pytest.mark.parametrize("args,config", list(BAD_SETTINGS.values()), ids=list(BAD_SETTINGS))
def test_bad_settings_are_usage_errors_from_the_config_file_as_from_o(pool, mountpoint, tmp_path,
                                                                      args, config):
    """A bad setting is bad input wherever it comes from: exit status 2, as
    the README and `terrace --help` say (an unknown key or bad TOML in
    --config exited 1; so did keys that do not go together)."""
    extra = list(args)
    if config is not None:
        cfg = tmp_path / "terrace.toml"
        cfg.write_text(config)
        extra += ["--config", str(cfg)]
    cp = attempt_mount(pool, mountpoint, *extra)
    assert_clean_error(cp)
    assert cp.returncode == 2, helpers.describe(cp, "expected exit status 2 (usage error)")


def test_a_bare_number_means_seconds_from_the_config_file_o_and_set(pool, mountpoint, tmp_path):
    """`writeback_age_ns = "5"` in --config is 5 s, as `-o
    writeback_age_ns=5` and `terrace set MNT writeback_age_ns 5` are; the
    bare integer `writeback_age_ns = 5`, which gave 5 ns, is refused
    naming both readings."""
    cfg = tmp_path / "terrace.toml"
    cfg.write_text("writeback_age_ns = 5\n")
    cp = attempt_mount(pool, mountpoint, "--config", cfg)
    msg = assert_clean_error(cp, mentions=[str(cfg), "writeback_age_ns", '"5s" or "5ns"'])
    assert cp.returncode == 2, msg
    cfg.write_text('writeback_age_ns = "5"\nmigration_age_ns = "30"\n')
    terrace("mount", pool, mountpoint, "--daemon", "--config", cfg, "-o", "s3_backoff_ns=2",
            timeout=60)
    m = helpers.Mount(pool, mountpoint)
    try:
        st = m.status()["settings"]
        assert (st["writeback_age_ns"], st["migration_age_ns"], st["s3_backoff_ns"]) == \
            (5 * 10**9, 30 * 10**9, 2 * 10**9), st
        terrace("set", mountpoint, "writeback_age_ns", "7")
        assert m.status()["settings"]["writeback_age_ns"] == 7 * 10**9
    finally:
        helpers.unmount(m)


GOOD_CROSS_KEY = {
    "o": (["-o", "nvmfs_dirty_low_percent=30,nvmfs_dirty_high_percent=40"], None),
    "o-reversed": (["-o", "nvmfs_dirty_high_percent=40,nvmfs_dirty_low_percent=30"], None),
    "config": ([], "nvmfs_dirty_low_percent = 30\nnvmfs_dirty_high_percent = 40\n"),
    "config-and-o": (["-o", "nvmfs_dirty_high_percent=40"], "nvmfs_dirty_low_percent = 30\n"),
}


@pytest.mark.parametrize("args,config", list(GOOD_CROSS_KEY.values()), ids=list(GOOD_CROSS_KEY))
def test_cross_key_settings_are_checked_together_in_any_order(pool, mountpoint, tmp_path, args, config):
    """Low 30 / high 40 is valid whatever the order (each alone is not, against
    the other's default: low 50, high 80)."""
    extra = list(args)
    if config is not None:
        cfg = tmp_path / "terrace.toml"
        cfg.write_text(config)
        extra += ["--config", str(cfg)]
    terrace("mount", pool, mountpoint, "--daemon", *extra, timeout=60)
    m = helpers.Mount(pool, mountpoint)
    try:
        st = m.status()["settings"]
        assert (st["nvmfs_dirty_low_percent"], st["nvmfs_dirty_high_percent"]) == (30, 40), st
        # At run time the finished settings are checked too: high below low is refused.
        cp = terrace("set", mountpoint, "nvmfs_dirty_high_percent", "20", check=False)
        assert_clean_error(cp, mentions=["nvmfs_dirty_low_percent"])
        assert m.status()["settings"]["nvmfs_dirty_high_percent"] == 40
    finally:
        helpers.unmount(m)


INODE_TABLE = 3 * 4096  # the inode table starts at block 3 (docs/design.md §3.4)
INODE_SIZE = 128


def xor_slot_byte(pool, ino: int, offset: int, mask: int) -> None:
    """Flip the bits `mask` of byte `offset` of inode `ino`'s slot (base table)."""
    at = INODE_TABLE + ino * INODE_SIZE + offset
    with open(pool, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ mask]))


def test_a_flipped_bit_in_a_log_head_is_refused_and_fsck_repair_corrects_it_losing_nothing(pool, mountpoint):
    """One flipped bit in a directory's log head word (format 12 gives it a
    check): mount refuses with a one-line error, fsck reports it without
    writing, and `fsck --repair` corrects the word, so every file is back."""
    want = {}
    with helpers.mounted_pool(pool, mountpoint) as m:
        d = m.path / "dir-with-a-long-log"
        d.mkdir()
        for i in range(60):
            data = os.urandom(100 + i)
            write_fsynced(d / f"file-with-a-long-name-{i:03}", data)
            want[f"file-with-a-long-name-{i:03}"] = data
        ino = os.stat(d).st_ino
    xor_slot_byte(pool, ino, 1, 0x02)  # bit 9 of the head word
    before = sha256_file(pool)
    cp = attempt_mount(pool, mountpoint)
    msg = assert_clean_error(cp, mentions=["log head", "fsck --repair"])
    assert sha256_file(pool) == before, f"a refused mount wrote to the pool: {msg}"
    cp = helpers.fsck(pool)
    assert cp.returncode == 1, helpers.describe(cp, "fsck of a damaged head")
    assert sha256_file(pool) == before, "fsck without --repair wrote to the pool"
    cp = helpers.fsck(pool, "--repair")
    assert cp.returncode == 0, helpers.describe(cp, "fsck --repair")
    out = cp.stdout + cp.stderr
    assert "corrected the damaged log head word" in out, helpers.describe(cp, "fsck --repair")
    # The directory's files were orphans only while its head was damaged.
    assert "orphan" not in out, helpers.describe(cp, "fsck --repair freed nothing")
    helpers.assert_fsck_clean(pool, "after the repair")
    with helpers.mounted_pool(pool, mountpoint) as m:
        d = m.path / "dir-with-a-long-log"
        assert sorted(os.listdir(d)) == sorted(want)
        for name, data in want.items():
            assert read(d / name) == data, name


def test_files_of_a_broken_directory_are_kept_in_lost_found_by_fsck_repair(pool, mountpoint):
    """A directory whose inode slot is damaged beyond correction (a byte under
    its checksum): mount refuses, and `fsck --repair` frees it but keeps what
    only it named in /lost+found as #INODE, as e2fsck does."""
    want = {}
    with helpers.mounted_pool(pool, mountpoint) as m:
        d = m.path / "doomed"
        d.mkdir()
        for i in range(5):
            data = os.urandom(5000 + i)
            write_fsynced(d / f"f{i}", data)
            want[os.stat(d / f"f{i}").st_ino] = data
        (d / "sub").mkdir()
        write_fsynced(d / "sub" / "g", b"nested")
        sub = os.stat(d / "sub").st_ino
        ino = os.stat(d).st_ino
    # Two bits of the uid, under the slot checksum (one it would correct).
    xor_slot_byte(pool, ino, 28, 0x41)
    assert_clean_error(attempt_mount(pool, mountpoint), mentions=["fsck --repair"])
    cp = helpers.fsck(pool, "--repair")
    assert cp.returncode == 0, helpers.describe(cp, "fsck --repair")
    assert "lost+found" in cp.stdout, helpers.describe(cp, "fsck --repair")
    helpers.assert_fsck_clean(pool, "after the repair")
    with helpers.mounted_pool(pool, mountpoint) as m:
        lf = m.path / "lost+found"
        assert not (m.path / "doomed").exists()
        assert os.stat(lf).st_mode & 0o7777 == 0o700
        assert sorted(os.listdir(lf)) == sorted(f"#{i}" for i in [*want, sub])
        for i, data in want.items():
            assert read(lf / f"#{i}") == data
        assert read(lf / f"#{sub}" / "g") == b"nested"
