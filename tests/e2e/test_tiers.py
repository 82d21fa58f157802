"""Block tiers through a real mount: data spills from a small PM tier to an SSD
tier file without ENOSPC, `terrace where` and the `user.terrace.tiers` xattr say
where each extent is, data survives a remount, and a missing tier is a clear
error."""

import contextlib
import hashlib
import os
import tempfile
import time
from pathlib import Path

from helpers import (assert_clean_error, assert_fsck_clean, mounted_pool, temp_mountpoint,
                     temp_pool_path, terrace, unique_name)


@contextlib.contextmanager
def ssd_file(size_mb: int = 256):
    """A path for an SSD tier image on the disk (/var/tmp), removed afterwards."""
    path = Path(tempfile.gettempdir() if not os.path.isdir("/var/tmp") else "/var/tmp") / (unique_name("ssd") + ".img")
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def write_pattern(path: Path, total: int, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(total // chunk):
            block = bytes([(i * 7 + k) % 251 for k in range(256)]) * (chunk // 256)
            f.write(block)
            h.update(block)
    return h.hexdigest()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def where(path: Path) -> dict:
    import json
    return json.loads(terrace("where", "--json", path).stdout)


def test_data_beyond_pm_capacity_lands_on_the_ssd_tier_and_survives_remount():
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            small = mnt / "wal.log"
            with open(small, "ab") as f:
                for i in range(64):
                    f.write(b"record %05d\n" % i)
                    f.flush()
                    os.fsync(f.fileno())
            big = mnt / "big.img"
            digest = write_pattern(big, 64 << 20)  # 4x the PM tier
            w = where(big)
            assert w["bytes_per_tier"].get("ssd", 0) > 0, w["bytes_per_tier"]
            # Cached (dram) data shadows what it overlaps; clean copies are
            # second locations: neither counts twice.
            assert sum(b for t, b in w["bytes_per_tier"].items() if not t.endswith("-copy")) == 64 << 20
            assert where(small)["bytes_per_tier"] == {"pm": 4096}
            line = os.getxattr(big, "user.terrace.tiers").decode()
            assert ":ssd@" in line
            assert "user.terrace.tiers" not in os.listxattr(big)
            try:
                os.setxattr(big, "user.terrace.tiers", b"x")
                raise AssertionError("a virtual xattr could be set")
            except PermissionError:
                pass
            assert sha256(big) == digest
        assert_fsck_clean(pool, "after spilling to the SSD tier")
        with mounted_pool(pool, mnt):
            assert sha256(mnt / "big.img") == digest
            os.unlink(mnt / "big.img")
        assert_fsck_clean(pool, "after deleting the spilled file")


def test_on_a_tiered_pool_every_fsync_reaches_the_daemon():
    """With a block tier the DRAM cache may hold dirty data, so each fsync must
    reach the daemon (unlike a PM-only pool, where the kernel completes them)."""
    import json
    with temp_pool_path() as pool, ssd_file(64) as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt):
            with open(mnt / "f", "wb") as f:
                for i in range(30):
                    f.write(b"x" * 4096)
                    f.flush()
                    os.fsync(f.fileno())
            st = json.loads(terrace("status", "--json", mnt).stdout)
            assert st["fsync_in_kernel"] is False
            assert st["fsyncs"] >= 30, st["fsyncs"]


def test_mounting_without_the_ssd_tier_is_a_clear_error():
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        ssd.unlink()
        cp = terrace("mount", pool, mnt, "--daemon", check=False)
        assert_clean_error(cp, mentions=["missing"])


def test_where_outside_a_terrace_mount_is_a_clear_error(tmp_path):
    f = tmp_path / "plain"
    f.write_bytes(b"x")
    cp = terrace("where", f, check=False)
    assert_clean_error(cp, mentions=["not on a Terrace mount"])


def test_settings_can_be_listed_and_changed_at_run_time():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with mounted_pool(pool, mnt):
            listing = terrace("set", mnt).stdout
            assert "placement_policy = ziggurat" in listing
            assert "sync_threshold_bytes" in listing
            assert terrace("set", mnt, "sync_threshold_bytes", "4M").stdout.strip() == "sync_threshold_bytes = 4M"
            assert "sync_threshold_bytes = 4M" in terrace("set", mnt, "sync_threshold_bytes").stdout
            cp = terrace("set", mnt, "placement_policy", "bogus", check=False)
            assert_clean_error(cp, mentions=["bogus"])
            cp = terrace("set", mnt, "no_such_key", "1", check=False)
            assert_clean_error(cp, mentions=["no_such_key"])
            import json
            st = json.loads(terrace("status", "--json", mnt).stdout)
            assert st["settings"]["sync_threshold_bytes"] == 4 << 20


def test_migrate_moves_many_files_down_and_back_up_with_every_byte_intact():
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:128M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            terrace("set", mnt, "migration_threshold", "95")
            (mnt / "d").mkdir()
            digests = {}
            for i in range(40):  # several migrate requests' worth of small files
                p = mnt / "d" / f"f{i:02d}"
                digests[p] = write_pattern(p, (i % 5 + 1) << 20, chunk=64 << 10)
            keep = mnt / "keep.log"
            keep.write_bytes(b"stays on PM\n")
            cp = terrace("migrate", mnt, mnt / "d")
            assert "moved 120 MiB of 40 files to ssd" in cp.stdout, cp.stdout
            for p, digest in digests.items():
                assert where(p)["bytes_per_tier"] == {"ssd": p.stat().st_size}, p
                assert sha256(p) == digest
            assert where(keep)["bytes_per_tier"] == {"pm": 4096}
            cp = terrace("migrate", "--to", "pm", mnt, mnt / "d" / "f07")
            assert where(mnt / "d" / "f07")["bytes_per_tier"] == {"pm": 3 << 20}
            cp = terrace("migrate", mnt, "/etc", check=False)
            assert_clean_error(cp, mentions=["not on the Terrace mount"])
            cp = terrace("migrate", "--to", "tape", mnt, check=False)
            assert_clean_error(cp, mentions=["tape"])
        assert_fsck_clean(pool, "after migrating by hand")
        with mounted_pool(pool, mnt):
            for p, digest in digests.items():
                assert sha256(p) == digest


def test_rules_pin_files_through_the_mount_and_directories_pass_them_on():
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            wal = mnt / "wal.log"
            wal.write_bytes(b"")
            assert "auto (no rule)" in terrace("rule", wal).stdout
            assert "pinned to ssd" in terrace("rule", wal, "ssd").stdout
            assert os.getxattr(wal, "user.terrace.rule") == b"ssd"
            with open(wal, "ab") as f:
                for i in range(32):
                    f.write(b"record %05d\n" % i)
                    f.flush()
                    os.fsync(f.fileno())
            w = where(wal)
            assert w["rule"] == "ssd" and set(w["bytes_per_tier"]) == {"ssd"}, w
            archive = mnt / "archive"
            archive.mkdir()
            terrace("rule", archive, "ssd")
            (archive / "2025").mkdir()
            digest = write_pattern(archive / "2025" / "big.bin", 8 << 20)
            assert os.getxattr(archive / "2025" / "big.bin", "user.terrace.rule") == b"ssd"
            fd = os.open(archive / "2025" / "big.bin", os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            assert set(where(archive / "2025" / "big.bin")["bytes_per_tier"]) == {"ssd"}
            # `terrace migrate` leaves a pinned file where its rule keeps it
            # (the rule would bring it back at once) and says so; exit 0.
            cp = terrace("migrate", mnt, "--to", "pm", wal)
            assert "left where a rule pins it" in cp.stdout, cp.stdout
            assert "pinned to ssd by a rule" in cp.stderr and "terrace rule" in cp.stderr, cp.stderr
            time.sleep(0.5)
            assert set(where(wal)["bytes_per_tier"]) == {"ssd"}
            cp = terrace("rule", wal, "tape", check=False)
            assert_clean_error(cp, mentions=["no tier", "tape"])
            assert "auto" in terrace("rule", wal, "auto").stdout
            assert "auto (no rule)" in terrace("rule", wal).stdout
            access = os.getxattr(archive / "2025" / "big.bin", "user.terrace.access").decode()
            assert access.startswith("class="), access
        assert_fsck_clean(pool, "after rules")
        with mounted_pool(pool, mnt):
            assert os.getxattr(mnt / "archive", "user.terrace.rule") == b"ssd"
            assert sha256(mnt / "archive" / "2025" / "big.bin") == digest
    cp = terrace("rule", "/etc/hostname", "ssd", check=False)
    assert_clean_error(cp, mentions=["Terrace"])


def daemon_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def assert_mover_idles(m, settle: float, what: str, span: float = 5) -> None:
    """The daemon of mount `m`, given nothing its mover may move, does not
    spin over it: measured over `span` seconds once the DRAM cache's dirty
    pages are written back (the write-back age is 5 s: files written just
    before are work in flight, not idling) and `settle` more seconds have
    passed for other work in flight to end.

    The mover's passes go on (one per 100 ms tick), but few of them look
    for work (`looks`: walks of PM's data, of the logs on PM, of the ruled
    files; each job backs off to one look per 2 s while the pool's room
    does not change). A mover that spins looks once a pass or more. CPU time
    is checked too, loosely: on this VM a walk of a few thousand inodes
    whose memory went cold costs 30+ ms, so a look every 2 s and a walk
    every pass with warm memory measured close (0.30-0.37 s against
    0.47-0.53 s in 5 s); the count tells them apart, CPU only catches a
    tight loop."""
    pid = m.pid or m.status()["pid"]
    deadline = time.monotonic() + 30
    while m.status()["cache"]["dirty_bytes"] > 0:
        assert time.monotonic() < deadline, "the write-back did not finish in 30 s"
        time.sleep(0.2)
    time.sleep(settle)
    before = m.status()["migration"]
    cpu = daemon_cpu_seconds(pid)
    time.sleep(span)
    cpu = daemon_cpu_seconds(pid) - cpu
    after = m.status()["migration"]
    passes = after["passes"] - before["passes"]
    looks = after["looks"] - before["looks"]
    assert passes >= span * 5, f"{what}: only {passes} migration passes in {span} s: is the mover running?"
    assert looks <= min(20, passes // 2), \
        f"{what}: the idle mover looked for work {looks} times in {passes} passes ({span} s)"
    assert cpu < 1.0, f"{what}: the idle daemon used {cpu:.2f} s of CPU in {span} s"


def test_a_full_tiered_pool_says_enospc_at_write_keeps_what_it_took_and_stays_idle():
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt) as m:
            vfs = os.statvfs(mnt)
            # df shows the pool (every tier), not its PM tier.
            assert vfs.f_blocks * vfs.f_frsize >= 72 << 20, vfs
            big = mnt / "big"
            h = hashlib.sha256()
            written = 0
            chunk = bytes(range(256)) * 4096  # 1 MiB
            with open(big, "wb", buffering=0) as f:
                try:
                    for _ in range(200):
                        n = f.write(chunk)
                        assert n == len(chunk)
                        h.update(chunk)
                        written += n
                    raise AssertionError("200 MiB fitted in an 80 MiB pool")
                except OSError as e:
                    assert e.errno == 28, e  # ENOSPC, from write() itself
                # Everything write() accepted can be made durable.
                os.fsync(f.fileno())
            assert written >= 56 << 20, written
            assert big.stat().st_size == written
            assert sha256(big) == h.hexdigest()
            vfs = os.statvfs(mnt)
            # At most ~8 MiB of an 80 MiB pool left when write() says ENOSPC.
            # Data being moved, and PM data with a clean copy, take room on
            # two tiers; a refused write waits for moves and drops such
            # copies first (2026-11-25), which left < 1 MiB in 96/96 fills
            # run alone, but the full e2e suite still saw 5 MiB (1279
            # blocks) left twice: a cause not yet found (issue 20/22 note),
            # so the bound stays where it was before that fix.
            assert vfs.f_bavail * vfs.f_frsize < 8 << 20, vfs
            assert abs(m.status()["room_bytes"] - vfs.f_bavail * vfs.f_frsize) < 1 << 20
            # A full pool gives the mover nothing to do: it must not spin.
            assert_mover_idles(m, settle=1, what="a full pool")
        assert_fsck_clean(pool, "after filling the pool")
        with mounted_pool(pool, mnt):
            assert sha256(mnt / "big") == h.hexdigest()
            os.unlink(mnt / "big")
            with open(mnt / "again", "wb") as f:
                f.write(chunk * 8)
                os.fsync(f.fileno())
        assert_fsck_clean(pool, "after freeing space and writing again")


def _fallocate(fd: int, mode: int, off: int, length: int) -> None:
    import ctypes
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.fallocate(ctypes.c_int(fd), ctypes.c_int(mode), ctypes.c_long(off), ctypes.c_long(length)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _random_file_ops(terrace_path: Path, ref_path: Path, seed: int, steps: int = 300) -> None:
    """Apply the same random writes, truncates, hole punches, fallocates,
    fsyncs and shared-mmap stores to a file on Terrace and one on a native file
    system, comparing sizes after every step and contents on every read."""
    import mmap
    import random
    rnd = random.Random(seed)
    fa = os.open(terrace_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    fb = os.open(ref_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    limit = 48 << 20
    try:
        for step in range(steps):
            op = rnd.random()
            if op < 0.45:
                off = rnd.randrange(limit)
                data = rnd.randbytes(rnd.choice([1, 100, 4096, 5000, 65536, 1 << 20, 3 << 20]))
                assert os.pwrite(fa, data, off) == os.pwrite(fb, data, off) == len(data)
                what = f"pwrite({off}, {len(data)})"
            elif op < 0.55:
                size = rnd.randrange(limit)
                os.ftruncate(fa, size)
                os.ftruncate(fb, size)
                what = f"ftruncate({size})"
            elif op < 0.7:
                off, n = rnd.randrange(limit), rnd.randrange(1, 4 << 20)
                mode = rnd.choice([0, 3])  # allocate, or PUNCH_HOLE | KEEP_SIZE
                _fallocate(fa, mode, off, n)
                _fallocate(fb, mode, off, n)
                what = f"fallocate(mode {mode}, {off}, {n})"
            elif op < 0.75:
                os.fsync(fa)
                what = "fsync"
            elif op < 0.8:
                size = os.fstat(fb).st_size
                what = "mmap (file too small)"
                if size >= 8192:
                    off = rnd.randrange(size - 4096) & ~4095
                    pos, data = rnd.randrange(3996), rnd.randbytes(100)
                    for fd in (fa, fb):
                        with mmap.mmap(fd, off + 4096, mmap.MAP_SHARED,
                                       mmap.PROT_READ | mmap.PROT_WRITE) as m:
                            m[off + pos:off + pos + 100] = data
                            m.flush()
                    what = f"mmap store at {off + pos}"
            else:
                off = rnd.randrange(max(os.fstat(fb).st_size, 1))
                n = rnd.choice([1, 4096, 100000, 1 << 20, 5 << 20])
                assert os.pread(fa, n, off) == os.pread(fb, n, off), \
                    f"seed {seed} step {step}: pread({off}, {n}) differs from the native file"
                what = f"pread({off}, {n})"
            assert os.fstat(fa).st_size == os.fstat(fb).st_size, \
                f"seed {seed} step {step}: size differs after {what}"
    finally:
        os.close(fa)
        os.close(fb)
    assert sha256(terrace_path) == sha256(ref_path), f"seed {seed}: final contents differ"


def test_random_file_operations_on_a_tiered_pool_match_a_native_file_system(tmp_path):
    with temp_pool_path() as pool, ssd_file(512) as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:512M")
        with mounted_pool(pool, mnt):
            # A small cache and PM: data lives on PM, in the cache and on the SSD.
            terrace("set", mnt, "dram_cache_bytes", "8M")
            for seed, policy in [(1, "ziggurat"), (2, "ziggurat"), (3, "nvmfs"), (4, "nvmfs"), (5, "default")]:
                terrace("set", mnt, "migration_policy", policy)
                _random_file_ops(mnt / f"f{seed}", tmp_path / f"f{seed}", seed)
        assert_fsck_clean(pool, "after random file operations")
        with mounted_pool(pool, mnt):
            for seed in range(1, 6):
                assert sha256(mnt / f"f{seed}") == sha256(tmp_path / f"f{seed}"), f"f{seed} after remount"


def test_bytes_damaged_in_the_ssd_image_are_never_served_and_fsck_data_finds_them():
    """Issue 20, finding 1: 19 bytes written into a file's extent in the SSD
    image were read back as the file's, and fsck said clean."""
    import errno
    import json
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        data = os.urandom(1 << 20)
        with mounted_pool(pool, mnt):
            (mnt / "f").write_bytes(data)
            (mnt / "other").write_bytes(b"unharmed" * 1000)
            terrace("migrate", mnt, mnt / "f", mnt / "other")
            ext = where(mnt / "f")["extents"]
            assert [e["tier"] for e in ext] == ["ssd"], ext
            block = ext[0]["block"]
        assert_fsck_clean(pool, "before the damage")
        cp = terrace("fsck", "--data", pool)
        assert "0 damaged" in cp.stdout, cp.stdout
        with open(ssd, "r+b") as f:  # 19 bytes into the file's 4th block
            f.seek((block + 3) * 4096 + 100)
            f.write(b"nineteen bad bytes!")
        cp = terrace("fsck", "--data", pool, check=False)
        assert cp.returncode == 1, cp.stdout + cp.stderr
        assert "checksum mismatch" in cp.stdout and "1 damaged" in cp.stdout, cp.stdout
        with mounted_pool(pool, mnt) as m:
            with open(mnt / "f", "rb") as f:
                assert f.read(3 * 4096) == data[:3 * 4096]
                f.seek(3 * 4096 + 50)
                try:
                    got = f.read(200)
                    raise AssertionError(f"damaged bytes were served: {got[:40]!r}")
                except OSError as e:
                    assert e.errno == errno.EIO, e
                f.seek(4 * 4096)
                assert f.read() == data[4 * 4096:]
            assert (mnt / "other").read_bytes() == b"unharmed" * 1000
            st = json.loads(terrace("status", "--json", mnt).stdout)
            assert st["checksum_errors"] >= 1 and st["checksummed_reads"] > 0, st
            text = terrace("status", mnt).stdout
            assert "DAMAGED" in text and "checksum mismatch" in text, text
            # Migration does not carry the damage to PM.
            cp = terrace("migrate", "--to", "pm", mnt, mnt / "f", check=False)
            assert cp.returncode != 0
            assert where(mnt / "f")["extents"][0]["tier"] == "ssd"
            assert m.alive()


def test_scrub_reads_every_block_online_reports_damage_and_status_shows_the_result():
    import json
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        data = os.urandom(2 << 20)
        with mounted_pool(pool, mnt):
            (mnt / "f").write_bytes(data)
            terrace("migrate", mnt, mnt / "f")
            block = where(mnt / "f")["extents"][0]["block"]
            cp = terrace("scrub", mnt)
            assert "512 verified, 0 damaged" in cp.stdout, cp.stdout
            # Damage the file's data behind the daemon's back (the SSD image
            # is the device), then scrub again while mounted.
            with open(ssd, "r+b") as f:
                f.seek((block + 7) * 4096 + 9)
                f.write(b"rot")
                os.fsync(f.fileno())
            cp = terrace("scrub", "--json", mnt, check=False)
            assert cp.returncode == 1, cp.stdout + cp.stderr
            r = json.loads(cp.stdout)
            assert (r["bad_blocks"], r["checked_blocks"], r["repaired_blocks"]) == (1, 511, 0), r
            assert "bytes 28672..32768" in r["unrepairable"][0], r
            st = json.loads(terrace("status", "--json", mnt).stdout)
            assert st["scrub"]["bad_blocks"] == 1 and not st["scrub"]["running"], st["scrub"]
            assert "1 damaged" in terrace("status", mnt).stdout
            cp = terrace("scrub", "--rate", "fast", mnt, check=False)
            assert cp.returncode == 2 and "--rate" in cp.stderr, cp.stderr


def test_a_pm_filled_by_pinned_data_keeps_room_for_new_files_and_the_mover_stays_idle():
    """A directory pinned to PM and written past PM's size: pinned data stops
    at the forced mark (the rest spills to the SSD), so creates anywhere in
    the pool still find PM room for their inode and log, and the mover, which
    may move none of that data, does not spin over it."""
    with temp_pool_path() as pool, ssd_file(512) as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:512M")
        with mounted_pool(pool, mnt) as m:
            pinned = mnt / "pinned"
            pinned.mkdir()
            terrace("rule", pinned, "pm")
            digests = {}
            for k in range(80):
                digests[pinned / f"f{k}"] = write_pattern(pinned / f"f{k}", 1 << 20)
            os.sync()
            st = m.status()
            pm = st["tiers"][0]
            forced = int(terrace("set", mnt, "migration_forced_percent").stdout.split()[-1])
            # The mark counts data against PM less its log pages; `used`
            # counts the logs too. Before, pinned data went on down to the
            # metadata reserve (1/64 of PM: 98.4 % here).
            assert pm["used"] * 100 <= pm["capacity"] * (forced + 2), pm
            # Creates in the pinned directory (their data spills) and outside it.
            (pinned / "many").mkdir()
            (mnt / "mail").mkdir()
            for d in (pinned / "many", mnt / "mail"):
                for k in range(2000):
                    (d / str(k)).write_bytes(b"hello %d\n" % k)
            os.sync()
            for d in (pinned / "many", mnt / "mail"):
                for k in range(0, 2000, 97):
                    assert (d / str(k)).read_bytes() == b"hello %d\n" % k
            # Nothing the mover may move: it must not spin over it.
            assert_mover_idles(m, settle=2, what="a PM full of pinned data")
            for p, digest in digests.items():
                assert sha256(p) == digest, p
        assert_fsck_clean(pool, "after filling PM with pinned data")


def test_a_recursive_rule_pins_the_files_already_in_a_directory_and_auto_clears_them():
    """`terrace rule DIR TIER` pins DIR (its new files inherit the rule) and
    says that the files already there keep their placement; `-r` pins those
    too, and their data follows; `-r DIR auto` clears every rule below."""
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            db = mnt / "db"
            (db / "sub").mkdir(parents=True)
            digests = {p: write_pattern(p, 2 << 20) for p in (db / "a", db / "sub" / "b")}
            (db / "link").symlink_to("a")
            out = terrace("rule", db, "ssd").stdout
            assert "keep theirs" in out and "-r" in out, out
            assert all(set(where(p)["bytes_per_tier"]) == {"pm"} for p in digests)
            out = terrace("rule", "-r", db, "ssd").stdout
            assert "and 3 files and directories below it" in out, out
            for p in (db / "a", db / "sub", db / "sub" / "b"):
                assert os.getxattr(p, "user.terrace.rule") == b"ssd", p
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not all(
                    set(where(p)["bytes_per_tier"]) == {"ssd"} for p in digests):
                time.sleep(0.2)
            for p, digest in digests.items():
                assert set(where(p)["bytes_per_tier"]) == {"ssd"}, where(p)
                assert sha256(p) == digest
            terrace("rule", "-r", db, "auto")
            listing = terrace("rule", db).stdout
            assert "no file or directory below it has a rule" in listing, listing
            cp = terrace("rule", "-r", db, check=False)
            assert cp.returncode == 2 and "TIER" in cp.stderr, cp
        assert_fsck_clean(pool, "after recursive rules")


def test_terrace_sync_makes_cached_writes_durable_across_a_kill():
    """sync(1) reaches no FUSE daemon, so `terrace sync` is how a user makes
    every cached write durable at once: after it, kill -9 loses nothing,
    while a file written after it (no fsync, write-back an hour away) is not
    whole after the kill, which shows the kill does lose cached writes."""
    import helpers
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        m = helpers.mount(pool, mnt)
        try:
            terrace("set", mnt, "writeback_age_ns", "1h")
            archive = mnt / "archive"
            archive.mkdir()
            terrace("rule", archive, "ssd")  # asynchronous writes go through the DRAM cache
            synced = write_pattern(archive / "synced", 4 << 20)
            assert m.status()["cache"]["dirty_bytes"] >= 4 << 20
            out = terrace("sync", mnt).stdout
            assert "every write is durable" in out and "4.00 MiB" in out, out
            assert m.status()["cache"]["dirty_bytes"] == 0
            write_pattern(archive / "unsynced", 4 << 20)
            assert m.status()["cache"]["dirty_bytes"] >= 4 << 20
            m.kill()
        finally:
            helpers.lazy_unmount(mnt)
        assert_fsck_clean(pool, "after kill -9")
        with mounted_pool(pool, mnt):
            assert sha256(mnt / "archive" / "synced") == synced
            assert (mnt / "archive" / "unsynced").stat().st_size < 4 << 20
        cp = terrace("sync", "/tmp", check=False)
        assert_clean_error(cp, mentions=["not mounted"])


def ssd_of(status: dict) -> dict:
    """The SSD tier's part of `terrace status --json`."""
    return next(t for t in status["tiers"] if t["kind"] == "ssd")


def test_status_and_metrics_show_dead_blocks_and_recycling_reclaims_them():
    """Blocks freed inside an extent that still holds data are dead (SSD
    tiers are written non-overwrite): `status` says how much, and forced
    recycling gives them back without changing a byte."""
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt) as m:
            d = mnt / "d"
            d.mkdir()
            terrace("rule", d, "ssd")
            # Pairs, four to a 512 KiB extent: a file deleted, one kept
            # after it. (Two extents: the cleaner measures extent use over
            # the extents it may take, and one alone is always "ideal".)
            kept = {}
            for i in range(8):
                for name, size in ((f"gone{i}", 100 << 10), (f"kept{i}", 28 << 10)):
                    with open(d / name, "wb") as f:
                        f.write(bytes([i + len(name)]) * size)
                        os.fsync(f.fileno())
                kept[f"kept{i}"] = sha256(d / f"kept{i}")
            # The pairs fill two extents: a last file opens the next, so
            # the cleaner may take them (never the open one).
            with open(d / "last", "wb") as f:
                f.write(b"z" * (8 << 10))
                os.fsync(f.fileno())
            kept["last"] = sha256(d / "last")
            ssd_tier = ssd_of(m.status())
            assert ssd_tier["extents"]["dead_blocks"] == 0, ssd_tier
            for i in range(8):
                (d / f"gone{i}").unlink()
            ssd_tier = ssd_of(m.status())
            assert ssd_tier["extents"]["dead_blocks"] == 8 * 25, ssd_tier
            text = terrace("status", mnt).stdout
            assert "800 KiB in dead blocks" in text, text
            # The cleaner, told to run whatever the free space, recycles
            # the extent and reclaims them.
            terrace("set", mnt, "cleaner_free_percent", "100")
            terrace("set", mnt, "cleaner_fragmentation_percent", "100")
            deadline = time.time() + 30
            while time.time() < deadline:
                ssd_tier = ssd_of(m.status())
                if ssd_tier["extents"]["dead_blocks"] == 0:
                    break
                time.sleep(0.2)
            assert ssd_tier["extents"]["dead_blocks"] == 0, ssd_tier
            assert m.status()["cleaner"]["extents_recycled"] >= 1
            assert "in dead blocks" not in terrace("status", mnt).stdout
            for name, want in kept.items():
                assert sha256(d / name) == want, f"{name} changed"
        assert_fsck_clean(pool, "after recycling")


def _fill_until_enospc(step) -> int:
    """Calls `step(i)` for i = 0, 1, ... until it fails with ENOSPC; how many
    calls succeeded."""
    for i in range(1_000_000):
        try:
            step(i)
        except OSError as e:
            assert e.errno == 28, e
            return i
    raise AssertionError("never full")


def test_rm_of_empty_files_on_a_pool_full_on_every_tier_removes_them_all_and_status_says_so():
    """A pool full on every tier is emptied by `rm` even of files that free no
    PM block (empty files: each unlink only adds to its directory's log):
    the removals' PM reserve runs out, and a little of PM's data is moved
    into the SSD's recycling reserve (the rescue) so that they go on.
    `terrace status` and its JSON say how much was moved. A create on that
    full pool is refused at once, not after a wait for migration that has
    nowhere to move anything."""
    with temp_pool_path() as pool, ssd_file() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:4M", "--tier", f"ssd:{ssd}:16M", "--inodes", "2048")
        with mounted_pool(pool, mnt, "inode_max_percent=90") as m:
            d = mnt / "mail"
            d.mkdir()
            names = [f"{i}.M{i}P4242Q{i}.mail.example.org,S=1024:2," for i in range(1500)]
            for name in names:
                (d / name).touch()
            chunk = bytes(range(256)) * 256  # 64 KiB
            with open(mnt / "big", "wb", buffering=0) as f:
                _fill_until_enospc(lambda i: f.write(chunk))
                os.fsync(f.fileno())
            (mnt / "fill").mkdir()
            start = time.monotonic()
            made = _fill_until_enospc(lambda i: (mnt / "fill" / names[i % 1500].replace("mail", f"f{i}")).touch())
            took = time.monotonic() - start
            assert made > 0
            assert took < 5, f"creating {made} files until ENOSPC took {took:.1f} s"
            refused = []
            # Newest first: the first pages of the directory's log keep live
            # names to the end, so a log trim (which drops a log's dead first
            # pages) cannot make the room, and the rescue is what is tested.
            for name in reversed(names):
                try:
                    os.unlink(d / name)
                except OSError as e:
                    refused.append((name, e.errno))
            assert not refused, f"{len(refused)} of {len(names)} unlinks refused, e.g. {refused[:3]}"
            assert m.status()["space"]["rescued_bytes"] > 0, m.status()["space"]
            text = terrace("status", mnt).stdout
            assert "moved into the recycling reserve" in text, text
            d.rmdir()
        assert_fsck_clean(pool, "after emptying a pool full on every tier")
