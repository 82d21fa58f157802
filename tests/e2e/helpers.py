"""Shared helpers for the Terrace end-to-end tests.

Everything here drives real processes: the `terrace` binary, `umount`, and the
kernel's FUSE mounts. The fixtures in conftest.py are thin wrappers over the
context managers below, so tests that need several mounts in a row (the crash
loop) can use the same code.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]

MINIO_SH = REPO / "tests" / "minio" / "minio.sh"


def minio(cmd: str, d: Path) -> str:
    """Runs tests/minio/minio.sh CMD DIR (start, stop, kill, restart) and
    returns its output (start prints `export VAR=…` lines)."""
    cp = subprocess.run(["bash", str(MINIO_SH), cmd, str(d)], capture_output=True, text=True,
                        timeout=900)
    assert cp.returncode == 0, f"minio.sh {cmd}: {cp.stderr}"
    return cp.stdout


def make_bucket(endpoint: str, name: str) -> str:
    """Creates bucket `name` on the S3 server at `endpoint` (the AWS_*
    variables minio.sh exported sign the request); returns its URL."""
    cp = subprocess.run(
        ["curl", "-fsS", "-o", "/dev/null", "-X", "PUT", "--aws-sigv4",
         f"aws:amz:{os.environ['AWS_REGION']}:s3", "--user",
         f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
         f"{endpoint}/{name}"],
        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, f"cannot create bucket {name}: {cp.stderr}"
    return f"{endpoint}/{name}"
TERRACE_BIN = Path(os.environ.get("TERRACE_BIN", REPO / "target" / "release" / "terrace"))
PASSTHROUGH_BIN = REPO / "target" / "release" / "examples" / "passthrough"

# Every temporary mount point / pool created by the tests starts with one of
# these prefixes followed by the pid of the pytest process, so a later session
# can recognise (and clean) what a dead session left behind.
MOUNT_PREFIX = "terrace-test-"
MOUNT_PARENT = Path("/tmp")
POOL_PARENT = Path("/dev/shm")

DEFAULT_TIMEOUT = 120


# --------------------------------------------------------------------------
# Running commands
# --------------------------------------------------------------------------


def _env() -> dict:
    """The environment for child commands: no log noise on stderr."""
    env = dict(os.environ)
    env.pop("RUST_LOG", None)
    env.setdefault("RUST_BACKTRACE", "1")
    return env


def run(cmd: Sequence[str], *, check: bool = True, timeout: float = DEFAULT_TIMEOUT,
        input: Optional[bytes] = None) -> subprocess.CompletedProcess:
    """Run `cmd`, capture its output as text, and (by default) fail on non-zero exit.

    The failure message carries the command line, exit status, stdout and stderr,
    which is all one needs to reproduce a failure by hand.
    """
    cmd = [str(c) for c in cmd]
    try:
        cp = subprocess.run(cmd, capture_output=True, timeout=timeout, input=input, env=_env())
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"command timed out after {timeout}s: {shlex.join(cmd)}") from e
    cp.stdout = cp.stdout.decode(errors="replace")
    cp.stderr = cp.stderr.decode(errors="replace")
    if check and cp.returncode != 0:
        raise AssertionError(describe(cp, "command failed"))
    return cp


def describe(cp: subprocess.CompletedProcess, what: str) -> str:
    """A readable account of a finished command, for assertion messages."""
    return (f"{what}: {shlex.join(cp.args)}\n  exit status: {cp.returncode}\n"
            f"  stdout: {cp.stdout.strip()[:2000]!r}\n  stderr: {cp.stderr.strip()[:2000]!r}")


def terrace(*args, check: bool = True, timeout: float = DEFAULT_TIMEOUT) -> subprocess.CompletedProcess:
    """Run the terrace binary with `args`."""
    return run([TERRACE_BIN, *args], check=check, timeout=timeout)


def looks_like_panic(cp: subprocess.CompletedProcess) -> bool:
    """Rust panics exit with 101 and print `panicked at`."""
    return cp.returncode == 101 or "panicked at" in cp.stderr or "RUST_BACKTRACE" in cp.stderr


def assert_clean_error(cp: subprocess.CompletedProcess, *, mentions: Sequence[str] = (),
                       one_line: bool = True) -> str:
    """Assert that a command failed the way a user-facing tool should.

    Non-zero exit, no panic, a non-empty message on stderr that (by default) fits
    on one line and mentions each string in `mentions` (typically the offending
    path). Returns the message.
    """
    assert cp.returncode != 0, describe(cp, "expected a failure but the command succeeded")
    assert not looks_like_panic(cp), describe(cp, "the command panicked instead of reporting an error")
    # clap's standard hint after a usage error is not part of the message.
    lines = [ln for ln in cp.stderr.splitlines()
             if ln.strip() and not ln.startswith("For more information, try")]
    assert lines, describe(cp, "the command failed without an error message on stderr")
    if one_line:
        assert len(lines) == 1, describe(cp, f"expected a one-line error, got {len(lines)} lines")
    message = "\n".join(lines)
    for m in mentions:
        assert str(m) in message, describe(cp, f"the error message does not mention {m!r}")
    return message


def errno_of(fn, *args, **kwargs) -> Optional[int]:
    """Call fn; return None when it succeeds, the errno of the OSError otherwise."""
    try:
        fn(*args, **kwargs)
    except OSError as e:
        return e.errno
    return None


def assert_errno(expected: int, fn, *args, **kwargs) -> None:
    """Assert that fn(*args) fails with OSError(expected)."""
    got = errno_of(fn, *args, **kwargs)
    assert got == expected, (f"{getattr(fn, '__name__', fn)}{args}: expected "
                             f"{errno.errorcode.get(expected, expected)}, got "
                             f"{'success' if got is None else errno.errorcode.get(got, got)}")


def sha256_file(path: os.PathLike) -> str:
    """sha256 of a whole file (pools are small enough to hash in a test)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------
