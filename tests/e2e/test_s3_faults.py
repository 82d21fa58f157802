"""Network faults between a mount and its object tier (issue 19 point 4,
design §5n "Network faults"): a real mount (PM + SSD + s3) against a real
MinIO behind a fault-injecting proxy on 127.0.0.1 (s3_fault_proxy.py).

- Transient faults (503 SlowDown, 500 InternalError, connections reset
  mid-request and mid-response, a stalled request, slow answers) are
  retried: migrations to s3 and reads of s3 data succeed, byte-exact.
- Persistent faults fail reads with EIO only after the retry budget, in
  bounded time; meanwhile the daemon lives, data on PM and the SSD reads
  and writes, `status` says the store is unreachable, and it clears once
  the store answers again.
- A byte damaged on the wire is never served: a damaged GET is read again
  (or EIO), a damaged PUT is refused by the store and never made durable.
- MinIO killed (SIGKILL) and restarted on the same port and data mid
  migration, and the daemon killed (kill -9) mid-upload: no acknowledged
  write lost, every checksum right after a remount, orphans deleted, fsck
  clean.
- The s3_* settings apply at mount (-o) and at run time (`terrace set`):
  with s3_retries 0 a single 503 fails a read.
- A write of part of a block on s3 and a truncate inside such a block
  (read-modify-write of the old block) waiting on a store that holds its
  answers hold up no other request: `stat`, `ls -l`, PM reads and writes
  finish in under 2 s; they complete with the right bytes once it answers.

Each fault asserts the proxy really injected it (`Fault.fired`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers import (fsck, minio, mounted_pool, sha256_file, temp_mountpoint, temp_pool_path,
                     terrace, unique_name, wait_until, write_pattern_file)
from s3_fault_proxy import Fault, FaultProxy

# Short budgets so that persistent faults give up quickly: a request is
# retried while 4 s last (the time, not the count, limits it), each try at
# most 2 s.
TIMEOUT_S, REQUEST_S = 4, 2
FAST = f"s3_retries=100,s3_timeout_ns={TIMEOUT_S}s,s3_request_timeout_ns={REQUEST_S}s,s3_backoff_ns=50ms"
# NetworkParams::bound: the last retry starts before s3_timeout plus one
# wait (at most min(15 s, s3_timeout)) and takes at most one try.
BOUND_S = TIMEOUT_S + min(15, TIMEOUT_S) + REQUEST_S
# What the machine may add to that (FUSE, the kernel's read-ahead, load).
SLACK_S = 12

DATA = "/seg-"  # object keys of data parts (not the marker, not LIST)



@pytest.fixture(scope="module")
def server():
    """A throwaway MinIO and a fault proxy in front of it. Always stopped."""
    d = Path(tempfile.mkdtemp(prefix="terrace-minio-faults-"))
    saved = dict(os.environ)
    proxy = None
    try:
        for line in minio("start", d).splitlines():
            if line.startswith("export "):
                k, v = line[len("export "):].split("=", 1)
                os.environ[k] = shlex.split(v)[0]
        os.environ.pop("TERRACE_S3_TIMEOUT", None)
        direct = os.environ["TERRACE_S3_URL"]  # http://127.0.0.1:PORT/BUCKET
        port = int(direct.split(":")[2].split("/")[0])
        bucket = direct.rsplit("/", 1)[1]
        proxy = FaultProxy(port).start()
        yield {"dir": d, "url": f"http://127.0.0.1:{proxy.port}/{bucket}", "proxy": proxy,
               "direct": direct}
    finally:
        if proxy is not None:
            proxy.stop()
        with contextlib.suppress(Exception):
            minio("stop", d)
        shutil.rmtree(d, ignore_errors=True)
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def proxy(server) -> FaultProxy:
    """The proxy, passing everything through before and after the test."""
    p = server["proxy"]
    p.clear()
    yield p
    p.clear()


@contextlib.contextmanager
def pool_with_s3(server):
    prefix = unique_name("pool").replace("_", "-").lower()
    with temp_pool_path() as pool, temp_pool_path("ssd") as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:128M",
                "--tier", f"s3:{server['url']}/{prefix}:4G")
        try:
            yield pool, mnt
        finally:
            with contextlib.suppress(FileNotFoundError):
                ssd.unlink()


@contextlib.contextmanager
def injected(proxy: FaultProxy, fault: Fault):
    """`fault` for the block; everything passes through again after it, even
    when the block fails (so that unmounts are never held up)."""
    proxy.add(fault)
    try:
        yield fault
    finally:
        proxy.clear()


def bucket_keys(server, prefix: str = "") -> list[str]:
    """The keys under `prefix`, listed by MinIO itself (not through the proxy)."""
    import re
    cp = subprocess.run(
        ["curl", "-fsS", "--aws-sigv4", f"aws:amz:{os.environ['AWS_REGION']}:s3", "--user",
         f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
         f"{server['direct']}?list-type=2&max-keys=1000&prefix={prefix}"],
        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    return re.findall(r"<Key>([^<]*)</Key>", cp.stdout)


def object_stats(m) -> dict:
    return next(t for t in m.status()["tiers"] if t["kind"] == "s3")["object"]


def s3_bytes(path: Path) -> int:
    return json.loads(terrace("where", "--json", path).stdout)["bytes_per_tier"].get("s3", 0)


def write_file(path: Path, size: int, seed: int) -> str:
    return write_pattern_file(path, size, seed)  # written and fsync'd


def read_errno(path: Path):
    """(errno or None, seconds, sha256 or None) of reading `path` whole."""
    t0 = time.monotonic()
    try:
        digest = sha256_file(path)
        return None, time.monotonic() - t0, digest
    except OSError as e:
        return e.errno, time.monotonic() - t0, None


def assert_fsck_clean(pool: Path, orphans: int | None = 0) -> dict:
    """fsck's report; with `orphans`, that many orphan parts expected."""
    cp = fsck(pool, "--json")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    report = json.loads(cp.stdout)
    if orphans is not None:
        assert report["object_orphans"] == orphans, cp.stdout
    return report


