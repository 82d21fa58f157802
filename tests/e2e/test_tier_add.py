"""Tiers added to and removed from an existing pool (`terrace tier add` and
`terrace tier remove`, design.md §3, issue 19 point 1): a pool made with PM
only gets an SSD tier and then an HDD tier, data moves onto them and reads
back after remounts, the pool stays fsck-clean; a tier is removed with
its data moved to the other tiers first, from an unmounted pool or a
mounted one with no unmount; every refusal is a clear one-line error that changes
nothing; an object tier is added behind them against a real MinIO."""

import json
import time

from helpers import (assert_clean_error, fsck, mounted_pool, sha256_file, temp_mountpoint,
                     temp_pool_path, terrace, write_pattern_file)
from helpers import unique_name
from test_s3_tier import s3  # noqa: F401


def where_bytes(path) -> dict:
    return json.loads(terrace("where", "--json", path).stdout)["bytes_per_tier"]


def assert_fsck_clean(pool):
    cp = fsck(pool)
    assert cp.returncode == 0, cp.stdout + cp.stderr


def test_a_pm_only_pool_gains_block_tiers_that_take_data_and_loses_the_last_once_empty():
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd, \
            temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with mounted_pool(pool, mnt):
            digest = write_pattern_file(mnt / "f", 6 << 20, 7)
        out = terrace("tier", "add", pool, f"ssd:{ssd}:256M").stdout
        assert "Added tier 1" in out and "ssd" in out
        terrace("tier", "add", pool, f"hdd:{hdd}:256M")
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt) as m:
            kinds = [t["kind"] for t in m.status()["tiers"]]
            assert kinds == ["pm", "ssd", "hdd"], kinds
            # Pinned, so that reverse migration does not bring the file back
            # up while the test reads it.
            terrace("rule", mnt / "f", "hdd")
            terrace("migrate", "--quiet", "--to", "hdd", mnt, mnt / "f")
            assert where_bytes(mnt / "f").get("hdd") == 6 << 20
            assert sha256_file(mnt / "f") == digest
        # A rule pins the file to the hdd: removing it is refused, naming
        # the file, and nothing changes.
        cp = terrace("tier", "remove", pool, check=False)
        assert_clean_error(cp, mentions=["placement rule", "/f"])
        with mounted_pool(pool, mnt) as m:
            assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "ssd", "hdd"]
            assert where_bytes(mnt / "f").get("hdd") == 6 << 20
            assert sha256_file(mnt / "f") == digest
            terrace("rule", mnt / "f", "ssd")
        # The removal moves the last tier's data up to the ssd.
        out = terrace("tier", "remove", pool).stdout
        assert "Removed tier 2" in out
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt) as m:
            assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "ssd"]
            assert where_bytes(mnt / "f").get("ssd") == 6 << 20
            assert sha256_file(mnt / "f") == digest
        # The removed tier's file no longer passes for a tier of the pool.
        terrace("tier", "add", pool, f"hdd:{hdd}:256M")
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt):
            assert sha256_file(mnt / "f") == digest


