"""Directory listings carry their entries' attributes (READDIRPLUS, issue 16
point 2): `ls -l`, `find -ls` or a stat of every name of a directory the
kernel has not seen yet cost a request per batch of entries, not a LOOKUP
per entry; what they show is what a lookup shows; and every entry the
kernel was handed is given back, so deleted files free their inode slots.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
import urllib.request

import helpers
from helpers import mounted_pool, temp_mountpoint, temp_pool_path, terrace, wait_until


_free_port = helpers.free_port


def requests(port: int, op: str) -> int:
    """How many `op` requests the daemon has answered (its metrics page). A
    request is counted just after its reply is sent: right after the process
    that made it returns, the count may still be moving (see `settled`)."""
    key = f'terrace_fuse_request_duration_seconds_count{{op="{op}"}} '
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(key):
                return int(float(line.split()[-1]))
    return 0


def populate(d) -> None:
    d.mkdir()
    for i in range(300):
        p = d / f"file{i:03}"
        p.write_bytes(b"x" * (i * 7))
        os.chmod(p, 0o600 + (i % 8) * 0o10)
    for i in range(20):
        (d / f"dir{i}").mkdir(mode=0o750)
    for i in range(20):
        (d / f"link{i}").symlink_to(f"file{i:03}")
        os.link(d / f"file{i:03}", d / f"hard{i}")
    os.mkfifo(d / "fifo")


def snapshot(d) -> dict:
    keep = ("st_ino", "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_mtime_ns",
            "st_ctime_ns", "st_blocks")
    out = {}
    for e in os.scandir(d):
        st = os.lstat(e.path)
        out[e.name] = tuple(getattr(st, k) for k in keep)
    return out


def test_listing_a_directory_the_kernel_has_not_seen_costs_no_lookup_per_entry():
    port = _free_port()
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with mounted_pool(pool, mnt, "noatime"):
            populate(mnt / "d")
            want = snapshot(mnt / "d")
        # A fresh mount: the kernel knows no name in d.
        with mounted_pool(pool, mnt, f"noatime,metrics=127.0.0.1:{port}"):
            assert (mnt / "d").is_dir()
            lookups = requests(port, "lookup")
            got = snapshot(mnt / "d")
            spent = requests(port, "lookup") - lookups
            assert got == want, "attributes from the listing differ from a lookup's"
            assert len(got) == 361
            assert spent < 10, f"{spent} LOOKUPs for a listing of {len(got)} entries"
            assert requests(port, "readdirplus") > 0
            # The tools read the same.
            ls = subprocess.run(["ls", "-lan", "--time-style=+%s", mnt / "d"], check=True,
                                capture_output=True, text=True).stdout
            assert ls.count("\n-") == 320 and ls.count("\nd") == 22 and ls.count("\nl") == 20
            assert os.readlink(mnt / "d" / "link3") == "file003"
            assert (mnt / "d" / "link3").read_bytes() == b"x" * 21
            assert stat.S_ISFIFO(os.lstat(mnt / "d" / "fifo").st_mode)


def test_every_entry_a_listing_hands_the_kernel_is_given_back():
    """Listings of a large directory fill many replies, and entries fetched
    for a reply that did not fit in it are given back at once; once the
    files are deleted and the kernel lets go of them, every inode slot is
    free again."""
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--inodes", "8192")
        with mounted_pool(pool, mnt, "noatime"):
            d = mnt / "big"
            d.mkdir()
            free_before = os.statvfs(mnt).f_ffree
            for i in range(3000):
                (d / f"entry-with-a-longish-name-{i:05}").write_bytes(b"")
        with mounted_pool(pool, mnt, "noatime"):
            for _ in range(2):
                names = sorted(os.listdir(d))
                assert len(names) == 3000
                for n in names[::3]:
                    os.lstat(d / n)
                subprocess.run(["ls", "-l", d], check=True, stdout=subprocess.DEVNULL)
            for n in names:
                os.unlink(d / n)
            assert wait_until(lambda: os.statvfs(mnt).f_ffree == free_before, 20), (
                f"{free_before - os.statvfs(mnt).f_ffree} inode slots still taken "
                "after every file was deleted")
        helpers.assert_fsck_clean(pool, "after listings and deletes")


def drop_kernel_names() -> None:
    """Makes the kernel forget unused names and inodes (it sends FORGET for
    every inode of ours it drops)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")


def settled(port: int, op: str) -> int:
    """The count of `op` requests once it stopped moving (FORGETs arrive
    after the kernel dropped the inodes, in batches)."""
    last = -1
    for _ in range(50):
        now = requests(port, op)
        if now == last:
            return now
        last = now
        time.sleep(0.1)
    return last


def make_tree(root, dirs: int, files: int) -> int:
    root.mkdir()
    for i in range(dirs):
        sub = root / f"d{i:03}"
        sub.mkdir()
        for j in range(files):
            (sub / f"f{j:03}.c").write_bytes(b"x" * (j + 1))
    return dirs * files


def test_a_walk_that_never_stats_gets_names_without_attributes_and_one_that_stats_gets_them():
    """`find` with a name test lists every directory and stats nothing: after
    a short probe its listings carry names only, so the kernel makes no inode
    per file (counted by the FORGETs it sends when it drops them). `ls -lR`
    stats every name: its listings carry attributes again, and LOOKUPs stay
    a small share of the names (the probes)."""
    port = _free_port()
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:128M", "--inodes", "8192")
        with mounted_pool(pool, mnt, "noatime"):
            n = make_tree(mnt / "t", 100, 30)
        with mounted_pool(pool, mnt, f"noatime,metrics=127.0.0.1:{port}"):
            out = subprocess.run(["find", mnt / "t", "-name", "*.h"], check=True,
                                 capture_output=True, text=True).stdout
            assert out == ""
            forgets = settled(port, "forget")
            drop_kernel_names()
            made = settled(port, "forget") - forgets
            # The directories, and the files of the listings before the
            # first probe (15 directories of 30): about 550; every file
            # (3,000+) before listings learned to leave attributes out.
            assert made < n // 3, f"the kernel made {made} inodes for a find of {n} names"

            # A walk that stats everything gets attributes back.
            lookups = requests(port, "lookup")
            ls = subprocess.run(["ls", "-lR", mnt / "t"], check=True, capture_output=True,
                                text=True).stdout
            spent = requests(port, "lookup") - lookups
            assert ls.count("\n-rw") == n
            assert spent < n // 4, f"{spent} LOOKUPs for ls -lR of {n} names"

            # Listed again while the kernel still has them: from its cache
            # of directory contents, no request at all. The daemon counts a
            # request just after its reply is sent, so `ls` can return
            # before its last listings are counted: wait for the counts.
            listed = settled(port, "readdir") + settled(port, "readdirplus")
            subprocess.run(["find", mnt / "t", "-name", "*.h"], check=True,
                           capture_output=True)
            assert settled(port, "readdir") + settled(port, "readdirplus") == listed