# Transient faults: fewer than the retries, each recovered within the budget.
TRANSIENT = {
    "503 SlowDown": dict(kind="error", status=503, code="SlowDown", count=3),
    "500 InternalError": dict(kind="error", status=500, code="InternalError", count=3),
    "reset mid-request": dict(kind="reset_request", count=2),
    "reset mid-response": dict(kind="reset_response", count=2),
    "stalled request": dict(kind="stall", count=1),
    "slow answers": dict(kind="delay", delay=0.3, count=None),
}


def test_migrations_to_s3_ride_out_transient_faults(server, proxy):
    with pool_with_s3(server) as (pool, mnt):
        files = {}
        with mounted_pool(pool, mnt, FAST):
            for i, (name, spec) in enumerate(TRANSIENT.items()):
                f = mnt / f"up{i}"
                files[f] = write_file(f, (1 << 20) + i * 4096, i)
                with injected(proxy, Fault(method="PUT", path=DATA, **spec)) as fault:
                    cp = terrace("migrate", "--quiet", "--to", "s3", mnt, f, check=False,
                                 timeout=120)
                assert cp.returncode == 0, f"{name}: {cp.stdout}{cp.stderr}"
                assert fault.fired >= (fault.count or 1), f"{name}: the fault never fired"
                assert s3_bytes(f) == f.stat().st_size, name
        with mounted_pool(pool, mnt, FAST):
            for f, digest in files.items():
                assert sha256_file(f) == digest, f
        assert_fsck_clean(pool)


def migrated_files(server, pool, mnt, n: int, size: int = 1 << 20) -> dict:
    """`n` files written and moved to s3; their digests."""
    with mounted_pool(pool, mnt, FAST):
        files = {mnt / f"cold{i}": write_file(mnt / f"cold{i}", size + i * 4096, 40 + i)
                 for i in range(n)}
        terrace("migrate", "--quiet", "--to", "s3", mnt, *files, timeout=120)
        for f in files:
            assert s3_bytes(f) == f.stat().st_size
    return files


