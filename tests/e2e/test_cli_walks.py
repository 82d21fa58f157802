"""The commands that walk a directory tree (`terrace rule -r`, `terrace rule
DIR`, `terrace where DIR`, `terrace migrate`) reach every file below it, as
find and du do:

- files whose path is longer than PATH_MAX (4096 bytes) are walked through
  directory file descriptors, not skipped (before: `rule -r` said it pinned
  20 of 26 entries and exited 0, `where` said "0 files below it");
- an entry the walk cannot read is named on one line and the command exits
  non-zero, never reporting success for part of the tree;
- a file with several names (hard links) counts once, by inode, as du counts
  it (before: `where` warned "the daemon did not list it" for the second
  name and summed its size twice; `migrate` failed it once per name and
  counted names, not files).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from pathlib import Path

import pytest

import helpers
from helpers import mounted_pool, temp_mountpoint, temp_pool_path, temp_ssd_image, terrace

MiB = 1 << 20
RULE = "user.terrace.rule"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# 25 levels of 200-byte names: the leaf's path is over 5,000 bytes.
DEPTH, NAME_LEN = 25, 200


@pytest.fixture
def tiered_mount(terrace_bin):
    """A pool of a 64 MiB PM tier and a 1 GiB SSD tier, mounted with
    allow_other (so another user can walk it); always unmounted."""
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:1G")
        with mounted_pool(pool, mnt, "allow_other") as m:
            yield m.path


def deep_names() -> list[str]:
    return [(f"{k:02d}-" + "d" * NAME_LEN)[:NAME_LEN] for k in range(DEPTH)]


@contextlib.contextmanager
def deep_dir_fd(top: Path):
    """An fd of the deepest directory below `top` (opened level by level:
    its path is too long for one open)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in deep_names():
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        yield fd
    finally:
        os.close(fd)


def make_deep_tree(top: Path, data: bytes) -> None:
    """`top`, DEPTH nested directories below it and a file `leaf` holding
    `data` at the bottom."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in deep_names():
            os.mkdir(name, dir_fd=fd)
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        leaf = os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
        try:
            os.write(leaf, data)
            os.fsync(leaf)
        finally:
            os.close(leaf)
    finally:
        os.close(fd)
    assert len(str(top)) + DEPTH * (NAME_LEN + 1) + len("/leaf") > 5000


def leaf_rule(top: Path):
    """The rule of the deep tree's leaf, or None."""
    with deep_dir_fd(top) as d:
        leaf = os.open("leaf", os.O_RDONLY, dir_fd=d)
        try:
            return os.getxattr(leaf, RULE).decode()
        except OSError as e:
            assert e.errno == errno.ENODATA, e
            return None
        finally:
            os.close(leaf)


