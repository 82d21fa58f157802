#!/usr/bin/env python3
"""The object tier against a plain S3 client (issue 19's benchmarks), in the
same run, on one MinIO server on 127.0.0.1 (tests/minio/minio.sh; its data on
the disk, /var/tmp):

- *client PUT*: boto3 uploads DATA_MB of 16 MiB objects, 4 at a time (the
  object tier's segment size and upload concurrency);
- *Terrace migration*: a pool PM 1G + SSD 2G + s3, files of 64 MiB written
  and fsync'd on PM, then `terrace migrate --to s3` of all of them: bytes per
  second of the migrate command (upload, sync and commit included);
- *client GET*: boto3 downloads those objects, 4 at a time;
- *Terrace cold read*: a fresh mount (no page cached anywhere), every file
  read sequentially in 1 MiB reads;
- *Terrace through the DRAM cache*: the kernel's page cache dropped, the
  daemon's DRAM cache (1 GiB, holding the data) kept: read again.

Rounds alternate client and Terrace; medians. GET and PUT counts per GiB
come from `terrace status` (the object tier's request counters).

    bench/s3_tier.py [TERRACE] [ROUNDS] > result.json
"""
import concurrent.futures as cf
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINIO_SH = os.path.join(REPO, "tests", "minio", "minio.sh")
DATA_MB = int(os.environ.get("S3_BENCH_MB", "512"))
# `true`: upload bodies signed (SigV4 over the payload's SHA-256), the default
# of a tier over plain http; `false`: unsigned, the default over https.
SIGN_PAYLOAD = os.environ.get("S3_BENCH_SIGN_PAYLOAD", "false")
FILE_MB = 64
OBJECT_MB = 16
CONCURRENCY = 4
MiB = 1 << 20


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def minio(cmd, d):
    out = subprocess.run(["bash", MINIO_SH, cmd, d], check=True, capture_output=True,
                         text=True, timeout=900).stdout
    env = {}
    for line in out.splitlines():
        if line.startswith("export "):
            k, v = line[len("export "):].split("=", 1)
            env[k] = shlex.split(v)[0]
    return env


def s3_client(env):
    import boto3
    from botocore.config import Config
    url = env["TERRACE_S3_URL"]
    endpoint, bucket = url.rsplit("/", 1)
    client = boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_REGION"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                          config=Config(max_pool_connections=CONCURRENCY * 2,
                                        s3={"addressing_style": "path"}))
    return client, bucket


def client_round(env, r):
    """PUT then GET DATA_MB in OBJECT_MB objects; MB/s of each."""
    client, bucket = s3_client(env)
    n = DATA_MB // OBJECT_MB
    body = os.urandom(OBJECT_MB * MiB)
    keys = [f"plain-{r}/obj-{i:05}" for i in range(n)]
    t = time.perf_counter()
    with cf.ThreadPoolExecutor(CONCURRENCY) as ex:
        list(ex.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=body), keys))
    put_s = time.perf_counter() - t
    t = time.perf_counter()
    with cf.ThreadPoolExecutor(CONCURRENCY) as ex:
        sizes = list(ex.map(lambda k: len(client.get_object(Bucket=bucket, Key=k)["Body"].read()),
                            keys))
    get_s = time.perf_counter() - t
    assert sum(sizes) == n * OBJECT_MB * MiB
    with cf.ThreadPoolExecutor(CONCURRENCY) as ex:
        list(ex.map(lambda k: client.delete_object(Bucket=bucket, Key=k), keys))
    return {"put_mb_s": DATA_MB / put_s, "get_mb_s": DATA_MB / get_s}


def terrace(binary, *args, check=True):
    return subprocess.run([binary, *map(str, args)], check=check, capture_output=True, text=True)


def object_requests(binary, mnt):
    st = json.loads(terrace(binary, "status", "--json", mnt).stdout)
    t = next(t for t in st["tiers"] if t["kind"] == "s3")
    return (t.get("object") or {}).get("requests") or {}


def read_all(paths):
    t = time.perf_counter()
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(MiB)
                if not b:
                    break
                total += len(b)
    assert total == len(paths) * FILE_MB * MiB
    return DATA_MB / (time.perf_counter() - t)


def drop_page_cache():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1")