def test_reads_of_s3_data_ride_out_transient_faults(server, proxy):
    with pool_with_s3(server) as (pool, mnt):
        files = migrated_files(server, pool, mnt, len(TRANSIENT))
        # A fresh mount: nothing of the files is cached.
        with mounted_pool(pool, mnt, FAST) as m:
            for (name, spec), (f, digest) in zip(TRANSIENT.items(), files.items()):
                with injected(proxy, Fault(method="GET", path=DATA, **spec)) as fault:
                    err, _, got = read_errno(f)
                assert err is None, f"{name}: {os.strerror(err)}"
                assert got == digest, f"{name}: wrong bytes"
                assert fault.fired >= (fault.count or 1), f"{name}: the fault never fired"
            assert object_stats(m)["unreachable_since_unix"] is None


PERSISTENT = {
    "503 SlowDown forever": dict(kind="error", status=503, code="SlowDown", count=None),
    "every connection reset": dict(kind="reset_request", count=None),
    "every request stalled": dict(kind="stall", count=None),
}


def test_persistent_faults_fail_reads_with_eio_in_bounded_time_while_other_tiers_serve(
        server, proxy):
    with pool_with_s3(server) as (pool, mnt):
        cold = migrated_files(server, pool, mnt, 2 * len(PERSISTENT))
        with mounted_pool(pool, mnt, FAST) as m:
            pid = m.find_pid()
            hot = mnt / "hot"  # on PM
            hot_digest = write_file(hot, 256 << 10, 1)
            warm = mnt / "warm"  # on the SSD
            warm_digest = write_file(warm, 1 << 20, 2)
            terrace("migrate", "--quiet", "--to", "ssd", mnt, warm)
            cold_files = list(cold.items())
            for k, (name, spec) in enumerate(PERSISTENT.items()):
                pair = cold_files[2 * k: 2 * k + 2]
                with injected(proxy, Fault(**spec)) as fault:
                    t_fault = time.monotonic()
                    # Two readers of s3 data and a migration to s3, all stuck.
                    results = {}
                    readers = [threading.Thread(target=lambda f=f: results.__setitem__(
                        f, read_errno(f))) for f, _ in pair]
                    mig = {}

                    def migrate():
                        t0 = time.monotonic()
                        mig["cp"] = terrace("migrate", "--quiet", "--to", "s3", mnt, warm,
                                            check=False, timeout=120)
                        mig["s"] = time.monotonic() - t0
                    mover = threading.Thread(target=migrate)
                    for t in readers + [mover]:
                        t.start()
                    assert wait_until(lambda: fault.fired >= 2, 10), f"{name}: no request"
                    # Meanwhile data on PM and the SSD reads and writes.
                    t0 = time.monotonic()
                    assert sha256_file(hot) == hot_digest, name
                    assert sha256_file(warm) == warm_digest, name
                    write_file(mnt / f"during{k}", 64 << 10, 3)
                    served = time.monotonic() - t0
                    # `status` says the store does not answer from the first
                    # failed try on (a stalled one fails at its time limit),
                    # before any request could have given up.
                    o = {}

                    def unreachable():
                        o.update(object_stats(m))
                        return o["unreachable_since_unix"] is not None
                    wait_until(unreachable, t_fault + TIMEOUT_S - 0.3 - time.monotonic(),
                               interval=0.1)
                    still_stuck = all(t.is_alive() for t in readers)
                    for t in readers + [mover]:
                        t.join(BOUND_S + SLACK_S + 60)
                assert served < 5, f"{name}: PM/SSD I/O took {served:.1f}s behind stuck s3 reads"
                assert still_stuck, f"{name}: the s3 readers were not stuck (vacuous): {results} served {served}"
                assert o["unreachable_since_unix"] is not None and o["last_error"], (
                    f"{name}: status did not say unreachable while requests retried", o)
                for f, _ in pair:
                    err, secs, _ = results[f]
                    assert err == errno.EIO, f"{name}: {f.name}: {err}"
                    assert secs < BOUND_S + SLACK_S, f"{name}: EIO after {secs:.1f}s"
                assert mig["cp"].returncode != 0, f"{name}: a migration to a dead store succeeded"
                assert mig["s"] < BOUND_S + SLACK_S + 10, f"{name}: migrate took {mig['s']:.1f}s"
                assert pid and os.path.exists(f"/proc/{pid}") and m.alive(), name
                assert sha256_file(warm) == warm_digest and s3_bytes(warm) == 0, name
                # The store answers again: the data reads back, status clears.
                for f, digest in pair:
                    assert sha256_file(f) == digest, f"{name}: {f.name} after the fault"
                assert object_stats(m)["unreachable_since_unix"] is None, name
                assert "UNREACHABLE" not in terrace("status", mnt).stdout
            terrace("migrate", "--quiet", "--to", "s3", mnt, warm, timeout=120)
            assert s3_bytes(warm) == warm.stat().st_size
        with mounted_pool(pool, mnt, FAST):
            assert sha256_file(warm) == warm_digest
            for k in range(len(PERSISTENT)):
                assert (mnt / f"during{k}").stat().st_size == 64 << 10
        assert_fsck_clean(pool)


