"""The object tier's requests (issue 19 point 5) in the metrics endpoint, in
`terrace status` and in `terrace iostat`, against a real MinIO: a
`terrace migrate --to s3` shows as PUTs whose bytes are the data moved, a
cold read after a remount as GETs that fetched the file, and iostat --json
shows the PUTs in the intervals of the migration."""

from __future__ import annotations

import json
import subprocess
import time

from helpers import TERRACE_BIN, free_port, mounted_pool, scrape_metrics, sha256_file, terrace
from test_s3_tier import object_stats, pool_with_s3, s3, where_tiers, write_fsynced  # noqa: F401

MiB = 1 << 20
S3 = '{tier="s3",tier_id="2"}'


def _object(samples: dict, name: str, op: str | None = None) -> float:
    labels = S3 if op is None else S3[:-1] + f',op="{op}"}}'
    return samples[f"terrace_object_{name}{labels}"]


def test_a_migration_to_s3_and_a_cold_read_move_the_put_and_get_series(s3):  # noqa: F811
    size = 12 * MiB
    port = free_port()
    with pool_with_s3(s3) as (pool, mnt, _url):
        # The data stays on PM until `terrace migrate` moves it.
        with mounted_pool(pool, mnt, f"metrics=127.0.0.1:{port},placement_policy=pm-only,"
                                     "migration_threshold=99") as m:
            digest = write_fsynced(mnt / "f", size, 5)
            assert where_tiers(mnt / "f").get("pm") == size, where_tiers(mnt / "f")
            _, before = scrape_metrics(port)
            terrace("migrate", "--quiet", "--to", "s3", mnt, mnt / "f")
            assert where_tiers(mnt / "f").get("s3") == size
            _, after = scrape_metrics(port)
            puts = (_object(after, "requests_total", "put")
                    - _object(before, "requests_total", "put"))
            up = _object(after, "uploaded_bytes_total") - _object(before, "uploaded_bytes_total")
            assert puts > 0, after
            # The file's bytes, plus at most a little (the marker, block padding).
            assert size <= up <= size * 1.05 + MiB, (up, size)
            assert _object(after, "parts") >= 1
            assert _object(after, "live_bytes") >= size
            assert _object(after, "unreachable") == 0
            assert _object(after, "failed_requests_total") == 0
            # The same counters as `status --json`, and a line in the table.
            req = object_stats(m)["requests"]
            assert req["puts"] >= _object(after, "requests_total", "put")
            text = terrace("status", mnt).stdout
            line = next((x for x in text.splitlines() if x.strip().startswith("s3   requests:")), None)
            assert line is not None, text
            assert f"{req['puts']} PUTs" in line and "GETs" in line and "deletes" in line, line
        # A fresh mount: nothing cached, reads stay on the object tier.
        with mounted_pool(pool, mnt, f"metrics=127.0.0.1:{port},reverse_read_ratio=0"):
            _, before = scrape_metrics(port)
            assert sha256_file(mnt / "f") == digest
            _, after = scrape_metrics(port)
            gets = (_object(after, "requests_total", "get")
                    - _object(before, "requests_total", "get"))
            down = (_object(after, "downloaded_bytes_total")
                    - _object(before, "downloaded_bytes_total"))
            assert gets > 0, after
            assert size <= down <= size * 1.2, (down, size)
            # A read uploads nothing.
            assert _object(after, "requests_total", "put") == _object(before, "requests_total", "put")


def test_iostat_shows_the_puts_of_a_migration_to_s3(s3):  # noqa: F811
    size = 24 * MiB
    with pool_with_s3(s3) as (pool, mnt, _url):
        with mounted_pool(pool, mnt):
            write_fsynced(mnt / "f", size, 9)
            io = subprocess.Popen([str(TERRACE_BIN), "iostat", str(mnt), "0.1", "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                time.sleep(0.3)  # a few intervals before the migration
                terrace("migrate", "--quiet", "--to", "s3", mnt, mnt / "f")
                time.sleep(0.5)  # and the intervals that saw its last requests
            finally:
                io.terminate()
                out, err = io.communicate(timeout=30)
            rows = [json.loads(x) for x in out.splitlines() if x.strip()]
            assert len(rows) >= 5, (out, err)
            for r in rows:
                kinds = [t["kind"] for t in r["tiers"]]
                assert kinds == ["pm", "ssd", "s3"], r
                assert "object" not in r["tiers"][0] and "object" not in r["tiers"][1], r
            s3_rows = [r["tiers"][2]["object"] for r in rows]
            puts = sum(o["puts_s"] * r["interval_s"] for o, r in zip(s3_rows, rows))
            up = sum(o["put_bytes_s"] * r["interval_s"] for o, r in zip(s3_rows, rows))
            assert puts >= 0.99, (puts, s3_rows)
            assert size * 0.99 <= up <= size * 1.05 + MiB, (up, size)
            assert s3_rows[0]["puts_s"] == 0, "PUTs before `terrace migrate`"
            # The table's line for the tier.
            cp = subprocess.run([str(TERRACE_BIN), "iostat", str(mnt), "0.1", "1"],
                                capture_output=True, text=True, timeout=30)
            assert cp.returncode == 0 and "2:s3   object store: GET " in cp.stdout, cp.stdout
