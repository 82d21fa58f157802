"""Placement and reads of the object tier (S3, design §5n) through a real
mount against a real MinIO: `terrace rule DIR s3` sends the data of files
below DIR to the object tier (through the DRAM cache and write-back),
`where` shows it there, it reads back byte-exact after a remount, and other
files keep the normal placement; a sequential cold read fetches each byte
from the store once."""

from helpers import mounted_pool, terrace, wait_until, sha256_file
from test_s3_tier import object_stats, pool_with_s3, s3, where_tiers, write_fsynced  # noqa: F401


def test_a_rule_pins_a_directory_to_the_object_tier(s3):  # noqa: F811
    with pool_with_s3(s3) as (pool, mnt, _url):
        with mounted_pool(pool, mnt) as m:
            archive = mnt / "archive"
            archive.mkdir()
            assert "pinned to s3" in terrace("rule", archive, "s3").stdout
            files = {archive / f"a{i}": write_fsynced(archive / f"a{i}", (2 << 20) + i * 4096, 40 + i)
                     for i in range(3)}
            other = mnt / "hot"
            other_digest = write_fsynced(other, 1 << 20, 50)
            # fsync made them durable; the rule's tier is where they land.
            for f in files:
                assert wait_until(lambda: where_tiers(f).get("s3", 0) == f.stat().st_size, 20), \
                    where_tiers(f)
            assert where_tiers(other).get("s3", 0) == 0, where_tiers(other)
            assert object_stats(m)["live_bytes"] >= sum(f.stat().st_size for f in files)
        with mounted_pool(pool, mnt):
            for f, digest in files.items():
                assert sha256_file(f) == digest
                assert where_tiers(f).get("s3", 0) == f.stat().st_size
            assert sha256_file(other) == other_digest


def test_a_sequential_cold_read_of_object_data_fetches_each_byte_once(s3):  # noqa: F811
    """Read-ahead on the object tier fetches 8 MiB per miss as parallel
    ranged GETs; the kernel's concurrent read-ahead requests wait for a
    fetch in progress instead of fetching the same bytes again (before:
    1.86 bytes fetched per byte read)."""
    size = 32 << 20
    with pool_with_s3(s3) as (pool, mnt, _url):
        with mounted_pool(pool, mnt):
            digest = write_fsynced(mnt / "cold", size, 77)
            terrace("migrate", "--quiet", "--to", "s3", mnt, mnt / "cold")
            assert where_tiers(mnt / "cold").get("s3") == size
        # A fresh mount: nothing cached; reads must not move the data up,
        # and only the reader's fetches count (the cleaner, which reads the
        # live blocks of partly dead parts it rewrites, is off).
        with mounted_pool(pool, mnt, "reverse_read_ratio=0,object_clean_live_percent=0") as m:
            before = object_stats(m)["requests"]
            with open(mnt / "cold", "rb", buffering=0) as f:
                while f.read(1 << 20):
                    pass
            after = object_stats(m)["requests"]
            fetched = after["get_bytes"] - before["get_bytes"]
            assert size <= fetched <= size * 1.1, (fetched, size)
            assert after["gets"] - before["gets"] <= size // (2 << 20) + 4, (before, after)
            assert sha256_file(mnt / "cold") == digest