def test_tier_changes_that_would_break_the_pool_are_refused_with_one_clear_line():
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd, \
            temp_pool_path("ssd2") as ssd2, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"hdd:{hdd}:128M")
        with mounted_pool(pool, mnt):
            # The daemon of a mounted pool checks the order as mkfs does.
            cp = terrace("tier", "add", mnt, f"ssd:{ssd}:128M", check=False)
            assert_clean_error(cp, mentions=["fastest to slowest"])
            # A tier inside the pool's own mount: the pool could never mount
            # again (it would need itself). Refused online and offline, by
            # mkfs too, also through a symlink; nothing is created there.
            inside = mnt / "inside.img"
            cp = terrace("tier", "add", mnt, f"hdd:{inside}:16M", check=False)
            assert_clean_error(cp, mentions=["Terrace mount", str(mnt)])
            (mnt / "sub").mkdir()
            link = ssd2.parent / (ssd2.name + ".link")
            link.symlink_to(mnt / "sub")
            try:
                cp = terrace("mkfs", "--tier", f"pm:{ssd2}:64M", "--tier",
                             f"hdd:{link}/t.img:128M", check=False)
                assert_clean_error(cp, mentions=["Terrace mount"])
            finally:
                link.unlink()
            assert sorted(p.name for p in mnt.iterdir()) == ["sub"]
            (mnt / "sub").rmdir()
        before = pool.read_bytes()[:8192]
        # Slower to faster, a second pm tier, a tier the pool already has.
        cp = terrace("tier", "add", pool, f"ssd:{ssd2}:128M", check=False)
        assert_clean_error(cp, mentions=["fastest to slowest"])
        cp = terrace("tier", "add", pool, f"pm:{ssd2}:128M", check=False)
        assert_clean_error(cp, mentions=["one pm tier"])
        cp = terrace("tier", "add", pool, f"hdd:{hdd}:128M", check=False)
        assert_clean_error(cp, mentions=["already"])
        cp = terrace("tier", "add", pool, f"hdd:{ssd2}:1M", check=False)
        assert_clean_error(cp, mentions=["at least"])
        cp = terrace("tier", "add", mnt / "nope", f"hdd:{ssd2}:128M", check=False)
        assert_clean_error(cp, mentions=["nope"])
        cp = terrace("tier", "add", hdd, f"hdd:{ssd2}:128M", check=False)
        assert_clean_error(cp, mentions=["not a Terrace pool"])
        assert pool.read_bytes()[:8192] == before, "a refused change wrote the superblock"
        with mounted_pool(pool, mnt) as m:
            assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "hdd"]
        # PM alone cannot be removed.
        terrace("tier", "remove", pool)
        cp = terrace("tier", "remove", pool, check=False)
        assert_clean_error(cp, mentions=["only its pm tier"])


def test_an_object_tier_is_added_behind_the_block_tiers_and_takes_data(s3):  # noqa: F811
    prefix = unique_name("added").replace("_", "-").lower()
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        cp = terrace("tier", "add", pool, f"s3:{s3['url']}/{prefix}", check=False)
        assert_clean_error(cp, mentions=["ssd or hdd tier before it"])
        terrace("tier", "add", pool, f"ssd:{ssd}:128M")
        terrace("tier", "add", pool, f"s3:{s3['url']}/{prefix}:1G")
        with mounted_pool(pool, mnt) as m:
            assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "ssd", "s3"]
            digest = write_pattern_file(mnt / "cold", 3 << 20, 9)
            terrace("migrate", "--quiet", "--to", "s3", mnt, mnt / "cold")
            assert where_bytes(mnt / "cold").get("s3") == 3 << 20
        with mounted_pool(pool, mnt):
            assert sha256_file(mnt / "cold") == digest
        assert_fsck_clean(pool)


def test_a_mounted_pool_gains_tiers_at_once_that_take_data_with_no_unmount():
    """`terrace tier add MOUNTPOINT` (or the pm tier of a mounted pool): the
    daemon formats the tier and attaches it; a file held open across it keeps
    working, writes beyond PM's size then fit, data moves onto the new tiers,
    and the pool is fsck-clean and whole after the unmount."""
    import os
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd, \
            temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        digests = {}
        with mounted_pool(pool, mnt) as m:
            digests["f"] = write_pattern_file(mnt / "f", 6 << 20, 7)
            held = os.open(mnt / "held", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                os.write(held, b"before")
                out = terrace("tier", "add", mnt, f"ssd:{ssd}:256M").stdout
                assert "Added tier 1" in out and "takes data now" in out, out
                assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "ssd"]
                os.write(held, b" after")
                os.fsync(held)
            finally:
                os.close(held)
            assert (mnt / "held").read_bytes() == b"before after"
            # More than PM holds: the new tier takes the rest.
            for i in range(3):
                digests[f"big{i}"] = write_pattern_file(mnt / f"big{i}", 40 << 20, 10 + i)
            terrace("migrate", "--quiet", "--to", "ssd", mnt, mnt / "f")
            assert where_bytes(mnt / "f").get("ssd") == 6 << 20
            # The pool named by its pm tier reaches the same daemon.
            out = terrace("tier", "add", pool, f"hdd:{hdd}:256M").stdout
            assert "Added tier 2" in out, out
            assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "ssd", "hdd"]
            terrace("rule", mnt / "f", "hdd")
            terrace("migrate", "--quiet", "--to", "hdd", mnt, mnt / "f")
            assert where_bytes(mnt / "f").get("hdd") == 6 << 20
            for name, d in digests.items():
                assert sha256_file(mnt / name) == d, name
            # A refused attach changes nothing.
            cp = terrace("tier", "add", mnt, f"ssd:{ssd}:256M", check=False)
            assert_clean_error(cp)
            assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "ssd", "hdd"]
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt) as m:
            assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "ssd", "hdd"]
            for name, d in digests.items():
                assert sha256_file(mnt / name) == d, name