def test_a_byte_damaged_on_the_wire_is_never_served(server, proxy):
    with pool_with_s3(server) as (pool, mnt):
        files = migrated_files(server, pool, mnt, 2)
        (a, a_digest), (b, b_digest) = files.items()
        with mounted_pool(pool, mnt, FAST) as m:
            errors = m.status()["checksum_errors"]
            # One GET answer damaged: the block checksum catches it, the block
            # is read again, the right bytes are served.
            with injected(proxy, Fault("corrupt_response", method="GET", path=DATA,
                                       count=1)) as fault:
                err, _, got = read_errno(a)
            assert fault.fired == 1
            assert err is None and got == a_digest, "a damaged GET was served or failed"
            assert m.status()["checksum_errors"] > errors, "the damage was never seen"
            # Every GET answer damaged: EIO, never the wrong bytes.
            with injected(proxy, Fault("corrupt_response", method="GET", path=DATA,
                                       count=None)) as fault:
                err, _, got = read_errno(b)
            assert fault.fired >= 2 and err == errno.EIO, (fault.fired, err)
            assert sha256_file(b) == b_digest
            # One PUT body damaged: the store checks the signed payload hash
            # and refuses it; nothing damaged becomes durable.
            c = mnt / "c"
            c_digest = write_file(c, 1 << 20, 9)
            with injected(proxy, Fault("corrupt_request", method="PUT", path=DATA,
                                       count=1)) as fault:
                terrace("migrate", "--quiet", "--to", "s3", mnt, c, check=False, timeout=120)
            assert fault.fired == 1
            if s3_bytes(c) != c.stat().st_size:
                terrace("migrate", "--quiet", "--to", "s3", mnt, c, timeout=120)
            assert s3_bytes(c) == c.stat().st_size
        with mounted_pool(pool, mnt, FAST):
            assert sha256_file(c) == c_digest
            assert sha256_file(a) == a_digest
        assert_fsck_clean(pool)


