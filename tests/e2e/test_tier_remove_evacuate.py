"""`terrace tier remove MOUNTPOINT ssd` on a pool whose SSD holds data,
while a writer keeps writing and background migration keeps draining PM
(design.md §3 "Removing a tier from a mounted pool"): the removal retires
the SSD, moves its data to the HDD below itself (the recipe `terrace
migrate --to hdd` then `tier remove` lost that race) and removes it; every
file reads back as written, nothing is left on the SSD, and the pool is
fsck-clean and whole after a remount."""

import os
import threading

from helpers import (assert_clean_error, fsck, mounted_pool, pattern, sha256_file, temp_mountpoint,
                     temp_pool_path, terrace, write_pattern_file)
from test_tier_add import where_bytes


def test_a_mounted_ssd_with_data_is_removed_while_a_writer_runs():
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd, \
            temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M",
                "--tier", f"hdd:{hdd}:256M")
        # A low threshold: the drain keeps moving PM data into the SSD.
        with mounted_pool(pool, mnt, "reverse_read_ratio=0,migration_threshold=10") as m:
            digests = {}
            for k in range(6):
                digests[f"cold{k}"] = write_pattern_file(mnt / f"cold{k}", 8 << 20, 20 + k)
            terrace("migrate", "--quiet", "--to", "ssd", mnt)
            assert sum(where_bytes(mnt / f"cold{k}").get("ssd", 0) for k in range(6)) > 0
            stop = threading.Event()
            written = {}
            errors = []

            def writer():
                k = 0
                try:
                    while not stop.is_set() and k < 200:
                        name = f"hot{k}"
                        written[name] = write_pattern_file(mnt / name, 1 << 20, 100 + k)
                        k += 1
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(repr(e))

            t = threading.Thread(target=writer)
            t.start()
            try:
                out = terrace("tier", "remove", mnt, "ssd", timeout=600).stdout
            finally:
                stop.set()
                t.join()
            assert not errors, errors
            assert "Removing tier 1 (ssd" in out and "Removed tier 1" in out, out
            tiers = m.status()["tiers"]
            assert [(t["id"], t["kind"]) for t in tiers] == [(0, "pm"), (2, "hdd")], tiers
            digests.update(written)
            for name, digest in digests.items():
                assert sha256_file(mnt / name) == digest, name
                left = where_bytes(mnt / name)
                assert not left.get("ssd") and not left.get("ssd-copy"), (name, left)
            assert ssd.read_bytes()[:4096] == bytes(4096), "the tier header was not wiped"
        cp = fsck(pool)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        with mounted_pool(pool, mnt) as m:
            assert [t["id"] for t in m.status()["tiers"]] == [0, 2]
            for name, digest in digests.items():
                assert sha256_file(mnt / name) == digest, name


def test_clones_shared_blocks_count_once_when_the_removal_weighs_the_room():
    """A 12 MiB file on the SSD and its clone (copy_file_range, then written
    into, so its extents no longer match the source's) hold 12 MiB there,
    not 24: with a 10 MiB file beside them the refusal for lack of room on
    the 20 MiB HDD says 22.0 MiB are needed; without it the removal goes
    through, the shared blocks moved once."""
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd, \
            temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M",
                "--tier", f"hdd:{hdd}:20M")
        with mounted_pool(pool, mnt, "reverse_read_ratio=0") as m:
            digest = write_pattern_file(mnt / "a", 12 << 20, 31)
            write_pattern_file(mnt / "c", 10 << 20, 32)
            terrace("migrate", "--quiet", "--to", "ssd", mnt)
            with open(mnt / "a", "rb") as s, open(mnt / "b", "wb") as d:
                left = 12 << 20
                while left:
                    n = os.copy_file_range(s.fileno(), d.fileno(), left)
                    assert n > 0
                    left -= n
            with open(mnt / "b", "r+b") as d:
                d.seek(100 * 4096)
                d.write(pattern(4096, 33))
            b_digest = sha256_file(mnt / "b")
            assert where_bytes(mnt / "b").get("ssd", 0) >= (12 << 20) - 4096
            cp = terrace("tier", "remove", mnt, "ssd", check=False, timeout=600)
            msg = assert_clean_error(cp, mentions=["needs 22.0 MiB on tier 2 (hdd)"])
            assert "room for" in msg, msg
            assert [t["id"] for t in m.status()["tiers"]] == [0, 1, 2]
            os.unlink(mnt / "c")
            out = terrace("tier", "remove", mnt, "ssd", timeout=600).stdout
            assert "Removed tier 1" in out, out
            assert [t["id"] for t in m.status()["tiers"]] == [0, 2]
            assert sha256_file(mnt / "a") == digest
            assert sha256_file(mnt / "b") == b_digest
            for name in ("a", "b"):
                left = where_bytes(mnt / name)
                assert not left.get("ssd") and not left.get("ssd-copy"), (name, left)
        cp = fsck(pool)
        assert cp.returncode == 0, cp.stdout + cp.stderr