def test_writes_after_a_tier_is_added_survive_a_kill_when_the_kernel_stopped_sending_fsyncs():
    """A PM-only pool on /dev/shm answers the first fsync ENOSYS and the
    kernel completes every later fsync itself (design.md §5b). A tier added
    to that mount must not leave writes in the DRAM cache, where no fsync
    would ever reach them: data written after the add, far beyond PM and
    never fsync'd by a request, is whole after kill -9 of the daemon."""
    import os
    import helpers
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        digests = {}
        # Cached pages stay dirty until the kill (no age or level flush).
        m = helpers.mount(pool, mnt, "writeback_age_ns=3600s,writeback_dirty_percent=100")
        try:
            fd = os.open(mnt / "first", os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                os.write(fd, b"x" * 4096)
                os.fsync(fd)
            finally:
                os.close(fd)
            assert m.status()["fsync_in_kernel"] is True
            terrace("tier", "add", mnt, f"ssd:{ssd}:512M")
            for i in range(3):
                name = f"after{i}"
                # Its fsync is completed by the kernel: no request.
                digests[name] = write_pattern_file(mnt / name, 48 << 20, 20 + i)
            m.kill()
        finally:
            helpers.lazy_unmount(mnt)
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt):
            for name, d in digests.items():
                assert sha256_file(mnt / name) == d, f"{name} lost after kill -9"


def test_an_object_tier_is_attached_to_a_mounted_pool_and_takes_data(s3):  # noqa: F811
    prefix = unique_name("live").replace("_", "-").lower()
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:128M")
        with mounted_pool(pool, mnt) as m:
            digest = write_pattern_file(mnt / "cold", 3 << 20, 9)
            terrace("tier", "add", mnt, f"s3:{s3['url']}/{prefix}:1G")
            assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "ssd", "s3"]
            terrace("migrate", "--quiet", "--to", "s3", mnt, mnt / "cold")
            assert where_bytes(mnt / "cold").get("s3") == 3 << 20
        with mounted_pool(pool, mnt, "reverse_read_ratio=0"):
            assert sha256_file(mnt / "cold") == digest
            assert where_bytes(mnt / "cold").get("s3") == 3 << 20
        assert_fsck_clean(pool)


def kinds_of(m) -> list:
    return [t["kind"] for t in m.status()["tiers"]]