def test_minio_killed_and_restarted_mid_migration_loses_no_acknowledged_write(server, proxy):
    # The default retries and waits; a budget long enough for the restart.
    patient = "s3_timeout_ns=60s,s3_request_timeout_ns=10s"
    with pool_with_s3(server) as (pool, mnt):
        with mounted_pool(pool, mnt, patient) as m:
            files = {mnt / f"m{i}": write_file(mnt / f"m{i}", 2 << 20, 60 + i) for i in range(6)}
            # Slow uploads, so that the kill lands mid-migration.
            slow = proxy.add(Fault("delay", method="PUT", path=DATA, delay=0.4, count=None))
            out = {}
            mover = threading.Thread(target=lambda: out.__setitem__("cp", terrace(
                "migrate", "--quiet", "--to", "s3", mnt, *files, check=False, timeout=300)))
            mover.start()
            try:
                # One upload: 12 MiB is one window, its parts one per
                # segment touched (16 MiB segments: one or two PUTs).
                assert wait_until(lambda: slow.fired >= 1, 30), "no upload started"
                minio("kill", server["dir"])
                # Writes acknowledged while the store is dead.
                files[mnt / "during"] = write_file(mnt / "during", 1 << 20, 77)
                time.sleep(1)
                minio("restart", server["dir"])
            finally:
                proxy.clear()
                mover.join(300)
            assert not mover.is_alive()
            # The default 10 retries wait about a minute in all: the
            # migration rides out the restart.
            assert out["cp"].returncode == 0, out["cp"].stdout + out["cp"].stderr
            for f in files:
                if f.name != "during":
                    assert s3_bytes(f) == f.stat().st_size, f
            assert object_stats(m)["unreachable_since_unix"] is None
        with mounted_pool(pool, mnt, FAST):
            for f, digest in files.items():
                assert sha256_file(f) == digest, f
        assert_fsck_clean(pool)


def test_daemon_killed_mid_upload_keeps_every_file_and_the_next_mount_deletes_orphans(
        server, proxy):
    with pool_with_s3(server) as (pool, mnt):
        with mounted_pool(pool, mnt, FAST) as m:
            files = {mnt / f"k{i}": write_file(mnt / f"k{i}", 1 << 20, 80 + i) for i in range(3)}
            # The store keeps what arrives; its answers never come back.
            held = proxy.add(Fault("delay", method="PUT", path=DATA, delay=float("inf"),
                                   count=None))
            mover = threading.Thread(target=lambda: terrace(
                "migrate", "--quiet", "--to", "s3", mnt, *files, check=False, timeout=120))
            mover.start()
            try:
                # A part is in MinIO, its answer held: kill the daemon.
                assert wait_until(lambda: held.answered >= 1, 30), "no upload landed"
                m.kill()
            finally:
                proxy.clear()
                mover.join(120)
        report = assert_fsck_clean(pool, orphans=None)
        assert report["object_orphans"] >= 1, report  # uploaded, never committed
        with mounted_pool(pool, mnt, FAST):
            for f, digest in files.items():
                assert sha256_file(f) == digest, f
        assert_fsck_clean(pool)


def test_s3_retry_settings_apply_at_mount_and_at_run_time(server, proxy):
    with pool_with_s3(server) as (pool, mnt):
        files = migrated_files(server, pool, mnt, 2)
        (a, a_digest), (b, b_digest) = files.items()
        with mounted_pool(pool, mnt, FAST) as m:
            s = m.status()["settings"]
            assert s["s3_timeout_ns"] == TIMEOUT_S * 10**9, s
            assert s["s3_request_timeout_ns"] == REQUEST_S * 10**9, s
            listed = terrace("set", mnt).stdout
            for key in ("s3_retries", "s3_timeout_ns", "s3_request_timeout_ns", "s3_backoff_ns"):
                assert key in listed, listed
            # No retries: a few 503s fail the read (the kernel itself may
            # ask twice for a page whose read failed).
            terrace("set", mnt, "s3_retries", "0")
            with injected(proxy, Fault("error", method="GET", path=DATA, count=3)) as fault:
                err, _, _ = read_errno(a)
            assert fault.fired >= 1 and err == errno.EIO, (fault.fired, err)
            # Retries back: the same faults are ridden out.
            terrace("set", mnt, "s3_retries", "10")
            with injected(proxy, Fault("error", method="GET", path=DATA, count=3)) as fault:
                err, _, got = read_errno(b)
            assert fault.fired == 3 and err is None and got == b_digest
            assert sha256_file(a) == a_digest