def write_file(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.write(os.urandom(MiB) * (size // MiB))
        f.flush()
        os.fsync(f.fileno())


def data_bytes(per_tier: dict) -> int:
    return sum(v for k, v in per_tier.items() if not k.endswith("-copy"))


def test_rule_recursive_sets_and_clears_files_deeper_than_path_max(tiered_mount):
    top = tiered_mount / "deep"
    make_deep_tree(top, b"x" * 10_000)
    cp = terrace("rule", "-r", top, "ssd", check=False)
    assert cp.returncode == 0, helpers.describe(cp, "rule -r of a deep tree")
    assert cp.stderr == "", cp.stderr
    assert f"and {DEPTH + 1} files and directories below it" in cp.stdout, cp.stdout
    assert leaf_rule(top) == "ssd"

    cp = terrace("rule", top, check=False)
    assert cp.returncode == 0, helpers.describe(cp, "rule listing of a deep tree")
    assert f"and {DEPTH + 1} files and directories below it with the same rule" in cp.stdout, cp.stdout

    cp = terrace("rule", "-r", top, "auto", check=False)
    assert cp.returncode == 0, helpers.describe(cp, "rule -r auto of a deep tree")
    assert f"and {DEPTH + 1} files and directories below it" in cp.stdout, cp.stdout
    assert leaf_rule(top) is None


def test_where_and_migrate_count_files_deeper_than_path_max(tiered_mount):
    top = tiered_mount / "deep"
    make_deep_tree(top, b"y" * 10_000)
    cp = terrace("where", top, check=False)
    assert cp.returncode == 0, helpers.describe(cp, "where of a deep tree")
    assert "(a directory): 1 file below it, 9.8 KiB (10000 bytes)" in cp.stdout, cp.stdout
    w = json.loads(terrace("where", "--json", top).stdout)
    assert (w["files"], w["size"], w["complete"]) == (1, 10_000, True), w

    cp = terrace("migrate", "--to", "ssd", tiered_mount, top, check=False)
    assert cp.returncode == 0, helpers.describe(cp, "migrate of a deep tree")
    assert "of 1 file to ssd" in cp.stdout, cp.stdout
    w = json.loads(terrace("where", "--json", top).stdout)
    assert set(w["bytes_per_tier"]) == {"ssd"}, w


def test_an_unreadable_directory_is_named_and_fails_the_walk(tiered_mount):
    d = tiered_mount / "d"
    (d / "locked").mkdir(parents=True)
    (d / "open").write_bytes(b"z" * 5000)
    (d / "locked" / "hidden").write_bytes(b"z" * 7000)
    os.chmod(d / "locked", 0o700)
    os.setxattr(d / "open", RULE, b"ssd")

    cp = helpers.run([*NOBODY, helpers.TERRACE_BIN, "where", "--json", d], check=False)
    assert cp.returncode == 1, helpers.describe(cp, "where with an unreadable directory")
    assert f"{d}/locked: permission denied" in cp.stderr, cp.stderr
    w = json.loads(cp.stdout)
    assert (w["files"], w["size"], w["complete"]) == (1, 5000, False), w

    cp = helpers.run([*NOBODY, helpers.TERRACE_BIN, "rule", d], check=False)
    assert cp.returncode == 1, helpers.describe(cp, "rule listing with an unreadable directory")
    assert f"{d}/open: ssd" in cp.stdout and "(incomplete: 1 entry could not be read" in cp.stdout, cp.stdout
    # Its rule and its entries cannot be read: one line says it.
    assert cp.stderr.count(f"{d}/locked: permission denied") == 1, cp.stderr


def test_where_and_migrate_count_a_hard_linked_file_once(tiered_mount):
    d = tiered_mount / "h"
    for sub in "abc":
        (d / sub).mkdir(parents=True)
    write_file(d / "c" / "big", 8 * MiB)
    write_file(d / "b" / "small", 1 * MiB)
    os.link(d / "c" / "big", d / "a" / "big.hl")

    cp = terrace("where", d, check=False)
    assert cp.returncode == 0, helpers.describe(cp, "where with a hard link")
    assert cp.stderr == "", cp.stderr
    assert "(a directory): 2 files below it, 9.0 MiB" in cp.stdout, cp.stdout
    w = json.loads(terrace("where", "--json", d).stdout)
    assert (w["files"], w["size"]) == (2, 9 * MiB), w
    assert data_bytes(w["bytes_per_tier"]) == 9 * MiB, w

    cp = terrace("migrate", "--to", "ssd", tiered_mount, d, check=False)
    assert cp.returncode == 0, helpers.describe(cp, "migrate with a hard link")
    assert re.match(r"terrace: moved 9\.0+ MiB of 2 files to ssd", cp.stdout), cp.stdout
    w = json.loads(terrace("where", "--json", d).stdout)
    assert w["bytes_per_tier"] == {"ssd": 9 * MiB}, w
    cp = terrace("migrate", "--to", "ssd", tiered_mount, d, check=False)
    assert cp.returncode == 0, helpers.describe(cp, "second migrate with a hard link")
    assert "moved 0 B of 0 files to ssd" in cp.stdout and "2 files already there" in cp.stdout, cp.stdout


def test_migrate_names_a_hard_linked_file_that_fails_once(tiered_mount):
    d = tiered_mount / "h"
    d.mkdir()
    write_file(d / "big", 96 * MiB)
    os.link(d / "big", d / "big.hl")
    terrace("migrate", "-q", "--to", "ssd", tiered_mount, d)
    cp = terrace("migrate", "--to", "pm", tiered_mount, d, check=False)
    assert cp.returncode == 1, helpers.describe(cp, "migrate up of a file PM cannot hold")
    failures = [ln for ln in cp.stderr.splitlines() if "no room on pm" in ln]
    assert len(failures) == 1, cp.stderr
    assert "moved 0 B of 1 file to pm" in cp.stdout and "1 file failed" in cp.stdout, cp.stdout