def test_the_last_tier_of_a_mounted_pool_is_removed_once_nothing_is_stored_on_it():
    """`terrace tier remove MOUNTPOINT` (or the pm tier of a mounted pool):
    the daemon removes an empty last tier at once, wipes its header and lets
    go of its file (it can be added again); a file's data on it moves up
    to pm with the removal; while a placement rule names it, the removal
    is refused with one line and nothing changes; the pool stays whole
    and fsck-clean across the remount."""
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        # No reverse migration: data moved onto the tier stays there.
        with mounted_pool(pool, mnt, "reverse_read_ratio=0") as m:
            digest = write_pattern_file(mnt / "f", 6 << 20, 7)
            terrace("tier", "add", mnt, f"ssd:{ssd}:256M")
            assert kinds_of(m) == ["pm", "ssd"]
            out = terrace("tier", "remove", mnt).stdout
            assert "Removed tier 1" in out and "may be deleted" in out, out
            assert kinds_of(m) == ["pm"]
            assert sha256_file(mnt / "f") == digest
            assert ssd.read_bytes()[:4096] == bytes(4096), "the tier header was not wiped"
            # The daemon let go of the file: it takes it again as a tier.
            terrace("tier", "add", mnt, f"ssd:{ssd}:256M")
            terrace("migrate", "--quiet", "--to", "ssd", mnt, mnt / "f")
            assert where_bytes(mnt / "f").get("ssd") == 6 << 20
            # The last tier's data moves up to pm with the removal.
            out = terrace("tier", "remove", mnt).stdout
            assert "Removing tier 1 (ssd" in out and "Removed tier 1" in out, out
            assert kinds_of(m) == ["pm"]
            assert not where_bytes(mnt / "f").get("ssd")
            assert sha256_file(mnt / "f") == digest
            terrace("tier", "add", mnt, f"ssd:{ssd}:256M")
            digest_g = write_pattern_file(mnt / "g", 1 << 20, 8)
            terrace("migrate", "--quiet", "--to", "ssd", mnt, mnt / "g")
            assert where_bytes(mnt / "g").get("ssd") == 1 << 20
            # A rule naming the tier refuses it, before anything moves.
            (mnt / "d").mkdir()
            terrace("rule", mnt / "d", "ssd")
            cp = terrace("tier", "remove", mnt, check=False)
            assert_clean_error(cp, mentions=["placement rule", "terrace rule", "/d"])
            assert kinds_of(m) == ["pm", "ssd"]
            assert where_bytes(mnt / "g").get("ssd") == 1 << 20
            terrace("rule", mnt / "d", "auto")
            # The pool named by its pm tier reaches the same daemon.
            out = terrace("tier", "remove", pool).stdout
            assert "Removed tier 1" in out and str(mnt) in out, out
            assert kinds_of(m) == ["pm"]
            assert sha256_file(mnt / "f") == digest
            assert sha256_file(mnt / "g") == digest_g
            cp = terrace("tier", "remove", mnt, check=False)
            assert_clean_error(cp, mentions=["only its pm tier"])
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt) as m:
            assert kinds_of(m) == ["pm"]
            assert sha256_file(mnt / "f") == digest
            assert sha256_file(mnt / "g") == digest_g


def test_an_object_tier_is_removed_from_a_mounted_pool_once_its_data_moves_up(s3):  # noqa: F811
    prefix = unique_name("gone").replace("_", "-").lower()
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:128M")
        with mounted_pool(pool, mnt, "reverse_read_ratio=0") as m:
            digest = write_pattern_file(mnt / "cold", 3 << 20, 9)
            terrace("tier", "add", mnt, f"s3:{s3['url']}/{prefix}:1G")
            terrace("migrate", "--quiet", "--to", "s3", mnt, mnt / "cold")
            # The removal moves the data up to the ssd itself.
            out = terrace("tier", "remove", mnt).stdout
            assert "Removed tier 2" in out and "marker" in out, out
            assert kinds_of(m) == ["pm", "ssd"]
            assert where_bytes(mnt / "cold").get("ssd") == 3 << 20
            assert sha256_file(mnt / "cold") == digest
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt) as m:
            assert kinds_of(m) == ["pm", "ssd"]
            assert sha256_file(mnt / "cold") == digest


