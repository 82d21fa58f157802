#!/usr/bin/env python3
"""RocksDB reads of issue 16's table: `readseq` and `readrandom` of a
database of 256 MiB (256k values of 1,000 bytes, no compression) that was
just written and compacted, so its files are in the page cache of each
system (ext4 on the disk, /var/tmp; Terrace OLD and NEW, PM-only pool of
2 GiB on /dev/shm), alternated per round in the same run (same_run.py).

Each run: `fillseq` without sync (not measured), `compact`, then `readseq`
(one scan of every key) and `readrandom` (200k point reads), one thread,
db_bench from Debian's rocksdb-tools with the flags of bench/kv.py.

    bench/rocksdb_reads.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kv  # noqa: E402
import same_run  # noqa: E402

NUM = int(os.environ.get("ROCKS_NUM", "262144"))
READS = int(os.environ.get("ROCKS_READS", "200000"))


def ops_per_s(out, bench):
    for m in kv.LINE.finditer(out):
        if m["bench"] == bench:
            return float(m["ops"]), float(m["mb"]) if m["mb"] else None
    raise SystemExit(f"no {bench} line in db_bench's output:\n{out[-2000:]}")


def measure(d):
    db = os.path.join(d, "db")
    common = [kv.db_bench(), *kv.COMMON, f"--db={db}", f"--num={NUM}", "--value_size=1000"]
    subprocess.run([*common, "--benchmarks=fillseq,compact", "--sync=0"], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([*common, "--use_existing_db=1", "--benchmarks=readseq,readrandom",
                          f"--reads={READS}"], check=True, capture_output=True, text=True).stdout
    seq, seq_mb = ops_per_s(out, "readseq")
    rnd, _ = ops_per_s(out, "readrandom")
    subprocess.run(["rm", "-rf", db], check=True)
    return {"readseq_ops_s": seq, "readseq_mb_s": seq_mb, "readrandom_ops_s": rnd}


if __name__ == "__main__":
    same_run.main(measure, "2G", ("--inodes", "20000"))
