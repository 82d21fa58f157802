"""PostgreSQL on Terrace, killed: the database operators' case.

A PostgreSQL server keeps its data directory on a tiered pool (PM 64M +
SSD, so its files spread over both tiers and migration runs while it
works). A client commits one row per transaction (synchronous_commit on,
the default) while a second one updates a table in place; the Terrace
daemon then gets SIGKILL at a random moment. The server is killed too (its
files are gone with the mount), the dead mount detached, the pool checked
with `terrace fsck` and remounted, and PostgreSQL restarted: its crash
recovery must succeed, every transaction the client saw committed must be
there, and `pg_amcheck` must find the tables and indexes intact. Three
rounds per run, each on the pool the last one left; once with the default
mount options and once with `writeback_cache,noatime`.

PostgreSQL is found in /usr/lib/postgresql/*/bin (Debian's `postgresql`
package, which `scripts/setup.sh` installs); the test is skipped without it.
The server runs as the `postgres` user on a Unix socket in a private
directory, never on a TCP port.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers import assert_fsck_clean, kill_pid, lazy_unmount, mount, temp_mountpoint, \
    temp_pool_path, temp_ssd_image, terrace, unmount, wait_until

ROUNDS = int(os.environ.get("PG_CRASH_ROUNDS", "3"))


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


pytestmark = pytest.mark.skipif(
    pg_bin() is None or shutil.which("runuser") is None or os.geteuid() != 0,
    reason="needs root, runuser and PostgreSQL (Debian package postgresql)")


def as_postgres(*cmd, check=True, timeout=120, **kw) -> subprocess.CompletedProcess:
    cp = subprocess.run(["runuser", "-u", "postgres", "--", *map(str, cmd)],
                        capture_output=True, text=True, timeout=timeout, **kw)
    if check and cp.returncode != 0:
        raise AssertionError(f"{cmd[0]} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
    return cp


class Server:
    """One PostgreSQL server on `data`, listening on a socket in `sock`."""

    def __init__(self, data: Path, sock: Path):
        self.data, self.sock, self.bin = data, sock, pg_bin()
        self.pid: int | None = None
        self.stale_lock = False

    def start(self) -> None:
        if self.stale_lock:
            (self.data / "postmaster.pid").unlink(missing_ok=True)
            self.stale_lock = False
        cp = as_postgres(self.bin / "pg_ctl", "-D", self.data, "-w", "-t", "120",
                         "-o", f"-k {self.sock} -c listen_addresses='' -p 5432",
                         "-l", self.sock / "server.log", "start", check=False, timeout=180)
        if cp.returncode != 0:
            log = (self.sock / "server.log").read_text(errors="replace")
            raise AssertionError(f"PostgreSQL did not start:\n{cp.stderr}\n{log[-3000:]}")
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])

    def psql(self, sql: str, timeout=120) -> str:
        return as_postgres(self.bin / "psql", "-h", self.sock, "-X", "-q", "-t", "-A",
                           "-v", "ON_ERROR_STOP=1", "-d", "postgres", "-c", sql,
                           timeout=timeout).stdout.strip()

    def client(self) -> subprocess.Popen:
        """A psql fed statements on stdin, one transaction each; it prints
        the command tag of each once the server has answered it."""
        return subprocess.Popen(
            ["runuser", "-u", "postgres", "--", "stdbuf", "-oL", str(self.bin / "psql"),
             "-h", str(self.sock),
             "-X", "-d", "postgres"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1)

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends (their files are gone)."""
        if self.pid is None:
            return
        children = []
        for stat in glob.glob("/proc/[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(stat).read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.pid:
                    children.append(int(Path(stat).parent.name))
        for pid in [self.pid, *children]:
            kill_pid(pid, signal.SIGKILL, wait=5)
        # A killed postmaster stays a zombie until PID 1 reaps it, and
        # PostgreSQL refuses to start while the PID in its lock file exists.
        gone = wait_until(lambda: not os.path.exists(f"/proc/{self.pid}"), 10)
        self.stale_lock = not gone
        self.pid = None

    def stop(self) -> None:
        as_postgres(self.bin / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop",
                    check=False, timeout=120)


def committer(proc: subprocess.Popen, acked: list[int], stop: threading.Event) -> None:
    """Sends INSERTs of ids 1, 2, … and counts the ones the server
    acknowledged (each `INSERT 0 1` is the commit of the next id)."""
    def feed():
        i = len(acked)
        try:
            while not stop.is_set():
                i += 1
                proc.stdin.write(f"INSERT INTO acked VALUES ({i}, repeat('x', 500));\n")
        except (BrokenPipeError, ValueError, OSError):
            pass

    threading.Thread(target=feed, daemon=True).start()
    for line in proc.stdout:
        if line.startswith("INSERT 0 1"):
            acked.append(len(acked) + 1)


def updater(proc: subprocess.Popen, stop: threading.Event) -> None:
    rnd = random.Random(7)
    try:
        while not stop.is_set():
            k = rnd.randrange(1, 20001)
            proc.stdin.write(f"UPDATE churn SET v = v + 1, pad = md5(random()::text) "
                             f"WHERE k = {k};\n")
    except (BrokenPipeError, ValueError, OSError):
        pass


@pytest.mark.parametrize("options", ["allow_other", "allow_other,writeback_cache,noatime"],
                         ids=["defaults", "writeback_cache"])
def test_postgres_loses_no_committed_transaction_when_the_daemon_is_killed(options):
    """With the defaults, and with the options the README advises for
    PostgreSQL (the kernel's writeback cache, whose dirty pages only the
    server's own fsyncs make durable)."""
    seed = int(os.environ.get("PG_CRASH_SEED", random.randrange(1 << 30)))
    rnd = random.Random(seed)
    print(f"PG_CRASH_SEED={seed}")
    sock = Path(tempfile.mkdtemp(prefix="terrace-pg-sock-"))
    shutil.chown(sock, "postgres", "postgres")
    m = None
    server = None
    try:
        with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
            terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:1G")
            m = mount(pool, mnt, options)
            data = mnt / "pg"
            data.mkdir()
            shutil.chown(data, "postgres", "postgres")
            os.chmod(data, 0o700)
            as_postgres(pg_bin() / "initdb", "-D", data, "-A", "trust", "--no-sync", timeout=300)
            server = Server(data, sock)
            server.start()
            server.psql("CREATE EXTENSION amcheck; "
                        "CREATE TABLE acked (id int PRIMARY KEY, pad text); "
                        "CREATE TABLE churn (k int PRIMARY KEY, v int, pad text); "
                        "INSERT INTO churn SELECT g, 0, md5(g::text) "
                        "FROM generate_series(1, 20000) g;")
            acked: list[int] = []
            for rnd_no in range(ROUNDS):
                stop = threading.Event()
                writer, churner = server.client(), server.client()
                t = threading.Thread(target=committer, args=(writer, acked, stop), daemon=True)
                u = threading.Thread(target=updater, args=(churner, stop), daemon=True)
                before = len(acked)
                t.start()
                u.start()
                assert wait_until(lambda: len(acked) > before + 200, 60), \
                    f"round {rnd_no}: the server committed nothing ({len(acked) - before} rows)"
                time.sleep(rnd.uniform(0.5, 3.0))
                m.kill()
                stop.set()
                server.kill()
                for p in (writer, churner):
                    with contextlib.suppress(Exception):
                        p.kill()
                t.join(10)
                lazy_unmount(mnt)
                assert_fsck_clean(pool, f"after kill -9 in round {rnd_no} (seed {seed})")
                m = mount(pool, mnt, options)
                server.start()  # PostgreSQL's crash recovery
                n = len(acked)
                print(f"round {rnd_no}: {n - before} commits acknowledged before the kill")
                got = server.psql(f"SELECT count(*) FROM acked WHERE id <= {n}")
                assert int(got) == n, (f"round {rnd_no} (seed {seed}): {n} inserts were "
                                       f"acknowledged, {got} are in the table")
                assert server.psql("SELECT count(*) FROM churn") == "20000"
                checked = as_postgres(pg_bin() / "pg_amcheck", "-h", sock, "-d", "postgres",
                                      "--heapallindexed", "--no-dependent-toast", check=False,
                                      timeout=300)
                assert checked.returncode == 0, (f"round {rnd_no} (seed {seed}): pg_amcheck "
                                                 f"found damage:\n{checked.stdout}\n{checked.stderr}")
                # Rows committed after the kill's last ack may be there too;
                # the next round numbers from what the table holds.
                top = int(server.psql("SELECT coalesce(max(id), 0) FROM acked"))
                acked.extend(range(n + 1, top + 1))
            tiers = m.status()["tiers"]
            assert tiers[1]["used"] > 0, "nothing reached the SSD tier: the test ran on PM alone"
            server.stop()
            server = None
            assert unmount(m), "the final unmount was not clean"
            m = None
            assert_fsck_clean(pool, "after the last round")
    finally:
        if server is not None:
            server.kill()
        if m is not None:
            unmount(m)
        shutil.rmtree(sock, ignore_errors=True)
