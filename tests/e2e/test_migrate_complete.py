"""`terrace migrate` moves all of what it is asked to move, even while the
migration thread works on the same files: a piece that changed between its
copy and its commit (here: the clean copies the migration thread makes of
fresh PM data) is dropped rather than committed stale, and moved again
(design.md §5d, `Fs::migrate_files`). Found by bench/s3_tier.py: half of a
file stayed on PM, and the summary said less than was asked; by hand the
build before the fix left 30 MiB of 512 behind (pool and files as here).
The race depends on timing: under this harness the old build passed 6 runs
of 6, so this test guards the property rather than proving the fix."""

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import helpers
from helpers import assert_clean_error, mounted_pool, sha256_file, temp_mountpoint, \
    temp_pool_path, temp_ssd_image, terrace

MiB = 1 << 20


def write_1m_writes(path, n: int, seed: int) -> str:
    """n writes of 1 MiB, then fsync; the sha256."""
    chunk = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    with open(path, "wb") as f:
        for _ in range(n):
            f.write(chunk)
        os.fsync(f.fileno())
    return hashlib.sha256(chunk * n).hexdigest()


def test_migrate_moves_every_byte_of_files_the_migration_thread_is_copying():
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_ssd_image("hdd") as hdd, \
            temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:1G", "--tier", f"ssd:{ssd}:2G",
                "--tier", f"hdd:{hdd}:2G")
        # A DRAM cache that holds all of it, as in the benchmark that found it.
        with mounted_pool(pool, mnt, "dram_cache_bytes=1G"):
            files = {mnt / f"f{k}": write_1m_writes(mnt / f"f{k}", 64, k) for k in range(8)}
            # Let the migration thread start copying the fresh PM data (it
            # makes clean copies on the SSD) before `terrace migrate` runs.
            time.sleep(0.2)
            out = terrace("migrate", "--to", "hdd", mnt, *files).stdout
            assert out.startswith("terrace: moved 512 MiB of 8 files to hdd"), out
            for f in files:
                tiers = json.loads(terrace("where", "--json", f).stdout)["bytes_per_tier"]
                assert tiers == {"hdd": 64 * MiB}, (f, tiers)
        with mounted_pool(pool, mnt):
            for f, digest in files.items():
                assert sha256_file(f) == digest


def test_migrate_up_of_a_file_larger_than_pm_moves_none_of_it_and_says_why():
    """`terrace migrate --to pm` of a file that PM cannot hold leaves it
    whole on the SSD with one line saying how much room PM has (before: it
    copied until PM was full, failed with a bare "no space left on device",
    said 0 B had moved, and migration took the part that came up down again
    within seconds). A file that fits moves; when that leaves PM past its
    migration threshold, the command says the data may go down again and
    how to keep it (`terrace rule`)."""
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:1G")
        with mounted_pool(pool, mnt):
            big, fits = mnt / "big", mnt / "fits"
            big_sum = write_1m_writes(big, 96, 1)
            write_1m_writes(fits, 40, 2)
            terrace("migrate", "--to", "ssd", mnt, big, fits)
            cp = terrace("migrate", "--to", "pm", mnt, big, check=False)
            msg = assert_clean_error(cp, mentions=[str(big), "no room on pm", "96.0 MiB to move"])
            assert "left where it was" in msg, msg
            assert "moved 0 B of 1 file" in cp.stdout, cp.stdout
            time.sleep(1)
            tiers = json.loads(terrace("where", "--json", big).stdout)["bytes_per_tier"]
            assert tiers == {"ssd": 96 * MiB}, tiers
            cp = terrace("migrate", "--to", "pm", mnt, fits)
            assert cp.stdout.startswith("terrace: moved 40.0 MiB of 1 file to pm"), cp.stdout
            assert "past its migration threshold" in cp.stderr, cp.stderr
            assert "terrace rule PATH pm" in cp.stderr, cp.stderr
            assert sha256_file(big) == big_sum


