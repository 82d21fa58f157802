"""The Debian package (issue 18 point 9): `make deb-package` builds it with
dpkg-deb; it installs into this machine with `dpkg -i`, puts its files in
place, mounts a pool from an fstab line (`mount --fstab FILE MNT`: mount(8)
reads the line and runs the installed helper), and `dpkg -P` (remove and
purge) takes it away. Files it replaces (an xfstests helper script at
/sbin/mount.fuse.terrace, say) are put back afterwards."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import (REPO, TERRACE_BIN, is_mounted, lazy_unmount, mkfs, run, temp_mountpoint,
                     temp_pool_path, wait_until, find_pids_with_arg, kill_pid)

PACKAGE_FILES = ["/usr/bin/terrace", "/sbin/mount.fuse.terrace", "/lib/systemd/system/terrace@.service",
                 "/usr/share/bash-completion/completions/terrace",
                 "/usr/share/zsh/vendor-completions/_terrace",
                 "/usr/share/fish/vendor_completions.d/terrace.fish",
                 "/usr/share/man/man1/terrace.1.gz", "/usr/share/man/man1/terrace-mount.1.gz"]


def _installed() -> bool:
    cp = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "terrace"], capture_output=True, text=True)
    return cp.returncode == 0 and cp.stdout.endswith(" installed")


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "installing a package needs root"
    for tool in ("dpkg-deb", "dpkg", "make", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if subprocess.run(["dpkg", "-s", "fuse3"], capture_output=True).returncode != 0:
        return "fuse3 (the package's dependency) is not installed"
    if _installed():
        return "a terrace package is installed already: not replacing it"
    for d in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if d.isdigit() and b"xfstests" in Path(f"/proc/{d}/cmdline").read_bytes():
                return "an xfstests run uses /sbin/mount.fuse.terrace now"
    return None


@contextlib.contextmanager
def files_kept(paths, store: Path):
    """Copies of the files at `paths` that exist, put back on exit."""
    saved = {}
    for p in paths:
        if os.path.lexists(p):
            dst = store / p.strip("/").replace("/", "_")
            shutil.copy2(p, dst, follow_symlinks=False)
            saved[p] = dst
    try:
        yield
    finally:
        for p, src in saved.items():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            shutil.copy2(src, p, follow_symlinks=False)


def test_the_deb_installs_mounts_from_an_fstab_line_through_the_helper_and_removes(tmp_path):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    out = tmp_path / "deb"
    cp = run(["make", "-C", REPO, "--no-print-directory", "deb-package", f"TERRACE={TERRACE_BIN}",
              f"DEB_DIR={out}"], timeout=120)
    debs = list(out.glob("terrace_*_*.deb"))
    assert len(debs) == 1, cp.stdout
    info = run(["dpkg-deb", "-f", debs[0], "Package", "Depends"]).stdout
    assert "Package: terrace" in info and "Depends: fuse3" in info, info

    with files_kept(PACKAGE_FILES, tmp_path), temp_pool_path() as pool, temp_mountpoint() as mnt:
        installed = False
        try:
            run(["dpkg", "-i", debs[0]], timeout=120)
            installed = True
            for f in PACKAGE_FILES:
                assert os.path.lexists(f), f
            assert os.readlink("/sbin/mount.fuse.terrace") == "/usr/bin/terrace"
            assert "/usr/bin/terrace mount" in Path("/lib/systemd/system/terrace@.service").read_text()
            assert run(["/usr/bin/terrace", "--version"]).stdout.startswith("terrace ")

            mkfs(pool, "64M")
            # An fstab line, read by mount(8) itself (from a file of the
            # test's own: /etc/fstab is left alone).
            fstab = tmp_path / "fstab"
            fstab.write_text(f"{pool}  {mnt}  fuse.terrace  defaults,_netdev,noatime,sync_threshold_bytes=4M  0 0\n")
            run(["mount", "--fstab", fstab, mnt], timeout=60)
            assert wait_until(lambda: is_mounted(mnt), 10), "not mounted"
            (mnt / "hello").write_text("from the package\n")
            st = run(["/usr/bin/terrace", "status", "--json", mnt]).stdout
            assert '"mountpoint"' in st
            # The line's own option reached the daemon.
            got = run(["/usr/bin/terrace", "set", mnt, "sync_threshold_bytes"]).stdout
            assert "4M" in got or "4194304" in got, got
            run(["umount", mnt], timeout=60)
            assert wait_until(lambda: not is_mounted(mnt), 10), "still mounted"
            assert wait_until(lambda: not find_pids_with_arg(str(mnt)), 30), "the daemon did not exit"
            run([TERRACE_BIN, "fsck", pool])
        finally:
            if is_mounted(mnt):
                lazy_unmount(mnt)
            for pid in find_pids_with_arg(str(mnt)):
                kill_pid(pid)
            if installed or _installed():
                # -P: remove and purge (a package with maintainer scripts
                # stays listed after a plain -r).
                run(["dpkg", "-P", "terrace"], timeout=120)
        for f in PACKAGE_FILES:
            assert not os.path.lexists(f), f"{f} left after dpkg -P"
    assert not _installed()
