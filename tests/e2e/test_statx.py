"""Birth time through statx: `stat` (which asks for STATX_BTIME) shows when
a file was created, and the time stays through writes, attribute changes,
renames and a new mount, as on ext4 (FUSE_STATX; vendor/fuser patch).
"""

from __future__ import annotations

import os
import time

import helpers
from helpers import mounted_pool, run, temp_mountpoint, temp_pool_path


def birth_ns(path) -> int:
    """The birth time `stat` reports, in ns (0 when unknown)."""
    out = run(["stat", "-c", "%.9W", str(path)]).stdout.strip()
    secs, _, frac = out.partition(".")
    return int(secs) * 10**9 + int((frac or "0").ljust(9, "0"))


def test_the_birth_time_is_the_creation_time_and_survives_changes_and_a_remount():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        helpers.mkfs(pool, "256M")
        with mounted_pool(pool, mnt):
            before = time.time_ns()
            (mnt / "d").mkdir()
            f = mnt / "d" / "f"
            f.write_bytes(b"first")
            after = time.time_ns()
            born = birth_ns(f)
            # Births are stamped with the kernel's coarse clock (as ext4
            # stamps files), up to a tick (4 ms here) behind time.time_ns().
            tick = 2 * 10**7
            assert before - tick <= born <= after + tick, (before, born, after)
            assert before - tick <= birth_ns(mnt / "d") <= after + tick
            time.sleep(0.02)
            with open(f, "ab") as out:
                out.write(b" and more")
            os.chmod(f, 0o600)
            os.rename(f, mnt / "d" / "g")
            g = mnt / "d" / "g"
            st = os.stat(g)
            assert st.st_mtime_ns > born and st.st_ctime_ns > born
            assert birth_ns(g) == born, "writes, chmod and rename keep the birth time"
        with mounted_pool(pool, mnt):
            assert birth_ns(mnt / "d" / "g") == born, "kept on PM across mounts"
            # A new file at the same name is a new birth.
            os.unlink(mnt / "d" / "g")
            (mnt / "d" / "g").write_bytes(b"again")
            assert birth_ns(mnt / "d" / "g") > born
