"""Real faults through a mount (issue 20, fault campaign).

The core campaign (crates/core/tests/fault_campaign.rs) injects EIO through
fault media; these tests use faults a real daemon meets, on real files:

(a) the SSD tier image lives on a small tmpfs that fills up: the fsync
    that meets it fails with ENOSPC, later writes are refused at once, the
    daemon stays up without retrying in a loop, nothing fsync'd is lost, and
    once the file system has room again the pool takes writes again;
(b) the SSD image is truncated while mounted: reads of data beyond its end
    fail with EIO (never wrong bytes, never a panic), status answers, unmount
    works, and the next mount refuses the image with a clear error;
(c) the daemon is killed (SIGKILL) during `terrace scrub` of a damaged pool,
    and `terrace fsck --repair` is killed at random points: the pool mounts,
    fsck is clean or reports only the injected damage, and no fsync'd byte is
    lost;
(d) the PM tier's own file system (a small tmpfs) fills up after mkfs: the
    mount takes PM's pages first, so the pool goes on to its own ENOSPC and
    the daemon lives (a store into a page tmpfs could not back killed it
    with SIGBUS); a mount that cannot back PM refuses with how much is
    missing;
(e) the SSD image's tmpfs is full when the pool is mounted: the tier
    mounts as a full device (no room counted, writes refused at write()),
    so nothing is accepted that its image could not take.

Every test unmounts what it mounts (Terrace and tmpfs) even when it fails.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import helpers
from helpers import (assert_clean_error, assert_fsck_clean, mounted_pool, temp_mountpoint,
                     temp_pool_path, terrace, unique_name)

MiB = 1 << 20
BS = 4096


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(size: str):
    """A dedicated tmpfs of `size` mounted under /tmp; unmounted and removed
    afterwards (lazily if something still holds it)."""
    d = Path(tempfile.mkdtemp(prefix=unique_name("tmpfs") + "-", dir=helpers.MOUNT_PARENT))
    mounted = False
    try:
        helpers.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", d])
        mounted = True
        yield d
    finally:
        if mounted:
            cp = helpers.run(["umount", d], check=False)
            if cp.returncode != 0:
                helpers.run(["umount", "-l", d], check=False)
        with contextlib.suppress(OSError):
            d.rmdir()


def fill_up(path: Path) -> None:
    """Writes zeros to `path` until its file system is full (ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * MiB)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)


