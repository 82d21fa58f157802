"""`fstrim` through a real mount (the FITRIM ioctl, design.md §5q): the free
extents of an SSD tier are discarded — a hole punched in a tier that is a
file, BLKDISCARD on a block device (here a loop device, which punches its
backing file) — while every file keeps its bytes, across a remount and a
kill -9. Bad ranges, unprivileged callers and pools with nothing to
discard get fstrim's usual errors.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path

import pytest

import helpers
from helpers import (mounted_pool, run, sha256_file, temp_mountpoint, temp_pool_path,
                     temp_ssd_image, terrace, write_pattern_file)

MiB = 1 << 20


def allocated(path: Path) -> int:
    """Bytes the file system under `path` holds for it (st_blocks)."""
    return os.stat(path).st_blocks * 512


def fstrim(mnt: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(["fstrim", "-v", *args, str(mnt)], check=check)


def trimmed_bytes(cp: subprocess.CompletedProcess) -> int:
    m = re.search(r"\((\d+) bytes\) trimmed", cp.stdout)
    assert m, f"fstrim -v printed no byte count: {cp.stdout!r} {cp.stderr!r}"
    return int(m.group(1))


def fill_and_thin(mnt: Path) -> dict[str, str]:
    """Writes 12 files straight to the SSD tier (a rule on their folder),
    deletes every other one, and returns the survivors' digests."""
    d = mnt / "data"
    d.mkdir()
    terrace("rule", d, "ssd")
    sums = {}
    for i in range(12):
        p = d / f"f{i}"
        sums[p.name] = write_pattern_file(p, (2 + i % 3) * MiB, seed=i)
    for i in range(0, 12, 2):
        (d / f"f{i}").unlink()
        del sums[f"f{i}"]
    return sums


def assert_files(mnt: Path, sums: dict[str, str], when: str) -> None:
    helpers.drop_kernel_pages(mnt / "data")
    for name, want in sums.items():
        assert sha256_file(mnt / "data" / name) == want, f"{name} changed {when}"


def test_fstrim_punches_the_free_extents_of_a_file_tier_and_keeps_every_file():
    with temp_pool_path() as pool, temp_ssd_image() as img, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{img}:256M")
        with mounted_pool(pool, mnt) as m:
            sums = fill_and_thin(mnt)
            held_before = allocated(img)
            assert held_before >= 20 * MiB, "the files reached the SSD image"
            n = trimmed_bytes(fstrim(mnt))
            # Everything but the survivors (15 MiB of data) and the tier's
            # header extent, within a few extents of log and alignment.
            assert n >= 256 * MiB - 24 * MiB, n
            assert n <= 256 * MiB, n
            assert allocated(img) <= held_before - 12 * MiB, \
                "the deleted files' extents went back to the disk"
            assert trimmed_bytes(fstrim(mnt)) == 0, "nothing freed since: nothing to do"
            assert_files(mnt, sums, "after fstrim")
            st = m.status()
            ssd = [t for t in st["tiers"] if t["kind"] == "ssd"][0]
            assert ssd["io"]["discard_bytes"] == n
            status_text = terrace("status", mnt).stdout
            assert "discarded since mount (fstrim)" in status_text
            # Space discarded is used again like any other.
            sums["after"] = write_pattern_file(mnt / "data" / "after", 40 * MiB, seed=99)
            m.kill()
        helpers.lazy_unmount(mnt)
        with mounted_pool(pool, mnt):
            assert_files(mnt, sums, "after kill -9 and a new mount")
        helpers.assert_fsck_clean(pool, "after fstrim and a crash")


