"""`mount -t fuse.terrace POOL DIR -o OPTS` and /etc/fstab (issue 18): mount(8)
runs /sbin/mount.fuse (mount.fuse3) for a `fuse.terrace` type, which runs
`terrace POOL DIR -o OPTS`; or a /sbin/mount.fuse.terrace link to (or copy
of) the binary. Both must mount in the background with fstab's own options
dropped, refuse unknown options with a clear error, and a plain `umount` must
leave the pool persisted and clean.

mount(8) itself is not called here: on a machine where the xfstests harness
installed its own /sbin/mount.fuse.terrace, it would run that script. The
helpers are called exactly as mount(8) calls them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import helpers
from helpers import TERRACE_BIN, is_mounted, temp_mountpoint, temp_pool_path, terrace, wait_until

MOUNT_FUSE3 = shutil.which("mount.fuse3") or "/sbin/mount.fuse3"

# An fstab line's options as a user would write them.
FSTAB_OPTS = "defaults,_netdev,nofail,x-systemd.automount,allow_other,noatime"


def _env_with_terrace_in_path() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{TERRACE_BIN.parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def _daemon_pid(mnt: Path) -> int | None:
    pids = helpers.find_pids_with_arg(str(mnt))
    return pids[0] if pids else None


def _umount_with_the_system_tool_and_check_clean(pool: Path, mnt: Path) -> None:
    pid = _daemon_pid(mnt)
    assert pid is not None, "no daemon serves the mount"
    cp = subprocess.run(["umount", str(mnt)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert wait_until(lambda: not helpers.pid_alive(pid), 30), "the daemon did not exit after umount"
    helpers.assert_fsck_clean(pool, "after a plain umount")
    # The next mount finds the pool marked clean.
    with helpers.mounted_pool(pool, mnt) as m:
        assert m.status()["clean_last_time"] is True


def test_mount_fuse3_mounts_a_pool_from_an_fstab_line_and_umount_leaves_it_clean():
    assert os.path.exists(MOUNT_FUSE3), "fuse3's mount.fuse3 is missing (scripts/setup.sh installs fuse3)"
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        try:
            # What mount(8) runs for `POOL MNT fuse.terrace OPTS 0 0`.
            cp = subprocess.run([MOUNT_FUSE3, str(pool), str(mnt), "-t", "fuse.terrace", "-o", FSTAB_OPTS],
                                capture_output=True, text=True, timeout=60, env=_env_with_terrace_in_path())
            assert cp.returncode == 0, f"mount.fuse3 failed: {cp.stderr}"
            assert is_mounted(mnt), "mount.fuse3 returned before the mount was there"
            (mnt / "f").write_bytes(b"through fstab")
            opts = [line.split()[3] for line in Path("/proc/self/mounts").read_text().splitlines()
                    if line.split()[1] == str(mnt)]
            assert opts and "noatime" in opts[0].split(","), opts
            st = terrace("status", mnt).stdout
            assert str(pool) in st
            _umount_with_the_system_tool_and_check_clean(pool, mnt)
            with helpers.mounted_pool(pool, mnt):
                assert (mnt / "f").read_bytes() == b"through fstab"
        finally:
            if is_mounted(mnt):
                helpers.lazy_unmount(mnt)


def test_a_mount_fuse_terrace_link_to_the_binary_is_a_mount8_helper():
    with temp_pool_path() as pool, temp_mountpoint() as mnt, tempfile.TemporaryDirectory() as d:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        helper = Path(d) / "mount.fuse.terrace"
        helper.symlink_to(TERRACE_BIN)
        try:
            # -f (fake): nothing is mounted.
            cp = subprocess.run([str(helper), str(pool), str(mnt), "-f", "-o", "defaults"],
                                capture_output=True, text=True, timeout=60)
            assert cp.returncode == 0 and not is_mounted(mnt), cp.stderr
            # An option Terrace does not know is the mount's error.
            cp = subprocess.run([str(helper), str(pool), str(mnt), "-o", "defaults,bogus_option"],
                                capture_output=True, text=True, timeout=60)
            assert cp.returncode != 0 and not is_mounted(mnt)
            assert "bogus_option" in cp.stderr and "panicked" not in cp.stderr, cp.stderr
            # As mount(8) calls it: source, target, then flags.
            cp = subprocess.run([str(helper), str(pool), str(mnt), "-n", "-o", "rw,defaults,nofail"],
                                capture_output=True, text=True, timeout=60)
            assert cp.returncode == 0, cp.stderr
            assert is_mounted(mnt)
            (mnt / "g").write_bytes(b"helper")
            _umount_with_the_system_tool_and_check_clean(pool, mnt)
        finally:
            if is_mounted(mnt):
                helpers.lazy_unmount(mnt)


@pytest.mark.parametrize("name, fstype", [("mount.fuse.terrace", "fuse.terrace"), ("mount.terrace", "terrace")])
def test_a_copy_of_the_binary_named_as_the_helper_mounts_as_a_link_does(name, fstype):
    """A copy (not a link) installed as /sbin/mount.fuse.terrace (or
    /sbin/mount.terrace, for `mount -t terrace`) mounts too, although the
    daemon it starts runs that same executable, named as the helper."""
    with temp_pool_path() as pool, temp_mountpoint() as mnt, tempfile.TemporaryDirectory() as d:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        helper = Path(d) / name
        shutil.copy2(TERRACE_BIN, helper)
        try:
            # As mount(8) calls it: source, target, then flags.
            cp = subprocess.run([str(helper), str(pool), str(mnt), "-n", "-o", "rw,defaults,nofail", "-t", fstype],
                                capture_output=True, text=True, timeout=60)
            assert cp.returncode == 0, f"the copied helper failed: {cp.stderr}"
            assert is_mounted(mnt)
            (mnt / "g").write_bytes(b"copied helper")
            _umount_with_the_system_tool_and_check_clean(pool, mnt)
            with helpers.mounted_pool(pool, mnt):
                assert (mnt / "g").read_bytes() == b"copied helper"
        finally:
            if is_mounted(mnt):
                helpers.lazy_unmount(mnt)


UNIT = Path(__file__).resolve().parents[2] / "dist" / "systemd" / "terrace@.service"


def _unit_lines(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]


def test_the_systemd_unit_verifies_and_its_exec_lines_mount_notify_and_unmount_cleanly():
    """systemd is not PID 1 here: the unit is checked by `systemd-analyze
    verify`, and its ExecStart/ExecStop lines are run as systemd would run
    them (instance = escaped mount point, variables from the env file, a
    notification socket) — the mount says READY=1 once it is in place; a
    crash (kill -9) is restarted as `Restart=on-failure` does, through the
    ExecStartPre lines (the dead mount detached) and ExecStart again, with
    the data back; and ExecStop leaves the pool clean."""
    import socket
    analyze = shutil.which("systemd-analyze")
    text = UNIT.read_text()
    with temp_pool_path() as pool, temp_mountpoint() as mnt, tempfile.TemporaryDirectory() as d:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        instance = subprocess.run(["systemd-escape", "--path", str(mnt)], capture_output=True,
                                  text=True, check=True).stdout.strip() if shutil.which("systemd-escape") \
            else str(mnt).strip("/").replace("/", "-")
        unit_text = text.replace("/usr/local/bin/terrace", str(TERRACE_BIN))
        if analyze:
            unit = Path(d) / f"terrace@{instance}.service"
            unit.write_text(unit_text)
            cp = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120)
            # Unknown keys are only warnings: any output is a finding.
            assert cp.returncode == 0 and not (cp.stdout + cp.stderr).strip(), \
                f"systemd-analyze verify: {cp.stdout}{cp.stderr}"
        env_vars = {"POOL": str(pool), "OPTIONS": "allow_other,noatime,_netdev"}
        (start,) = _unit_lines(unit_text, "ExecStart")
        (stop,) = _unit_lines(unit_text, "ExecStop")
        pre = _unit_lines(unit_text, "ExecStartPre")
        assert _unit_lines(unit_text, "Restart") == ["on-failure"], unit_text

        def expand(line: str) -> list[str]:
            line = line.lstrip("-").replace("%f", str(mnt)).replace("%i", instance)
            for k, v in env_vars.items():
                line = line.replace("${" + k + "}", v)
            return line.split()

        notify_path = Path(d) / "notify"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(notify_path))
        sock.settimeout(30)
        env = dict(os.environ, NOTIFY_SOCKET=str(notify_path))

        def start_service() -> subprocess.Popen:
            for line in pre:  # `-`: a failure is ignored
                cp = subprocess.run(expand(line), capture_output=True, text=True, timeout=60)
                assert cp.returncode == 0 or line.startswith("-"), (line, cp.stderr)
            p = subprocess.Popen(expand(start), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
            msg = sock.recv(256).decode()
            assert msg.startswith("READY=1"), msg
            assert f"MAINPID={p.pid}" in msg, msg
            assert is_mounted(mnt), "READY=1 came before the mount was in place"
            return p

        proc = None
        try:
            proc = start_service()
            (mnt / "f").write_bytes(b"under systemd")
            # A crash: killed by a signal, which Restart=on-failure restarts.
            proc.kill()
            assert proc.wait(timeout=30) == -9
            proc = start_service()
            assert (mnt / "f").read_bytes() == b"under systemd"
            assert int(helpers.Mount(pool, mnt).status()["pid"]) == proc.pid
            cp = subprocess.run(expand(stop), capture_output=True, text=True, timeout=120)
            assert cp.returncode == 0, cp.stderr
            assert sock.recv(256).decode() == "STOPPING=1"
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
            # The restarted daemon recovered the crashed pool and said so.
            assert "was not cleanly unmounted: recovered in " in proc.stderr.read()
        finally:
            sock.close()
            if proc is not None and proc.poll() is None:
                proc.kill()
            if is_mounted(mnt):
                helpers.lazy_unmount(mnt)
        helpers.assert_fsck_clean(pool, "after the unit's ExecStop")
        with helpers.mounted_pool(pool, mnt):
            assert (mnt / "f").read_bytes() == b"under systemd"
