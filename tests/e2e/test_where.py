"""`terrace where`: complete listings through the daemon's control channel,
however many extents a file has (issue 18 point 6)."""

from __future__ import annotations

import json
import os

import pytest

from helpers import terrace

BS = 4096


def fragmented_file(path, blocks: int) -> int:
    """A dense file of `blocks` 4 KiB blocks in about `blocks` extents: the even
    blocks written first, then the odd ones between them (their data lands
    elsewhere, so no two neighbours join). Returns its size."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for first in (0, 1):
            for k in range(first, blocks, 2):
                os.pwrite(fd, bytes([k % 251]) * BS, k * BS)
            os.fsync(fd)
    finally:
        os.close(fd)
    return blocks * BS


def data_bytes(per_tier: dict) -> int:
    return sum(v for k, v in per_tier.items() if not k.endswith("-copy"))


@pytest.mark.pool(size="256M")
def test_where_lists_every_extent_of_a_file_with_thousands(mounted):
    f = mounted / "frag"
    size = fragmented_file(f, 12_000)
    # The xattr alone is cut at 64 KiB: what `where` used to read.
    assert os.getxattr(f, "user.terrace.extents").endswith(b" ..."), "expected a cut xattr"

    w = json.loads(terrace("where", "--json", f).stdout)
    assert w["complete"] is True
    assert w["size"] == size
    assert len(w["extents"]) > 5_000, len(w["extents"])
    assert data_bytes(w["bytes_per_tier"]) == size, w["bytes_per_tier"]
    assert sum(e["length"] for e in w["extents"] if not e["tier"].endswith("-copy")) == size
    # Coalesced: runs cover the file once and join the extents.
    runs = [r for r in w["runs"] if not r["tier"].endswith("-copy")]
    assert sum(r["length"] for r in runs) == size
    assert sum(r["extents"] for r in runs) == len([e for e in w["extents"] if not e["tier"].endswith("-copy")])
    assert len(runs) < 10, runs

    table = terrace("where", f).stdout.splitlines()
    assert len(table) < 20, table[:30]
    assert any(ln.startswith("extents: ") and " run" in ln for ln in table), table
    total = next(ln for ln in table if ln.startswith("total: "))
    assert total.startswith("total: pm 46.9 MiB"), total

    every = terrace("where", "--all", f).stdout.splitlines()
    rows = [ln for ln in every if ln.split() and ln.split()[0].isdigit()]
    assert len(rows) == len(w["extents"]), (len(rows), len(w["extents"]))


@pytest.mark.pool(size="128M")
def test_where_of_a_directory_sums_its_files_by_tier(mounted):
    d = mounted / "d"
    (d / "sub").mkdir(parents=True)
    sizes = 0
    for k, name in enumerate(["a", "b", "sub/c"]):
        data = os.urandom(BS * (k + 1) + 100)
        (d / name).write_bytes(data)
        sizes += len(data)
    frag = fragmented_file(d / "sub" / "frag", 6_000)
    os.symlink("a", d / "link")  # not followed, not counted
    w = json.loads(terrace("where", "--json", d).stdout)
    assert w["directory"] is True and w["files"] == 4, w
    assert w["size"] == sizes + frag
    # Allocated bytes: whole blocks.
    assert data_bytes(w["bytes_per_tier"]) == sum(-(-s // BS) * BS for s in [BS + 100, 2 * BS + 100, 3 * BS + 100]) + frag
    assert w["extents"] > 5_000
    out = terrace("where", d).stdout
    assert "(a directory): 4 files below it" in out and "total: pm" in out, out