def test_the_ssd_of_an_unmounted_pm_ssd_hdd_pool_is_removed_and_its_data_moves_down():
    """`terrace tier remove POOL ssd` (issue 19): a tier that is not the
    last goes, its data moved down first, the hdd keeps its id 2, a tier added later takes
    id 3; refusals (pm, unknown tier) are one line and change
    nothing; the pool is fsck-clean and whole after each step."""
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd, \
            temp_pool_path("hdd2") as hdd2, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:128M",
                "--tier", f"hdd:{hdd}:128M")
        with mounted_pool(pool, mnt, "reverse_read_ratio=0"):
            digest = write_pattern_file(mnt / "f", 4 << 20, 3)
            terrace("migrate", "--quiet", "--to", "ssd", mnt, mnt / "f")
            assert where_bytes(mnt / "f").get("ssd") == 4 << 20
        before = pool.read_bytes()[:8192]
        for tier, says in [("pm", "pm tier"), ("0", "pm tier"), ("7", "no tier 7"),
                           ("nvme", "unknown tier")]:
            cp = terrace("tier", "remove", pool, tier, check=False)
            assert_clean_error(cp, mentions=[says])
        assert pool.read_bytes()[:8192] == before, "a refused removal wrote the superblock"
        # The removal moves the ssd's data down to the hdd itself.
        out = terrace("tier", "remove", pool, "ssd").stdout
        assert "Removed tier 1" in out and "may be deleted" in out, out
        assert "moving its data" in out, out
        assert ssd.read_bytes()[:4096] == bytes(4096), "the tier header was not wiped"
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt) as m:
            tiers = m.status()["tiers"]
            assert [(t["id"], t["kind"]) for t in tiers] == [(0, "pm"), (2, "hdd")], tiers
            assert where_bytes(mnt / "f").get("hdd") == 4 << 20
            assert sha256_file(mnt / "f") == digest
        out = terrace("tier", "add", pool, f"hdd:{hdd2}:128M").stdout
        assert "Added tier 3" in out, out
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt) as m:
            assert [t["id"] for t in m.status()["tiers"]] == [0, 2, 3]
            terrace("migrate", "--quiet", "--to", "3", mnt, mnt / "f")
            assert sha256_file(mnt / "f") == digest
        assert_fsck_clean(pool)


def test_the_ssd_of_a_mounted_pm_ssd_hdd_pool_is_removed_at_once():
    """`terrace tier remove MOUNTPOINT ssd`: the daemon removes a middle
    tier, its data moved down first, with a file open across the change;
    the hdd keeps its data and id; the pool is whole after a remount."""
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd, \
            temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:128M",
                "--tier", f"hdd:{hdd}:128M")
        with mounted_pool(pool, mnt, "reverse_read_ratio=0") as m:
            digest = write_pattern_file(mnt / "f", 4 << 20, 5)
            digest_g = write_pattern_file(mnt / "g", 1 << 20, 6)
            terrace("migrate", "--quiet", "--to", "ssd", mnt, mnt / "f")
            assert where_bytes(mnt / "f").get("ssd") == 4 << 20
            with open(mnt / "g", "rb") as held:
                out = terrace("tier", "remove", mnt, "ssd").stdout
                assert "Removing tier 1 (ssd" in out, out
                assert "Removed tier 1" in out and str(mnt) in out, out
                assert len(held.read()) == 1 << 20
            tiers = m.status()["tiers"]
            assert [(t["id"], t["kind"]) for t in tiers] == [(0, "pm"), (2, "hdd")], tiers
            assert where_bytes(mnt / "f").get("hdd") == 4 << 20
            assert sha256_file(mnt / "f") == digest
            assert sha256_file(mnt / "g") == digest_g
            assert ssd.read_bytes()[:4096] == bytes(4096), "the tier header was not wiped"
            # New data still lands on the remaining tiers.
            digest_h = write_pattern_file(mnt / "h", 2 << 20, 7)
            terrace("migrate", "--quiet", "--to", "hdd", mnt, mnt / "h")
            assert where_bytes(mnt / "h").get("hdd") == 2 << 20
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt) as m:
            assert [t["id"] for t in m.status()["tiers"]] == [0, 2]
            assert sha256_file(mnt / "f") == digest
            assert sha256_file(mnt / "g") == digest_g
            assert sha256_file(mnt / "h") == digest_h