def pattern_bytes(size: int, seed: int) -> bytes:
    """What `write_pattern_file(path, size, seed)` writes."""
    block = bytes((seed * 31 + k) % 251 for k in range(4096)) * 16
    return (block * (size // len(block) + 1))[:size]


def other_requests(mnt: Path, hot: Path, hot_digest: str, probe: dict) -> None:
    """What must go on while requests wait on a stalled store: `stat`, a
    LOOKUP of a missing name, `ls -l`, and a read and writes of PM files;
    the seconds it took go to probe["s"]."""
    t0 = time.monotonic()
    for k in range(3):
        os.stat(mnt)
        os.stat(hot)
        assert not os.path.exists(mnt / f"absent{k}")  # a LOOKUP
        subprocess.run(["ls", "-l", str(mnt)], check=True, capture_output=True, timeout=30)
        assert sha256_file(hot) == hot_digest
        write_file(mnt / f"during{k}", 64 << 10, 3)
        os.stat(mnt / f"during{k}")
    probe["s"] = time.monotonic() - t0


def stall_and_probe(proxy: FaultProxy, method: str, ops: list, mnt: Path, hot: Path,
                    hot_digest: str, none_reached: str) -> tuple:
    """Holds the store's answers to `method` requests for data parts, starts
    `ops` (threads whose requests wait on them), and runs `other_requests`
    meanwhile for up to 10 s. Returns which ops were still in flight then,
    whether the probe finished in time, and the probe's dict; leaving the
    block lets the held answers go, and every thread is joined."""
    probe: dict = {}
    with injected(proxy, Fault("delay", method=method, path=DATA, delay=math.inf,
                               count=None)) as fault:
        for t in ops:
            t.start()
        assert wait_until(lambda: fault.fired >= 1, 20), none_reached
        time.sleep(1)
        prober = threading.Thread(target=other_requests, args=(mnt, hot, hot_digest, probe))
        prober.start()
        prober.join(10)
        stuck = [t.is_alive() for t in ops]
        served_in_time = not prober.is_alive()
    prober.join(120)
    for t in ops:
        t.join(120)
    return stuck, served_in_time, probe, prober


def test_partial_writes_truncates_and_punches_waiting_on_a_stalled_store_hold_up_no_other_request(
        server, proxy):
    """A write of part of a block stored on s3, a truncate inside such a
    block and a hole punched in one read the old block (read-modify-write):
    with the store's answers
    held, both are in flight while `stat`, `ls -l`, and reads and writes of
    PM files on the same mount (two request threads) finish promptly; once
    the store answers they complete with the right bytes."""
    # A budget far longer than the stall: the held requests complete.
    patient = "s3_retries=100,s3_timeout_ns=120s,s3_request_timeout_ns=60s,s3_backoff_ns=50ms"
    with pool_with_s3(server) as (pool, mnt):
        sizes = {mnt / "cold0": 1 << 20, mnt / "cold1": (1 << 20) + 4096,
                 mnt / "cold2": 1 << 20}
        with mounted_pool(pool, mnt, FAST):
            for k, (f, size) in enumerate(sizes.items()):
                write_file(f, size, 90 + k)
            terrace("migrate", "--quiet", "--to", "s3", mnt, *sizes, timeout=120)
            for f, size in sizes.items():
                assert s3_bytes(f) == size
        written, cut, punched = list(sizes)
        want_written = bytearray(pattern_bytes(sizes[written], 90))
        want_written[5000:5007] = b"partial"
        want_cut = pattern_bytes(sizes[cut], 91)[:10000]
        want_punched = bytearray(pattern_bytes(sizes[punched], 92))
        want_punched[4100:4110] = bytes(10)
        # A fresh mount: nothing of the files is cached.
        with mounted_pool(pool, mnt, patient) as m:
            hot = mnt / "hot"  # on PM
            hot_digest = write_file(hot, 256 << 10, 1)
            results: dict = {}

            def partial_write():
                try:
                    fd = os.open(written, os.O_WRONLY)
                    try:
                        results["write"] = os.pwrite(fd, b"partial", 5000)
                    finally:
                        os.close(fd)
                except OSError as e:
                    results["write"] = e

            def truncate():
                try:
                    os.truncate(cut, 10000)
                    results["truncate"] = 0
                except OSError as e:
                    results["truncate"] = e

            def punch():
                import ctypes
                libc = ctypes.CDLL(None, use_errno=True)
                libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long,
                                           ctypes.c_long]
                fd = os.open(punched, os.O_WRONLY)
                try:
                    # PUNCH_HOLE | KEEP_SIZE of 10 bytes inside block 1.
                    r = libc.fallocate(fd, 0x02 | 0x01, 4100, 10)
                    results["punch"] = r if r == 0 else OSError(ctypes.get_errno(), "fallocate")
                finally:
                    os.close(fd)

            ops = [threading.Thread(target=partial_write), threading.Thread(target=truncate),
                   threading.Thread(target=punch)]
            # They wait on the store: on GETs it holds, or (files' blocks in
            # one read-ahead window) one on another's fetch.
            stuck, served_in_time, probe, prober = stall_and_probe(
                proxy, "GET", ops, mnt, hot, hot_digest, "nothing reached the store")
            assert served_in_time and probe.get("s", 99) < 2, (
                f"stat, ls, PM reads and writes took {probe.get('s')}s (over 10 s if None) "
                f"behind a partial write and a truncate waiting on s3")
            assert stuck == [True, True, True], (
                f"the write, truncate and punch were not in flight: {results}")
            assert not any(t.is_alive() for t in ops + [prober])
            assert results == {"write": 7, "truncate": 0, "punch": 0}, results
            assert written.read_bytes() == bytes(want_written)
            assert cut.read_bytes() == want_cut
            assert punched.read_bytes() == bytes(want_punched)
            assert m.alive()
        with mounted_pool(pool, mnt, FAST):
            assert written.read_bytes() == bytes(want_written)
            assert cut.read_bytes() == want_cut
            assert punched.read_bytes() == bytes(want_punched)
            assert sha256_file(hot) == hot_digest
        assert_fsck_clean(pool)


def test_fsyncs_uploading_to_a_stalled_store_hold_up_no_other_request(server, proxy):
    """Files pinned to s3 keep their writes in the DRAM cache until fsync,
    whose write-back uploads them before it returns. With the store's PUT
    answers held, two such fsyncs are in flight — as many as the mount has
    request threads — while `stat`, `ls -l` and reads and writes of PM files
    finish promptly; once the store answers, the fsyncs complete and the
    data is on s3."""
    patient = "s3_retries=100,s3_timeout_ns=120s,s3_request_timeout_ns=60s,s3_backoff_ns=50ms"
    with pool_with_s3(server) as (pool, mnt):
        with mounted_pool(pool, mnt, patient) as m:
            archive = mnt / "archive"
            archive.mkdir()
            terrace("rule", archive, "s3")
            hot = mnt / "hot"  # on PM
            hot_digest = write_file(hot, 256 << 10, 1)
            size = 1 << 20
            data = {archive / f"p{k}": pattern_bytes(size, 70 + k) for k in range(2)}
            fds = {}
            for f, b in data.items():
                fds[f] = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
                assert os.write(fds[f], b) == size
            results: dict = {}

            def fsync(f):
                try:
                    os.fsync(fds[f])
                    results[f.name] = 0
                except OSError as e:
                    results[f.name] = e

            ops = [threading.Thread(target=fsync, args=(f,)) for f in data]
            try:
                stuck, served_in_time, probe, _ = stall_and_probe(
                    proxy, "PUT", ops, mnt, hot, hot_digest, "no upload reached the store")
            finally:
                for fd in fds.values():
                    os.close(fd)
            assert served_in_time and probe.get("s", 99) < 2, (
                f"stat, ls, PM reads and writes took {probe.get('s')}s (over 10 s if None) "
                f"behind fsyncs uploading to a stalled s3")
            assert stuck == [True, True], f"the fsyncs were not in flight: {results}"
            assert results == {"p0": 0, "p1": 0}, results
            for f, b in data.items():
                assert f.read_bytes() == b
                assert s3_bytes(f) == size, f
            assert m.alive()