# Mount table and processes
# --------------------------------------------------------------------------


def _unescape_mount_field(s: str) -> str:
    """/proc/self/mounts escapes space, tab, newline and backslash as \\ooo."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mounts() -> list[tuple[str, str]]:
    """(mount point, fs type) of every mount, innermost last."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                out.append((_unescape_mount_field(parts[1]), parts[2]))
    return out


def is_mounted(path: os.PathLike) -> bool:
    """True if `path` is a mount point (works on dead FUSE mounts, unlike os.path.ismount)."""
    p = os.path.abspath(path)
    return any(m == p for m, _ in mounts())


def drop_kernel_pages(path: os.PathLike) -> None:
    """Makes the kernel drop its cached pages of `path` (the mount fills them
    after a write-only descriptor is closed), so the next reads reach the
    daemon: for tests of what the daemon serves."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def wait_until(pred, timeout: float, interval: float = 0.02) -> bool:
    """Poll pred() until it is true or `timeout` seconds passed; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie whose every thread has ended.

    A multithreaded process's leader shows as a zombie as soon as it exits,
    while its other threads may still be exiting and still hold its open
    files (a daemon's pool lock among them), so a zombie leader with other
    tasks left counts as alive.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state not in ("Z", "X"):
            return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


METRICS_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def scrape_metrics(port: int) -> tuple[str, dict[str, float]]:
    """The daemon's metrics page at 127.0.0.1:`port` (`-o metrics=`): its
    Content-Type and its samples, as {"name{labels}": value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        assert r.status == 200
        ctype = r.headers["Content-Type"]
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRICS_SAMPLE.match(line)
        assert m, f"not a sample line of the text format: {line!r}"
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return ctype, samples


def find_pids_with_arg(arg: str, *more_args: str, exe_hint: str = "terrace") -> list[int]:
    """Pids of live processes whose command line has `arg` (and each of
    `more_args`) as an argument and whose program name contains `exe_hint`."""
    pids = []
    wanted = (arg, *more_args)
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        cl = _cmdline(int(d))
        if (cl and all(a in cl for a in wanted) and exe_hint in os.path.basename(cl[0])
                and pid_alive(int(d))):
            pids.append(int(d))
    return pids


def lazy_unmount(path: os.PathLike) -> None:
    """Detach a mount even if its daemon is dead or busy."""
    for cmd in (["umount", "-l", str(path)], ["fusermount3", "-uz", str(path)]):
        if not is_mounted(path):
            return
        try:
            subprocess.run(cmd, capture_output=True, timeout=30)
        except (FileNotFoundError, subprocess.TimeoutExpired):
            pass


def kill_pid(pid: Optional[int], sig: int = signal.SIGKILL, wait: float = 30.0) -> bool:
    """Send `sig` to pid (ignoring a vanished process) and wait for it to die.

    Returns True once every thread of the process has ended (so its files,
    and the pool lock among them, are closed); False if it outlived `wait`.
    """
    if not pid:
        return True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)

    def gone() -> bool:
        # Reap it if it is our child; otherwise init does.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return not pid_alive(pid)

    return wait_until(gone, wait)


def clean_stale_test_mounts() -> list[str]:
    """Lazily unmount FUSE mounts and remove pools left by dead test sessions.

    A mount or pool belongs to a dead session when the pid embedded in its name
    (terrace-test-<pid>-...) is no longer alive; mounts whose daemon died
    (ENOTCONN) are cleaned whatever their owner. Returns what was cleaned.
    """
    cleaned = []
    pat = re.compile(re.escape(MOUNT_PREFIX) + r"(\d+)-")

    def owner_dead(name: str) -> bool:
        m = pat.match(name)
        return bool(m) and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1)))

    for mnt, fstype in reversed(mounts()):
        if not fstype.startswith("fuse") or not mnt.startswith(str(MOUNT_PARENT / MOUNT_PREFIX)):
            continue
        rel = os.path.relpath(mnt, MOUNT_PARENT)
        dead_daemon = False
        try:
            os.stat(mnt)
        except OSError as e:
            dead_daemon = e.errno == errno.ENOTCONN
        if dead_daemon or owner_dead(rel):
            lazy_unmount(mnt)
            cleaned.append(mnt)
    for parent in (MOUNT_PARENT, POOL_PARENT):
        for entry in parent.glob(MOUNT_PREFIX + "*"):
            if owner_dead(entry.name) and not any(m.startswith(str(entry)) for m, _ in mounts()):
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        entry.unlink()
                cleaned.append(str(entry))
    return cleaned


# --------------------------------------------------------------------------
# Pools and mounts
# --------------------------------------------------------------------------


def unique_name(tag: str) -> str:
    """terrace-test-<pytest pid>-<tag>-<random>: unique, and attributable to this session."""
    return f"{MOUNT_PREFIX}{os.getpid()}-{tag}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def temp_pool_path(tag: str = "pool") -> Iterator[Path]:
    """A unique pool path in /dev/shm (not created); the file is removed afterwards."""
    path = POOL_PARENT / (unique_name(tag) + ".pm")
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def temp_mountpoint(tag: str = "mnt") -> Iterator[Path]:
    """A fresh empty directory usable as a mount point (world-traversable so the
    permission tests can run as another user); removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix=unique_name(tag) + "-", dir=MOUNT_PARENT))
    os.chmod(base, 0o755)
    mnt = base / "mnt"
    mnt.mkdir()
    try:
        yield mnt
    finally:
        if is_mounted(mnt):
            lazy_unmount(mnt)
        shutil.rmtree(base, ignore_errors=True)
        # Daemon logs are kept after unmounts (issue 18); a test's go with it.
        for p in (daemon_log(mnt), Path(str(daemon_log(mnt)) + ".old")):
            with contextlib.suppress(OSError):
                p.unlink()