@contextlib.contextmanager
def small_tmpfs(size: str):
    """A dedicated tmpfs of `size` under /tmp; unmounted (lazily if still
    held) and removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix=helpers.unique_name("tmpfs") + "-", dir=helpers.MOUNT_PARENT))
    mounted = False
    try:
        helpers.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", d])
        mounted = True
        yield d
    finally:
        if mounted and helpers.run(["umount", d], check=False).returncode != 0:
            helpers.run(["umount", "-l", d], check=False)
        with contextlib.suppress(OSError):
            d.rmdir()


def test_migrate_into_a_block_tier_whose_image_fills_up_names_the_room():
    """A move into an HDD tier whose (sparse) image's file system fills up
    failed per file with a bare "no space left on device", where a move to
    pm names the room; now each says how much was to move and what room
    there was: the image's file system's, and the tier's unused bytes."""
    with small_tmpfs("12M") as fsdir, temp_pool_path() as pool, temp_mountpoint() as mnt:
        hdd = fsdir / "hdd.img"
        terrace("mkfs", "--force", "--tier", f"pm:{pool}:64M", "--tier", f"hdd:{hdd}:64M")
        with mounted_pool(pool, mnt):
            files = [mnt / f"f{k}" for k in range(20)]
            for k, f in enumerate(files):
                f.write_bytes(os.urandom(1500 * 1000))
            cp = terrace("migrate", "--to", "hdd", mnt, *files, check=False)
            msg = assert_clean_error(cp, one_line=False)
            failed = [ln for ln in msg.splitlines() if "no space left on device" in ln]
            assert failed, msg
            for ln in failed:
                assert "no room on hdd: " in ln and " to move, room for " in ln, ln
                assert f"its image {hdd} is on a file system with" in ln, ln
                assert "of the tier unused" in ln, ln


def test_migrate_defragment_rewrites_a_scattered_file_in_order_and_keeps_its_contents():
    """`terrace migrate --defragment`: a file overwritten at random offsets
    and migrated lies scattered over the SSD (block tiers never overwrite in
    place); the command rewrites it in file order, says how many runs it
    was in before and after, and changes no byte. A second run finds
    nothing to do; pm is refused with the reason (design.md §5d)."""
    import random
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:1G")
        with mounted_pool(pool, mnt):
            f = mnt / "db"
            write_1m_writes(f, 64, 7)
            terrace("migrate", "-q", mnt, f)
            rng = random.Random(7)
            fd = os.open(f, os.O_WRONLY)
            try:
                for k in range(3000):
                    os.pwrite(fd, rng.randbytes(4096), rng.randrange(64 * 256) * 4096)
                    if k % 500 == 0:
                        os.fsync(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            terrace("migrate", "-q", mnt, f)
            digest = sha256_file(f)
            where = terrace("where", f).stdout
            assert "on the ssd device:" in where and "(fragmented:" in where, where
            out = terrace("migrate", "--defragment", mnt, f).stdout
            line = [ln for ln in out.splitlines() if "defragmented" in ln]
            assert line and "defragmented 1 of 1 file on ssd" in line[0], out
            words = line[0].split()
            before = int(words[words.index("runs") - 1])
            after = int(words[words.index("after") - 1])
            assert before > 1000 and after * 20 < before, line[0]
            assert sha256_file(f) == digest
            where = terrace("where", f).stdout
            assert "on the ssd device:" in where and "fragmented" not in where, where
            again = terrace("migrate", "--defragment", mnt, f).stdout
            assert "defragmented 0 of 1 file" in again, again
            cp = terrace("migrate", "--defragment", "--to", "pm", mnt, f, check=False)
            assert "--defragment is for ssd and hdd tiers" in assert_clean_error(cp)
        assert terrace("fsck", pool, "--data", check=False).returncode == 0
        with mounted_pool(pool, mnt):
            assert sha256_file(mnt / "db") == digest
