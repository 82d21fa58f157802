"""Fixtures for the Terrace end-to-end tests (real FUSE mounts of the release binary).

Fixtures
  terrace_bin     path of target/release/terrace (the session fails with a clear
                  message when it has not been built)
  pool_path       a unique, not yet created pool path in /dev/shm (removed afterwards)
  pool            a formatted pool (256M PM tier unless the test is marked
                  @pytest.mark.pool(size="1G", inodes=200000))
  mountpoint      an empty directory under /tmp/terrace-test-<pid>-*
  mounted         the pool mounted there with --daemon; yields the mount path and
                  ALWAYS unmounts at teardown (terrace umount, then umount -l and
                  kill -9 of the daemon if that fails)
  terrace_mount   the helpers.Mount object behind `mounted` (pool, pid, ...)

Every test unmounts what it mounts even when it fails: mounts are only made in
context managers or fixtures whose teardown unmounts. At session start, mounts
and pools left by dead sessions are cleaned (see helpers.clean_stale_test_mounts).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import tempfile
from pathlib import Path

import pytest

import helpers
from helpers import (  # noqa: F401  (re-exported for tests that import from conftest)
    assert_clean_error,
    assert_errno,
    assert_fsck_clean,
    errno_of,
    run,
    terrace,
)


def pytest_configure(config):
    """Register markers even when pytest runs without tests/e2e/pytest.ini."""
    config.addinivalue_line("markers", "slow: takes more than a few seconds; still run by default")
    config.addinivalue_line("markers", "pool(size, inodes, options): parameters of the `pool`/`mounted` fixtures")


def pytest_sessionstart(session):
    """Lazily unmount stale FUSE mounts under /tmp/terrace-test-* left by dead sessions."""
    cleaned = helpers.clean_stale_test_mounts()
    if cleaned:
        print(f"\nterrace e2e: cleaned {len(cleaned)} stale mount(s)/pool(s): {', '.join(cleaned[:5])}")


def pytest_sessionfinish(session, exitstatus):
    """Belt and braces: nothing of this session may stay mounted."""
    prefix = str(helpers.MOUNT_PARENT / f"{helpers.MOUNT_PREFIX}{os.getpid()}-")
    for mnt, fstype in reversed(helpers.mounts()):
        if fstype.startswith("fuse") and mnt.startswith(prefix):
            helpers.lazy_unmount(mnt)
            for pid in helpers.find_pids_with_arg(mnt):
                helpers.kill_pid(pid)


def _require_binary() -> str:
    if not helpers.TERRACE_BIN.exists():
        msg = (f"the terrace binary is missing: {helpers.TERRACE_BIN}\n"
               f"build it first with `cargo build --release` (or run `make test`)")
        if os.environ.get("TERRACE_SKIP_MISSING") == "1":
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    if os.geteuid() != 0:
        # A failure, not a skip: a green run must mean the mounts were tested.
        # A developer without root can opt out explicitly.
        msg = "the end-to-end tests mount FUSE file systems and must run as root"
        if os.environ.get("TERRACE_E2E_ALLOW_SKIP") == "1":
            pytest.skip(msg)
        pytest.fail(msg + " (set TERRACE_E2E_ALLOW_SKIP=1 to skip them instead)", pytrace=False)
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse is missing: run scripts/setup.sh (modprobe fuse)", pytrace=False)
    return str(helpers.TERRACE_BIN)


@pytest.fixture(scope="session")
def terrace_bin() -> str:
    """Path of target/release/terrace; fails the test with a clear message when missing."""
    return _require_binary()


def _pool_params(request) -> dict:
    marker = request.node.get_closest_marker("pool")
    params = {"size": "256M", "inodes": None, "options": None}
    if marker:
        params.update(marker.kwargs)
    return params


@pytest.fixture
def pool_path(terrace_bin):
    """A unique pool path in /dev/shm; nothing is created, the file is removed at teardown."""
    with helpers.temp_pool_path() as p:
        yield p


@pytest.fixture
def pool(request, pool_path):
    """A freshly formatted pool (PM tier in /dev/shm, 256M unless @pytest.mark.pool(size=...))."""
    params = _pool_params(request)
    helpers.mkfs(pool_path, params["size"], inodes=params["inodes"])
    return pool_path


@pytest.fixture
def mountpoint(terrace_bin):
    """An empty directory to mount on, removed (after a lazy unmount if needed) at teardown."""
    with helpers.temp_mountpoint() as m:
        yield m


@pytest.fixture
def terrace_mount(request, pool, mountpoint):
    """The `helpers.Mount` of `pool` on `mountpoint`; always unmounted at teardown."""
    with helpers.mounted_pool(pool, mountpoint, _pool_params(request)["options"]) as m:
        yield m


@pytest.fixture
def mounted(terrace_mount):
    """Path of a live Terrace mount (mkfs + mount --daemon); always unmounted at teardown."""
    return terrace_mount.path


# The S3 tests' server: one MinIO per test module (a fresh bucket per test
# comes from the `s3` fixture of test_s3_tier.py).
@pytest.fixture(scope="module")
def minio_server():
    """A throwaway MinIO for the module (tests/minio/minio.sh), its keys in
    the environment; yields its endpoint and data folder. Always stopped."""
    d = Path(tempfile.mkdtemp(prefix="terrace-minio-"))
    saved = dict(os.environ)
    try:
        for line in helpers.minio("start", d).splitlines():
            if line.startswith("export "):
                k, v = line[len("export "):].split("=", 1)
                os.environ[k] = shlex.split(v)[0]
        # Requests to a stopped server give up after a few seconds.
        os.environ["TERRACE_S3_TIMEOUT"] = "3"
        yield {"endpoint": os.environ["TERRACE_S3_URL"].rsplit("/", 1)[0], "dir": d}
    finally:
        with contextlib.suppress(Exception):
            helpers.minio("stop", d)
        os.environ.clear()
        os.environ.update(saved)