def terrace_round(binary, env, r):
    pm = f"/dev/shm/terrace-s3bench-{os.getpid()}.pm"
    ssd = f"/var/tmp/terrace-s3bench-{os.getpid()}.ssd"
    mnt = tempfile.mkdtemp(prefix="terrace-s3bench-")
    # Unsigned upload bodies unless S3_BENCH_SIGN_PAYLOAD=true (the default
    # over plain http signs them: design §5n "Signing"; here the "wire" is
    # 127.0.0.1).
    url = f"{env['TERRACE_S3_URL']}/tier-{os.getpid()}-{r}?sign_payload={SIGN_PAYLOAD}"
    terrace(binary, "mkfs", "--force", "--tier", f"pm:{pm}:1G", "--tier", f"ssd:{ssd}:2G",
            "--tier", f"s3:{url}:64G")
    # Reverse migration off: reads of object data would otherwise move it up
    # to PM while it is measured.
    mount = [binary, "mount", pm, mnt, "--daemon", "--dram-cache", "1G", "-o",
             "reverse_read_ratio=0"]
    out = {}
    try:
        subprocess.run(mount, check=True, capture_output=True)
        paths = [os.path.join(mnt, f"f{i:03}") for i in range(DATA_MB // FILE_MB)]
        chunk = os.urandom(MiB)
        for p in paths:
            with open(p, "wb") as f:
                for _ in range(FILE_MB):
                    f.write(chunk)
                os.fsync(f.fileno())
        before = object_requests(binary, mnt)
        t = time.perf_counter()
        terrace(binary, "migrate", "--quiet", "--to", "s3", mnt, *paths)
        out["migrate_mb_s"] = DATA_MB / (time.perf_counter() - t)
        after = object_requests(binary, mnt)
        out["puts_per_gib"] = (after.get("puts", 0) - before.get("puts", 0)) * 1024 / DATA_MB
        where = json.loads(terrace(binary, "where", "--json", paths[0]).stdout)
        assert where["bytes_per_tier"].get("s3") == FILE_MB * MiB, where
        terrace(binary, "umount", mnt)
        subprocess.run(mount, check=True, capture_output=True)
        before = object_requests(binary, mnt)
        out["cold_read_mb_s"] = read_all(paths)
        after = object_requests(binary, mnt)
        out["gets_per_gib_cold"] = (after.get("gets", 0) - before.get("gets", 0)) * 1024 / DATA_MB
        out["get_bytes_per_byte_read_cold"] = (after.get("get_bytes", 0)
                                               - before.get("get_bytes", 0)) / (DATA_MB * MiB)
        drop_page_cache()
        before = after
        out["dram_read_mb_s"] = read_all(paths)
        after = object_requests(binary, mnt)
        out["gets_per_gib_dram"] = (after.get("gets", 0) - before.get("gets", 0)) * 1024 / DATA_MB
    finally:
        terrace(binary, "umount", mnt, check=False)
        os.rmdir(mnt)
        for f in (pm, ssd):
            if os.path.exists(f):
                os.unlink(f)
    return out


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "target", "release", "terrace")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    d = tempfile.mkdtemp(prefix="terrace-s3bench-minio-", dir="/var/tmp")
    env = minio("start", d)
    saved = dict(os.environ)
    os.environ.update(env)
    runs = []
    try:
        for r in range(rounds):
            for what, fn in (("client", lambda: client_round(env, r)),
                             ("terrace", lambda: terrace_round(binary, env, r))):
                load = os.getloadavg()[0]
                res = fn()
                res.update({"system": what, "round": r + 1, "load_1m_before": round(load, 2)})
                log(json.dumps(res))
                runs.append(res)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        subprocess.run(["bash", MINIO_SH, "stop", d], capture_output=True)

    def med(system, key):
        return statistics.median(x[key] for x in runs if x["system"] == system)

    summary = {
        "client_put_mb_s": med("client", "put_mb_s"),
        "client_get_mb_s": med("client", "get_mb_s"),
        "terrace_migrate_mb_s": med("terrace", "migrate_mb_s"),
        "terrace_cold_read_mb_s": med("terrace", "cold_read_mb_s"),
        "terrace_dram_read_mb_s": med("terrace", "dram_read_mb_s"),
        "puts_per_gib_migrated": med("terrace", "puts_per_gib"),
        "gets_per_gib_read_cold": med("terrace", "gets_per_gib_cold"),
        "gets_per_gib_read_dram": med("terrace", "gets_per_gib_dram"),
        "get_bytes_per_byte_read_cold": med("terrace", "get_bytes_per_byte_read_cold"),
    }
    summary["migrate_vs_client_put"] = summary["terrace_migrate_mb_s"] / summary["client_put_mb_s"]
    summary["cold_read_vs_client_get"] = summary["terrace_cold_read_mb_s"] / summary["client_get_mb_s"]
    json.dump({"machine": f"{platform.release()}, {os.cpu_count()} CPUs",
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "data_mb": DATA_MB, "file_mb": FILE_MB, "object_mb": OBJECT_MB,
               "concurrency": CONCURRENCY, "sign_payload": SIGN_PAYLOAD,
               "summary": summary, "runs": runs},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
