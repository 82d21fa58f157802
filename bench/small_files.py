#!/usr/bin/env python3
"""Small-file capacity benchmark (issue 15): how many small files a pool holds
per MiB of PM, and create / stat / read-back time against ext4, in the same run.

Terrace: PM tier in /dev/shm at 1% of the pool (default 1 GiB PM + 99 GiB SSD
tier, a sparse image file under /var/tmp), one inode per file. ext4: a loop
device over a sparse file under /var/tmp (the same disk). Workload, the same
on both: N files of 100..1000 bytes (mean 550) in N/1000 directories,

  create   open(O_CREAT|O_EXCL) + write + close, one process
  stat     os.stat of every file, by path, after dropping the kernel's caches
  read     read back every file and compare with what was written

then Terrace's `status`: PM used, metadata, log bytes per inode. Results go to
stdout as a Markdown table and to bench/results/small-files-<date>.json.

  bench/small_files.py [--files N] [--pm SIZE] [--ssd SIZE]
  bench/small_files.py --tar DIR [DIR ...] [--pm-percent 5]

With --tar: a tar archive of the directories (system trees: headers, Python
modules, documentation) is extracted onto ext4 and onto Terrace with a PM tier
of --pm-percent of the archive's size; both extracts are timed and checked
against the archive with `tar --compare` after an unmount and a remount.

Needs root (mounts, loop devices) and target/release/terrace.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TERRACE = ROOT / "target" / "release" / "terrace"
SCRATCH = Path("/var/tmp")


def sh(*cmd, check=True, **kw) -> subprocess.CompletedProcess:
    cp = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if check and cp.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{cp.stdout}{cp.stderr}")
    return cp


def drop_caches() -> None:
    os.sync()
    with contextlib.suppress(OSError):
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def content(i: int) -> bytes:
    n = 100 + (i * 7919) % 901
    return (f"{i:08d}".encode() * 130)[:n]


def path_of(root: Path, i: int) -> Path:
    return root / f"d{i // 1000:04d}" / f"f{i:07d}"


def workload(root: Path, n: int) -> dict:
    t = {}
    start = time.monotonic()
    for d in range((n + 999) // 1000):
        (root / f"d{d:04d}").mkdir()
    for i in range(n):
        fd = os.open(path_of(root, i), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, content(i))
        os.close(fd)
    t["create_s"] = time.monotonic() - start
    drop_caches()
    start = time.monotonic()
    for i in range(n):
        os.stat(path_of(root, i))
    t["stat_s"] = time.monotonic() - start
    drop_caches()
    start = time.monotonic()
    bad = 0
    for i in range(n):
        with open(path_of(root, i), "rb") as f:
            if f.read() != content(i):
                bad += 1
    t["read_s"] = time.monotonic() - start
    t["bad_files"] = bad
    return t


@contextlib.contextmanager
def ext4_mount(size: str, mkfs_args: tuple[str, ...] = ()):
    """ext4 on a loop device over a sparse file of `size` under /var/tmp."""
    img = SCRATCH / f"bench-small-ext4-{os.getpid()}.img"
    mnt = Path(f"/tmp/bench-small-ext4-{os.getpid()}")
    mnt.mkdir(exist_ok=True)
    sh("truncate", "-s", size, img)
    loop = sh("losetup", "--find", "--show", img).stdout.strip()
    try:
        sh("mkfs.ext4", "-q", "-F", *mkfs_args, loop)
        sh("mount", loop, mnt)
        try:
            yield mnt
        finally:
            sh("umount", mnt, check=False)
    finally:
        sh("losetup", "-d", loop, check=False)
        img.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            mnt.rmdir()


@contextlib.contextmanager
def terrace_mount(pm: str, ssd: str, inodes: int | None, binary: Path = TERRACE,
                  opts: tuple[str, ...] = ()):
    """A pool of PM `pm` on /dev/shm and an SSD image of `ssd` under
    /var/tmp (mkfs's default inode count when `inodes` is None), mounted
    with `-o` `opts`; unmounted, checked with fsck and deleted afterwards."""
    pool = Path(f"/dev/shm/bench-small-{os.getpid()}.pm")
    img = SCRATCH / f"bench-small-ssd-{os.getpid()}.img"
    mnt = Path(f"/tmp/bench-small-terrace-{os.getpid()}")
    mnt.mkdir(exist_ok=True)
    count = ["--inodes", inodes] if inodes is not None else []
    sh(binary, "mkfs", "--tier", f"pm:{pool}:{pm}", "--tier", f"ssd:{img}:{ssd}", *count, "--force")
    sh(binary, "mount", pool, mnt, "--daemon", *(["-o", ",".join(opts)] if opts else []))
    try:
        yield pool, mnt
    finally:
        if sh(binary, "umount", mnt, check=False, timeout=600).returncode != 0:
            sh("umount", "-l", mnt, check=False)
        fsck = sh(binary, "fsck", pool, check=False, timeout=1200)
        print(f"{binary}: fsck after the run: exit {fsck.returncode}", file=sys.stderr)
        pool.unlink(missing_ok=True)
        img.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            mnt.rmdir()


def tar_extract(dirs: list[str], pm_percent: int) -> None:
    tar = SCRATCH / f"bench-small-tree-{os.getpid()}.tar"
    try:
        sh("tar", "-C", "/", "-cf", tar, *[d.lstrip("/") for d in dirs], timeout=1200)
        size = tar.stat().st_size
        files = int(sh("sh", "-c", f"tar -tf {tar} | grep -vc '/$'").stdout.strip())
        pm_mib = max(8, size * pm_percent // 100 >> 20)
        res = {"dirs": dirs, "tar_bytes": size, "files": files, "pm_mib": pm_mib,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        drop_caches()
        with ext4_mount("100G") as mnt:
            start = time.monotonic()
            sh("tar", "-C", mnt, "-xf", tar, timeout=3600)
            os.sync()
            res["ext4_s"] = time.monotonic() - start
        drop_caches()
        with terrace_mount(f"{pm_mib}M", "99G", files + 5000) as (pool, mnt):
            start = time.monotonic()
            cp = sh("tar", "-C", mnt, "-xf", tar, check=False, timeout=3600)
            res["terrace_s"] = time.monotonic() - start
            res["terrace_tar_exit"] = cp.returncode
            res["terrace_tar_errors"] = cp.stderr[-2000:]
            st = json.loads(sh(TERRACE, "status", mnt, "--json").stdout)
            res["terrace_pm_metadata_bytes"] = st["space"]["pm_metadata_bytes"]
            res["terrace_waits"] = st["space"]["waits"]
            sh(TERRACE, "umount", mnt, timeout=600)
            sh(TERRACE, "mount", pool, mnt, "--daemon")
            cmp = sh("tar", "-C", mnt, "--compare", "-f", tar, check=False, timeout=3600)
            res["terrace_compare_exit"] = cmp.returncode
            res["terrace_compare_diffs"] = len(cmp.stdout.splitlines())
        out = ROOT / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / f"tar-extract-pm{pm_percent}-{datetime.date.today()}.json").write_text(json.dumps(res, indent=2) + "\n")
        print(f"\ntar extract of {files:,} files ({size / 2**20:.0f} MiB) from {' '.join(dirs)}; "
              f"Terrace PM {pm_mib} MiB ({pm_percent}% of the archive) + SSD 99 GiB\n")
        print("| system | extract (s) | MB/s | Terrace / ext4 |")
        print("|---|---:|---:|---:|")
        print(f"| ext4 (loop device) | {res['ext4_s']:.1f} | {size / 1e6 / res['ext4_s']:.0f} | |")
        print(f"| Terrace | {res['terrace_s']:.1f} | {size / 1e6 / res['terrace_s']:.0f} | "
              f"{res['ext4_s'] / res['terrace_s']:.2f}x |")
        print(f"\ntar exit on Terrace: {cp.returncode}; `tar --compare` after remount: exit "
              f"{cmp.returncode}, {res['terrace_compare_diffs']} differences; "
              f"PM metadata {res['terrace_pm_metadata_bytes'] / 2**20:.1f} MiB; {res['terrace_waits']} waits for migration")
    finally:
        tar.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--pm", default="1G")
    ap.add_argument("--ssd", default="99G")
    ap.add_argument("--tar", nargs="+", metavar="DIR")
    ap.add_argument("--pm-percent", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (mounts and loop devices)")
    if not TERRACE.exists():
        raise SystemExit(f"build first: {TERRACE} is missing (cargo build --release)")
    if args.tar:
        tar_extract(args.tar, args.pm_percent)
        return
    n = args.files
    res = {"files": n, "pm": args.pm, "ssd": args.ssd,
           "machine": {"host": platform.node(), "kernel": platform.release(),
                       "cpus": os.cpu_count()},
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    with ext4_mount("100G") as mnt:
        res["ext4"] = workload(mnt, n)
        print(f"ext4: {res['ext4']}", file=sys.stderr)
    with terrace_mount(args.pm, args.ssd, n + 2000) as (_pool, mnt):
        res["terrace"] = workload(mnt, n)
        st = json.loads(sh(TERRACE, "status", mnt, "--json").stdout)
        pm = st["tiers"][0]
        sp = st["space"]
        res["terrace_status"] = {
            "inodes_used": st["inodes_used"],
            "pm_capacity": pm["capacity"],
            "pm_used": pm["used"],
            "pm_metadata_bytes": sp["pm_metadata_bytes"],
            "pm_log_bytes": sp["pm_log_bytes"],
            "waits": sp["waits"],
            "wait_ms": sp["wait_ms"],
            "migration": st["migration"]["reason"],
        }
        print(f"terrace: {res['terrace']} {res['terrace_status']}", file=sys.stderr)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"small-files-{datetime.date.today()}.json").write_text(json.dumps(res, indent=2) + "\n")
    e, t, s = res["ext4"], res["terrace"], res["terrace_status"]
    per_file = s["pm_metadata_bytes"] / max(s["inodes_used"], 1)
    print(f"\n{n:,} files of 100..1000 bytes; Terrace PM {args.pm} + SSD {args.ssd}; ext4 on a loop device\n")
    print("| phase | ext4 (s) | Terrace (s) | Terrace / ext4 |")
    print("|---|---:|---:|---:|")
    for k in ("create_s", "stat_s", "read_s"):
        print(f"| {k[:-2]} | {e[k]:.1f} | {t[k]:.1f} | {t[k] / max(e[k], 1e-9):.2f}x |")
    print(f"\nwrong files: ext4 {e['bad_files']}, Terrace {t['bad_files']}")
    print(f"Terrace PM: {s['pm_used'] / 2**20:.0f} of {s['pm_capacity'] / 2**20:.0f} MiB used, "
          f"metadata {s['pm_metadata_bytes'] / 2**20:.0f} MiB = {per_file:.0f} B per file "
          f"({2**20 / per_file:.0f} files per MiB of PM), logs {s['pm_log_bytes'] / max(s['inodes_used'], 1):.0f} B per file; "
          f"{s['waits']} waits for migration ({s['wait_ms']} ms)")


if __name__ == "__main__":
    main()