def daemon_log(mnt: os.PathLike) -> Path:
    """The log of the detached daemon serving `mnt` (as root: in /run/terrace;
    names as `util::sanitize_mountpoint`, for the short paths tests use)."""
    name = ""
    for c in str(mnt).lstrip("/"):
        if c == "/":
            name += "-"
        elif c.isascii() and (c.isalnum() or c in "._"):
            name += c
        else:
            name += "%{:02x}".format(ord(c))
    return Path(os.environ.get("TERRACE_RUN_DIR", "/run/terrace")) / f"{name}.log"

@contextlib.contextmanager
def temp_ssd_image(tag: str = "ssd") -> Iterator[Path]:
    """A path for an SSD tier image on the disk (/var/tmp), removed afterwards."""
    parent = "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()
    path = Path(parent) / (unique_name(tag) + ".img")
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def pattern(n: int, seed: int) -> bytes:
    """`n` bytes that differ with `seed` (sha256 of seed and counter)."""
    out = bytearray()
    k = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d-%d" % (seed, k)).digest()
        k += 1
    return bytes(out[:n])


def write_pattern_file(path: os.PathLike, size: int, seed: int) -> str:
    """Write `size` bytes of a pattern chosen by `seed`, fsync, return the sha256."""
    h = hashlib.sha256()
    block = bytes((seed * 31 + k) % 251 for k in range(4096)) * 16
    with open(path, "wb") as f:
        left = size
        while left:
            b = block[:min(left, len(block))]
            f.write(b)
            h.update(b)
            left -= len(b)
        f.flush()
        os.fsync(f.fileno())
    return h.hexdigest()