def test_mount_option_discard_punches_freed_extents_of_a_file_tier_in_the_background():
    """`-o discard` (online discard, every 10 s at most): the extents the
    deleted files freed go back to the disk under the tier image without
    any fstrim, `terrace status` and the metrics say so, every file keeps its bytes across
    a kill -9, and a mount without the option discards nothing."""
    with temp_pool_path() as pool, temp_ssd_image() as img, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{img}:256M")
        with mounted_pool(pool, mnt) as m:
            assert m.status()["discard"]["interval_ns"] == 0, "off by default"
            assert "online discard" not in terrace("status", mnt).stdout
        port = helpers.free_port()
        with mounted_pool(pool, mnt, f"discard,metrics=127.0.0.1:{port}") as m:
            assert m.status()["discard"]["interval_ns"] == 10 * 10**9
            sums = fill_and_thin(mnt)
            run(["sync"])
            held_after_deletes = allocated(img)
            assert held_after_deletes >= 20 * MiB, "the files reached the SSD image"
            # The deleted files (12 MiB) leave the image within two
            # intervals, no fstrim asked.
            assert helpers.wait_until(
                lambda: allocated(img) <= held_after_deletes - 12 * MiB, 25), \
                f"online discard gave nothing back: {allocated(img)} of {held_after_deletes}"
            st = m.status()["discard"]
            assert st["passes"] >= 1 and st["bytes"] >= 12 * MiB and st["errors"] == 0, st
            text = terrace("status", mnt).stdout
            assert "online discard: free extents discarded at most every 10s" in text, text
            assert "discarded since mount (fstrim, online discard)" in text, text
            _, metrics = helpers.scrape_metrics(port)
            assert metrics["terrace_online_discard_interval_seconds"] == 10
            assert metrics["terrace_online_discard_passes_total"] >= 1
            assert metrics["terrace_online_discard_errors_total"] == 0
            ssd_discarded = metrics['terrace_tier_discarded_bytes_total{tier="ssd",tier_id="1"}']
            assert ssd_discarded >= 12 * MiB, metrics
            assert_files(mnt, sums, "after online discard")
            sums["after"] = write_pattern_file(mnt / "data" / "after", 40 * MiB, seed=98)
            m.kill()
        helpers.lazy_unmount(mnt)
        with mounted_pool(pool, mnt, "nodiscard") as m:
            assert m.status()["discard"]["interval_ns"] == 0
            assert_files(mnt, sums, "after kill -9 and a new mount")
        helpers.assert_fsck_clean(pool, "after online discard and a crash")


def test_fstrim_sends_blkdiscard_to_a_block_device_tier():
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("no loop devices on this machine")
    with temp_pool_path() as pool, temp_ssd_image("loopback") as img, temp_mountpoint() as mnt:
        with open(img, "wb") as f:
            f.truncate(256 * MiB)
        dev = run(["losetup", "--find", "--show", str(img)]).stdout.strip()
        try:
            terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{dev}")
            with mounted_pool(pool, mnt):
                sums = fill_and_thin(mnt)
                run(["sync"])
                held_before = allocated(img)
                n = trimmed_bytes(fstrim(mnt))
                assert n >= 200 * MiB, n
                # The loop driver turns the discard into a hole in its file.
                assert allocated(img) <= held_before - 12 * MiB
                assert_files(mnt, sums, "after fstrim")
            with mounted_pool(pool, mnt):
                assert_files(mnt, sums, "after a remount")
            helpers.assert_fsck_clean(pool, "after fstrim on a loop device")
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                run(["losetup", "--detach", dev])


def test_fstrim_refuses_bad_ranges_unprivileged_callers_and_pools_without_block_tiers():
    with temp_pool_path() as pool, temp_ssd_image() as img, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{img}:128M")
        with mounted_pool(pool, mnt):
            for args in (["--length", "0"], ["--length", "100"],
                         ["--offset", "1T"], ["--offset", str(2**64 - 4096)],
                         ["--minimum", "1T"]):
                cp = fstrim(mnt, *args, check=False)
                assert cp.returncode != 0, args
                assert "Invalid argument" in cp.stderr, (args, cp.stderr)
            # ext4 asks CAP_SYS_ADMIN of FITRIM; so does Terrace (root
            # without it here, as the mount's own user).
            cp = run(["setpriv", "--bounding-set=-sys_admin", "fstrim", str(mnt)], check=False)
            assert cp.returncode != 0
            assert "Operation not permitted" in cp.stderr, cp.stderr
            # A range of PM only discards nothing and succeeds.
            assert trimmed_bytes(fstrim(mnt, "--offset", "0", "--length", "16M")) == 0
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        helpers.mkfs(pool, "64M")
        with mounted_pool(pool, mnt):
            cp = fstrim(mnt, check=False)
            assert cp.returncode != 0
            assert "not supported" in cp.stderr, cp.stderr


def test_fstrim_refuses_a_user_whose_capabilities_are_those_of_a_namespace_of_their_own():
    """Every capability inside a user namespace of one's own (`unshare -r`)
    is none over this mount: FITRIM is refused as for any user. Terrace
    read them from /proc as if they counted, and trimmed."""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-r"]
    if run([*as_nobody, "true"], check=False).returncode != 0:
        pytest.skip("unprivileged user namespaces are off on this kernel")
    with temp_pool_path() as pool, temp_ssd_image() as img, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{img}:128M")
        with mounted_pool(pool, mnt, "allow_other,default_permissions"):
            os.chmod(mnt.parent, 0o711)  # nobody must reach the mount point
            cp = run([*as_nobody, "fstrim", str(mnt)], check=False)
            assert cp.returncode != 0
            assert "Operation not permitted" in cp.stderr, cp.stderr