def test_a_tier_holding_inode_logs_of_cold_files_is_removed_and_the_logs_move_with_it():
    """Log migration moves the logs of cold small files to the ssd, where
    no command of the user moves them (`terrace migrate` moves data).
    Removing the ssd once its data moved down moves the logs to the hdd
    itself; every file reads back, before and after a remount, and fsck is
    clean. (It used to refuse: "still holds … inode logs: move them to
    another tier first (terrace migrate …)", which could not be done.)"""
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd, \
            temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:256M",
                "--tier", f"hdd:{hdd}:256M")
        body = lambda i: bytes([i % 251]) * (100 + i % 3000)  # noqa: E731
        n = 3000
        with mounted_pool(pool, mnt, "migration_threshold=1,migration_age_ns=0") as m:
            for d in range(4):
                (mnt / f"d{d}").mkdir()
            for i in range(n):
                (mnt / f"d{i % 4}" / f"f{i}").write_bytes(body(i))
            deadline = time.monotonic() + 30
            while m.status()["log_migration"]["logs_on_tiers"] < 100:
                assert time.monotonic() < deadline, m.status()["log_migration"]
                time.sleep(0.2)
            terrace("set", mnt, "migration_threshold", "90")
            terrace("migrate", "--quiet", "--to", "hdd", mnt)
            on_ssd = m.status()["log_migration"]["logs_on_tiers"]
            assert on_ssd > 0, "moving data recalled every log: the test needs some on the ssd"
            out = terrace("tier", "remove", mnt, "ssd").stdout
            assert "Removed tier 1" in out, out
            assert kinds_of(m) == ["pm", "hdd"]
            assert m.status()["log_migration"]["logs_on_tiers"] == on_ssd, "the logs went to the hdd"
            bad = [i for i in range(n) if (mnt / f"d{i % 4}" / f"f{i}").read_bytes() != body(i)]
            assert not bad, f"{len(bad)} files differ, e.g. {bad[:5]}"
        assert_fsck_clean(pool)
        with mounted_pool(pool, mnt) as m:
            assert [t["id"] for t in m.status()["tiers"]] == [0, 2]
            bad = [i for i in range(n) if (mnt / f"d{i % 4}" / f"f{i}").read_bytes() != body(i)]
            assert not bad, f"{len(bad)} files differ after a remount, e.g. {bad[:5]}"


def test_fsck_of_a_mounted_pool_is_refused_naming_the_mount():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with mounted_pool(pool, mnt):
            cp = fsck(pool)
            assert cp.returncode == 2, cp
            assert_clean_error(cp, mentions=["mounted on", "unmount it first", str(mnt)])


def test_data_moves_between_two_tiers_of_one_kind_so_the_old_one_can_be_retired():
    """An hdd replaced by a second hdd: `terrace migrate --to 3` must move
    what is on tier 2. Extent lists name tiers by kind, so the data on the
    old hdd looked "already there", nothing moved, and `tier remove 2`
    refused while pointing at the migrate that had done nothing."""
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd, \
            temp_pool_path("hdd2") as hdd2, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:128M")
        with mounted_pool(pool, mnt, "reverse_read_ratio=0"):
            terrace("tier", "add", mnt, f"hdd:{hdd}:128M")
            terrace("tier", "add", mnt, f"hdd:{hdd2}:128M")
            digest = write_pattern_file(mnt / "f", 6 << 20, 9)
            terrace("migrate", "--quiet", "--to", "2", mnt, mnt / "f")
            assert where_bytes(mnt / "f").get("hdd") == 6 << 20
            out = terrace("migrate", "--to", "3", mnt).stdout
            assert "moved 6.00 MiB" in out, out
            out = terrace("tier", "remove", mnt, "2").stdout
            assert "Removed tier 2" in out, out
            assert where_bytes(mnt / "f").get("hdd") == 6 << 20
            assert sha256_file(mnt / "f") == digest