def mkfs(pool: os.PathLike, size: str = "256M", *, inodes: Optional[int] = None,
         extra: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """Format a pool with one PM tier of `size`."""
    args = ["mkfs", "--tier", f"pm:{pool}:{size}"]
    if inodes:
        args += ["--inodes", str(inodes)]
    return terrace(*args, *extra)


@dataclass
class Mount:
    """A live Terrace mount started with `terrace mount --daemon`."""

    pool: Path
    path: Path
    options: Optional[str] = None
    pid: Optional[int] = field(default=None)

    def status(self, timeout: float = 30) -> dict:
        """`terrace status MNT --json`, parsed."""
        cp = terrace("status", self.path, "--json", timeout=timeout)
        return json.loads(cp.stdout)

    def find_pid(self) -> Optional[int]:
        """The daemon's pid: from `status --json` ("pid"), else the process whose
        command line names this mount point."""
        with contextlib.suppress(Exception):
            pid = int(self.status(timeout=10)["pid"])
            if pid_alive(pid):
                return pid
        pids = find_pids_with_arg(str(self.path))
        return pids[0] if len(pids) == 1 else (max(pids) if pids else None)

    def kill(self) -> Optional[int]:
        """kill -9 the daemon (a crash) and return its pid. The mount stays (dead)."""
        pid = self.pid or self.find_pid()
        assert pid, f"cannot find the daemon of {self.path}"
        assert kill_pid(pid, signal.SIGKILL), f"the daemon {pid} of {self.path} outlived kill -9"
        self.pid = None
        return pid

    def alive(self) -> bool:
        """True if the mount answers a stat()."""
        try:
            os.stat(self.path)
            return is_mounted(self.path)
        except OSError:
            return False


def kill_daemon_during_migrate(m: "Mount", image: os.PathLike, grown_blocks: int,
                               *args: str) -> tuple[int, str, str]:
    """Runs `terrace migrate ARGS MOUNT` and kills the daemon of `m` (kill -9)
    as soon as the tier image `image` has grown by `grown_blocks` 512-byte
    blocks, i.e. while data is moving; fails if the migration ended first.
    Returns the command's exit status, stdout and stderr."""
    before = os.stat(image).st_blocks
    proc = subprocess.Popen([str(TERRACE_BIN), "migrate", *args, str(m.path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        moving = wait_until(lambda: os.stat(image).st_blocks > before + grown_blocks
                            or proc.poll() is not None, 60, interval=0.002)
        assert moving and proc.poll() is None, "the migration ended before the daemon could be killed"
        m.kill()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            kill_pid(proc.pid, signal.SIGKILL)
    return proc.returncode, out.decode(), err.decode()


def mount(pool: os.PathLike, mnt: os.PathLike, options: Optional[str] = None,
          timeout: float = 60) -> Mount:
    """`terrace mount POOL MNT --daemon`, then wait until the mount is visible."""
    args = ["mount", str(pool), str(mnt), "--daemon"]
    if options:
        args += ["-o", options]
    terrace(*args, timeout=timeout)
    assert wait_until(lambda: is_mounted(mnt), 10), f"{mnt} is not mounted after `terrace mount --daemon`"
    m = Mount(Path(pool), Path(mnt), options)
    m.pid = m.find_pid()
    return m


def unmount(m: Mount, timeout: float = 60) -> bool:
    """Unmount cleanly with `terrace umount`; on failure fall back to `umount -l` and
    killing the daemon. Returns True when the clean unmount worked."""
    pid = m.pid or (m.find_pid() if is_mounted(m.path) else None)
    clean = False
    if is_mounted(m.path):
        try:
            cp = run([TERRACE_BIN, "umount", m.path], check=False, timeout=timeout)
            clean = cp.returncode == 0
        except AssertionError:  # timeout
            clean = False
        if clean:
            # The daemon must persist everything and exit; give it time to.
            wait_until(lambda: not is_mounted(m.path), 10)
            if pid:
                wait_until(lambda: not pid_alive(pid), 30)
    if is_mounted(m.path):
        clean = False
        lazy_unmount(m.path)
    if pid and pid_alive(pid):
        clean = False
        kill_pid(pid, signal.SIGKILL)
    m.pid = None
    return clean


@contextlib.contextmanager
def mounted_pool(pool: os.PathLike, mnt: os.PathLike, options: Optional[str] = None) -> Iterator[Mount]:
    """Mount `pool` on `mnt` for the duration of the block; always unmounts."""
    m = None
    try:
        m = mount(pool, mnt, options)
        yield m
    finally:
        if m is not None:
            unmount(m)
        elif is_mounted(mnt):
            lazy_unmount(mnt)
            for pid in find_pids_with_arg(str(mnt)):
                kill_pid(pid)


def fsck(pool: os.PathLike, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    """`terrace fsck POOL [args]` without failing on a non-zero exit."""
    return terrace("fsck", pool, *args, check=False, timeout=timeout)


def assert_fsck_clean(pool: os.PathLike, when: str = "") -> None:
    """Assert that `terrace fsck POOL` exits 0 (clean)."""
    cp = fsck(pool)
    assert cp.returncode == 0, describe(cp, f"fsck found problems {when}".strip())