def data_of(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def write_synced(path: Path, data: bytes) -> None:
    """Write `data` to `path` and fsync it; raises OSError on any failure."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view[:MiB])
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def read_blocks_or_eio(path: Path, want: bytes) -> tuple[int, int]:
    """Reads `path` 4 KiB at a time: each read must return exactly the
    expected bytes or fail with EIO. Returns (blocks read, blocks EIO)."""
    ok = eio = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in range(0, len(want), BS):
            try:
                got = os.pread(fd, BS, off)
            except OSError as e:
                assert e.errno == errno.EIO, f"{path} at {off}: {e}"
                eio += 1
                continue
            assert got == want[off:off + BS], f"{path} at {off}: wrong bytes served"
            ok += 1
    finally:
        os.close(fd)
    return ok, eio


def umount_retrying_busy(mnt: Path, wait: float = 10):
    """`terrace umount MNT`, retried while the kernel says the mount is busy
    (another process passing through it, e.g. a scan of /tmp); returns the
    last result."""
    deadline = time.monotonic() + wait
    while True:
        cp = terrace("umount", mnt, check=False, timeout=120)
        if cp.returncode == 0 or "busy" not in cp.stderr or time.monotonic() > deadline:
            return cp
        time.sleep(0.2)


def status(mnt: Path) -> dict:
    return json.loads(terrace("status", "--json", mnt, timeout=30).stdout)


def where(path: Path) -> dict:
    return json.loads(terrace("where", "--json", path).stdout)


def ssd_blocks(path: Path) -> list[tuple[int, int]]:
    """(file offset, SSD block) of every 4 KiB block of `path` on the SSD."""
    out = []
    for e in where(path)["extents"]:
        if e["tier"] == "ssd":
            for k in range(e["length"] // BS):
                out.append((e["offset"] + k * BS, e["block"] + k))
    return out


def fsck_json(pool: Path, *args) -> tuple[int, dict]:
    cp = helpers.fsck(pool, "--json", *args)
    assert not helpers.looks_like_panic(cp), helpers.describe(cp, "fsck panicked")
    try:
        return cp.returncode, json.loads(cp.stdout)
    except json.JSONDecodeError:
        raise AssertionError(helpers.describe(cp, "fsck --json printed no JSON"))


# --------------------------------------------------------------------------
# (a) the file system holding the SSD image fills up
# --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_ssd_image_on_a_full_tmpfs_fails_writes_keeps_fsynced_data_and_the_daemon():
    with small_tmpfs("12M") as fsdir, temp_pool_path() as pool, temp_mountpoint() as mnt:
        ssd = fsdir / "ssd.img"
        # The image is sparse: it claims 64 MiB on a 12 MiB tmpfs (mkfs
        # allows that only with --force).
        terrace("mkfs", "--force", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        acked: dict[str, str] = {}
        failed: dict[str, tuple[str, int]] = {}  # name -> (step, errno)
        with mounted_pool(pool, mnt) as m:
            # PM fills first, with fsync'd files pinned to it (migration
            # leaves them there), so that the write-backs below have nowhere
            # to go but the SSD.
            (mnt / "pinned").mkdir()
            terrace("rule", mnt / "pinned", "pm")
            k = 0
            while status(mnt)["placement_overflows"] == 0:
                name = f"pinned/pm{k:02d}"
                write_synced(mnt / name, data_of(1000 + k, MiB))
                acked[name] = sha(data_of(1000 + k, MiB))
                k += 1
                assert k < 40, "PM never filled"
            terrace("set", mnt, "placement_policy", "block-first")
            terrace("set", mnt, "dram_cache_bytes", "4M")
            for i in range(48):
                name = f"f{i:02d}"
                data = data_of(i, MiB)
                step = "create"
                try:
                    fd = os.open(mnt / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        step = "write"
                        view = memoryview(data)
                        while view:  # a short write is followed by ENOSPC
                            view = view[os.write(fd, view):]
                        step = "fsync"
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    acked[name] = sha(data)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, f"{name}: {step}: {e}"
                    failed[name] = (step, e.errno)
                if len(failed) >= 6:
                    break
            print(f"\n(a) full tmpfs: {len(acked)} files fsync'd, failures: {failed}")
            assert failed, "the tmpfs never filled up"
            # The write that found the device full may have been accepted
            # (the pool could not know; its fsync failed, unless write-back
            # found a block on PM instead). Once known full, the pool
            # refuses new data at once (create or write), as a full ext4
            # does, instead of accepting pages it has no block for.
            steps = [step for step, _ in failed.values()]
            assert steps[0] in ("fsync", "write"), failed
            assert all(s in ("create", "write") for s in steps[1:]), failed
            # The daemon is alive and answers; fsync'd data reads back.
            st = status(mnt)
            assert m.alive()
            for name, digest in acked.items():
                assert sha((mnt / name).read_bytes()) == digest, f"{name} changed"
            # `status` and `df` say the device is full.
            assert st["tiers"][1]["device_full"] is not None, st["tiers"][1]
            assert st["device_full_errors"] > 0
            text = terrace("status", mnt).stdout
            assert "FULL DEVICE" in text and "device-full error" in text, text
            vfs = os.statvfs(mnt)
            assert vfs.f_bavail * vfs.f_frsize < 16 * MiB, "df counts the full device's room"
            # No loop of retries: the idle daemon takes (almost) no CPU.
            # (Before 2026-11-29 write-back tried again every 100 ms,
            # copying its pages each time: 15-20 % of a CPU.)
            pid = st["pid"]
            before = cpu_seconds(pid)
            time.sleep(3)
            used = cpu_seconds(pid) - before
            assert used < 0.3, f"the daemon used {used:.2f} s of CPU in 3 s idle on a full device"
            # A failed fsync left data in the cache that cannot be persisted
            # now: unmount refuses soon, says why, and keeps the mount with
            # its data readable (the core test device_full.rs checks this
            # every time; here it happens when PM had no block either).
            dirty = status(mnt)["cache"]["dirty_bytes"]
            if steps[0] == "fsync":
                assert dirty > 0, "the failed fsync left nothing cached"
            if dirty > 0:
                t0 = time.monotonic()
                cp = umount_retrying_busy(mnt)
                took = time.monotonic() - t0
                assert cp.returncode != 0, "umount with unpersistable cached writes succeeded"
                assert took < 20, f"umount took {took:.0f} s to give up on a full device"
                assert "space" in cp.stderr.lower(), cp.stderr
                assert helpers.is_mounted(mnt) and m.alive()
            # The operator gives the file system room: the write-back thread
            # sees its free space grow, the pool counts the device's room
            # again, and what was cached reaches the SSD.
            helpers.run(["mount", "-o", "remount,size=80M", fsdir])
            assert helpers.wait_until(
                lambda: status(mnt)["tiers"][1]["device_full"] is None, 10
            ), status(mnt)["tiers"][1]
            vfs = os.statvfs(mnt)
            assert vfs.f_bavail * vfs.f_frsize > 32 * MiB
            for name, (step, _) in failed.items():
                if step == "fsync":
                    fd = os.open(mnt / name, os.O_WRONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    acked[name] = sha(data_of(int(name[1:]), MiB))
            write_synced(mnt / "after", data_of(99, MiB))
            acked["after"] = sha(data_of(99, MiB))
            cp = umount_retrying_busy(mnt)
            assert cp.returncode == 0, helpers.describe(cp, "umount failed with room again")
            assert helpers.wait_until(lambda: not helpers.is_mounted(mnt), 10)
        assert_fsck_clean(pool, "after the SSD's file system filled up")
        code, report = fsck_json(pool, "--data")
        assert code == 0 and report["bad_blocks"] == 0, report
        with mounted_pool(pool, mnt):
            for name, digest in acked.items():
                assert sha((mnt / name).read_bytes()) == digest, f"{name} lost after remount"


# --------------------------------------------------------------------------
# (b) the SSD image truncated while mounted
# --------------------------------------------------------------------------


def test_ssd_image_truncated_while_mounted_gives_eio_never_wrong_bytes():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:32M", "--tier", f"ssd:{ssd}:64M")
        big = data_of(1, 8 * MiB)
        small = data_of(2, 20000)
        with mounted_pool(pool, mnt) as m:
            write_synced(mnt / "big", big)
            write_synced(mnt / "small", small)
            terrace("migrate", mnt, mnt / "big")
            blocks = ssd_blocks(mnt / "big")
            assert len(blocks) == len(big) // BS, where(mnt / "big")
            # Cut the image in the middle of the file's data, and keep the
            # daemon and the kernel from serving the file out of their caches.
            cut = (blocks[len(blocks) // 2][1] * BS)
            terrace("set", mnt, "dram_cache_bytes", "1M")
            helpers.drop_kernel_pages(mnt / "big")
            os.truncate(ssd, cut)
            ok, eio = read_blocks_or_eio(mnt / "big", big)
            assert eio > 0, "reads beyond the end of the truncated image did not fail"
            assert ok > 0, "reads before the cut failed too"
            # Whole-file reads fail with EIO, not with wrong bytes.
            try:
                got = (mnt / "big").read_bytes()
                raise AssertionError(f"a read across the cut succeeded ({len(got)} bytes)")
            except OSError as e:
                assert e.errno == errno.EIO, e
            assert (mnt / "small").read_bytes() == small
            st = status(mnt)
            assert st["pid"], st
            assert m.alive()
            # New writes still work (the tier file grows again past the cut).
            write_synced(mnt / "after", data_of(3, 100000))
            assert (mnt / "after").read_bytes() == data_of(3, 100000)
            assert helpers.unmount(m), "terrace umount failed after the truncation"
        assert not helpers.is_mounted(mnt)
        # The image is shorter than the tier: the next mount refuses it.
        if ssd.stat().st_size < 64 * MiB:
            cp = helpers.run([helpers.TERRACE_BIN, "mount", pool, mnt, "--daemon"], check=False)
            if helpers.is_mounted(mnt):
                helpers.unmount(helpers.Mount(pool, mnt))
            msg = assert_clean_error(cp, mentions=[str(ssd), "tier 1"])
            assert "truncated" in msg or "shorter" in msg, msg
        # Back to its size (zeros where the data was): it mounts, and what was
        # cut off is damage that is reported, never served.
        os.truncate(ssd, 64 * MiB)
        assert_fsck_clean(pool, "after the image was restored to its size")
        code, report = fsck_json(pool, "--data")
        assert code == 1 and report["bad_blocks"] > 0, report
        with mounted_pool(pool, mnt):
            ok, eio = read_blocks_or_eio(mnt / "big", big)
            assert eio == report["bad_blocks"], (eio, report["bad_blocks"])
            assert (mnt / "small").read_bytes() == small
            assert (mnt / "after").read_bytes() == data_of(3, 100000)
        print(f"\n(b) truncated image: {ok} blocks read back, {eio} EIO")


# --------------------------------------------------------------------------
# (c) the daemon killed during scrub, fsck --repair killed
# --------------------------------------------------------------------------


def test_daemon_killed_during_scrub_of_a_damaged_pool_loses_nothing():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:32M", "--tier", f"ssd:{ssd}:256M")
        files = {f"f{i}": data_of(100 + i, 3 * MiB) for i in range(12)}
        damaged: dict[str, int] = {}
        with mounted_pool(pool, mnt) as m:
            for name, data in files.items():
                write_synced(mnt / name, data)
            terrace("migrate", mnt, *[mnt / n for n in files])
            # Damage one block of four files behind the daemon's back.
            with open(ssd, "r+b") as f:
                for name in ["f1", "f4", "f7", "f10"]:
                    off, block = ssd_blocks(mnt / name)[37]
                    f.seek(block * BS + 123)
                    f.write(b"rot")
                    damaged[name] = off
                os.fsync(f.fileno())
            # A slow scrub (36 MiB at 6 MiB/s), killed with its daemon.
            scrub = subprocess.Popen([str(helpers.TERRACE_BIN), "scrub", "--rate", "6M", str(mnt)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                assert helpers.wait_until(
                    lambda: (status(mnt).get("scrub") or {}).get("read_blocks", 0) > 512, 15), \
                    "the scrub did not start"
                assert (status(mnt)["scrub"] or {}).get("running"), "the scrub ended too soon"
                m.kill()
                out, err = scrub.communicate(timeout=20)
            finally:
                if scrub.poll() is None:
                    scrub.kill()
                    scrub.wait()
            assert scrub.returncode != 0, "scrub succeeded although its daemon died"
            assert b"panicked" not in err, err
        # The next mount works; every fsync'd byte is there except the
        # injected damage, which is EIO.
        with mounted_pool(pool, mnt) as m:
            assert m.status()["recovery"]["was_clean"] is False
            for name, data in files.items():
                if name in damaged:
                    ok, eio = read_blocks_or_eio(mnt / name, data)
                    assert eio == 1, f"{name}: {eio} damaged blocks, injected 1"
                else:
                    assert sha((mnt / name).read_bytes()) == sha(data), f"{name} changed"
            cp = terrace("scrub", "--json", mnt, check=False, timeout=120)
            r = json.loads(cp.stdout)
            assert r["bad_blocks"] == len(damaged), r
        assert_fsck_clean(pool, "after a daemon was killed during scrub")
        code, report = fsck_json(pool, "--data")
        assert code == 1 and report["bad_blocks"] == len(damaged), report
        # Repair does not touch file data: fsck sends the user to scrub,
        # not to a --repair that would change nothing.
        cp = terrace("fsck", pool, "--data", check=False)
        assert cp.returncode == 1 and "terrace scrub" in cp.stdout, cp.stdout
        assert "run `terrace fsck --repair`" not in cp.stdout, cp.stdout


def test_fsck_repair_killed_at_random_points_leaves_a_pool_that_repairs_and_mounts():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:128M",
                "--inodes", "4096")
        files = {f"keep{i}": data_of(200 + i, (i + 1) * 70000) for i in range(16)}
        with mounted_pool(pool, mnt) as m:
            for name, data in files.items():
                write_synced(mnt / name, data)
            terrace("migrate", mnt, *[mnt / n for n in list(files)[:8]])
            # Orphans: files unlinked while open when the daemon dies.
            fds = []
            try:
                for i in range(300):
                    p = mnt / f"orphan{i}"
                    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
                    os.write(fd, b"x" * 5000)
                    fds.append(fd)
                    os.unlink(p)
                m.kill()
            finally:
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        code, before = fsck_json(pool)
        assert len(before["orphans"]) >= 300, before
        assert not before["problems"], before
        rnd = random.Random(7)
        interrupted = 0
        for k in range(12):
            p = subprocess.Popen([str(helpers.TERRACE_BIN), "fsck", "--repair", "--data", str(pool)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            time.sleep(rnd.uniform(0, 0.08))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                interrupted += 1
            out, err = p.communicate(timeout=60)
            assert b"panicked" not in err, err
            code, mid = fsck_json(pool)
            # Interrupted or not: nothing but what the crash left (orphans,
            # open transactions) is reported.
            assert not mid["problems"], (k, mid)
        cp = helpers.fsck(pool, "--repair")
        assert cp.returncode == 0, helpers.describe(cp, "the last repair failed")
        code, after = fsck_json(pool, "--data")
        assert code == 0 and not after["orphans"] and after["bad_blocks"] == 0, after
        with mounted_pool(pool, mnt):
            for name, data in files.items():
                assert sha((mnt / name).read_bytes()) == sha(data), f"{name} changed"
            assert not [p for p in os.listdir(mnt) if p.startswith("orphan")]
        assert_fsck_clean(pool, "after the repairs and a remount")
        print(f"\n(c) fsck --repair: {interrupted} of 12 runs killed mid-way")


def test_pm_tier_on_a_tmpfs_that_fills_up_after_mkfs_never_kills_the_daemon():
    with small_tmpfs("96M") as d, temp_mountpoint() as mnt:
        pool = d / "pool"
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        assert os.stat(pool).st_blocks * 512 < 8 * MiB, "mkfs leaves PM sparse"
        with mounted_pool(pool, mnt) as m:
            assert os.stat(pool).st_blocks * 512 >= 64 * MiB, "the mount did not back PM"
            # Something else fills the tmpfs.
            fill_up(d / "filler")
            written = 0
            with open(mnt / "data", "wb") as f:
                try:
                    for k in range(80):
                        f.write(data_of(k, MiB))
                        f.flush()
                        written += 1
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
            assert 40 <= written < 80, f"{written} MiB written into a 64 MiB pool"
            assert m.status()["pid"], "the daemon died"
            with open(mnt / "data", "rb") as f:
                for k in range(written):
                    assert f.read(MiB) == data_of(k, MiB), f"MiB {k}"
        assert_fsck_clean(pool)


def test_a_mount_that_cannot_back_its_pm_tier_refuses_with_what_is_missing():
    with small_tmpfs("96M") as d, temp_mountpoint() as mnt:
        pool = d / "pool"
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with open(d / "filler", "wb") as f:
            f.write(b"\0" * (60 * MiB))
        cp = terrace("mount", "--daemon", pool, mnt, check=False)
        msg = assert_clean_error(cp, mentions=[str(pool), "cannot back the whole pm tier"])
        assert "free space on that file system" in msg, msg
        assert not helpers.is_mounted(mnt), "a refused mount left a mount behind"
        (d / "filler").unlink()
        with mounted_pool(pool, mnt) as m:
            (mnt / "f").write_bytes(b"x" * 4096)
            assert m.status()["pid"]
        assert_fsck_clean(pool)


def test_a_sparse_ssd_image_on_a_tmpfs_full_at_mount_counts_no_room():
    with small_tmpfs("12M") as fsdir, temp_pool_path() as pool, temp_mountpoint() as mnt:
        ssd = fsdir / "ssd.img"
        terrace("mkfs", "--force", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        fill_up(fsdir / "filler")
        with mounted_pool(pool, mnt) as m:
            st = m.status()
            assert st["tiers"][1]["device_full"], "the tier mounted as if its image had room"
            assert os.statvfs(mnt).f_bavail * 4096 < 16 * MiB, "df counts the full image's room"
            terrace("set", mnt, "placement_policy", "block-first")
            with pytest.raises(OSError) as e:
                with open(mnt / "big", "wb") as f:
                    for k in range(32):
                        f.write(data_of(k, MiB))
            assert e.value.errno == errno.ENOSPC
            assert m.status()["pid"]
            # Room comes back: the next write-back pass sees it.
            (fsdir / "filler").unlink()
            assert helpers.wait_until(lambda: not m.status()["tiers"][1]["device_full"], 10)
            with open(mnt / "after", "wb") as f:
                f.write(data_of(99, 4 * MiB))
                os.fsync(f.fileno())
        assert_fsck_clean(pool)
