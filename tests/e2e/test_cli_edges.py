"""CLI rough edges (issue 18): precise mkfs errors with usage exit codes, tier
files that must fit their file system, inode counts from the whole pool,
`set KEY` for every name `set KEY VALUE` takes, `rule DIR` listings, `where
DIR`, non-root status and umount, FRAG of an empty tier.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

import pytest

import helpers
from helpers import assert_clean_error, mounted_pool, temp_mountpoint, temp_pool_path, terrace
from test_faults import small_tmpfs

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def as_nobody(*args) -> "helpers.subprocess.CompletedProcess":
    return helpers.run([*NOBODY, helpers.TERRACE_BIN, *args], check=False)


@pytest.mark.parametrize("spec, names", [
    ("pm:{p}:abc", 'bad size "abc"'),
    ("pm:{p}:-5M", 'bad size "-5M"'),
    ("pm::1M", "the path is empty"),
])
def test_bad_tier_specs_name_the_bad_part_and_exit_2(pool_path, spec, names):
    cp = terrace("mkfs", "--tier", spec.format(p=pool_path), check=False)
    msg = assert_clean_error(cp)
    assert names in msg and "needs a size" not in msg, helpers.describe(cp, "imprecise error")
    assert cp.returncode == 2, helpers.describe(cp, "a bad tier spec is a usage error (exit 2)")
    assert not pool_path.exists()


@pytest.mark.parametrize("specs", [["pm:{p}"], ["pm:{p}:1000"], ["pm:{p}:12K"], ["ssd:{p}:1G"],
                                   ["pm:{p}:64M", "pm:{p}.2:64M"]],
                         ids=["no-size", "unaligned", "too-small", "no-pm", "two-pm"])
def test_every_mkfs_command_line_mistake_exits_2_like_clap(pool_path, specs):
    args = []
    for s in specs:
        args += ["--tier", s.format(p=pool_path)]
    cp = terrace("mkfs", *args, check=False)
    assert_clean_error(cp)
    assert cp.returncode == 2, helpers.describe(cp, "expected exit status 2 (usage error)")


def test_mkfs_refuses_block_tiers_out_of_speed_order_before_writing_anything():
    """Tiers go from fastest to slowest (pm, ssd, hdd, s3), as `tier add`
    keeps them: an ssd given after an hdd is a usage error (exit 2), even
    with --force, and no tier file is created or written."""
    with temp_pool_path() as pm, temp_pool_path("ssd") as ssd, temp_pool_path("hdd") as hdd:
        marker = b"not yet a tier" * 100
        with open(hdd, "wb") as f:
            f.write(marker)
            f.truncate(64 << 20)
        cp = terrace("mkfs", "--force", "--tier", f"pm:{pm}:64M", "--tier", f"hdd:{hdd}",
                     "--tier", f"ssd:{ssd}:64M", check=False)
        msg = assert_clean_error(cp, mentions=[str(ssd), str(hdd), "fastest to slowest"])
        assert "ssd tier before the hdd" in msg, helpers.describe(cp, "the message does not say the order")
        assert cp.returncode == 2, helpers.describe(cp, "tiers out of order are a usage error (exit 2)")
        assert not pm.exists() and not ssd.exists(), "a refused mkfs created a tier file"
        with open(hdd, "rb") as f:
            assert f.read(len(marker)) == marker, "a refused mkfs wrote to a tier"
        # In order, the same tiers make a pool.
        terrace("mkfs", "--force", "--tier", f"pm:{pm}:64M", "--tier", f"ssd:{ssd}:64M",
                "--tier", f"hdd:{hdd}")
        with temp_mountpoint() as mnt, mounted_pool(pm, mnt) as m:
            assert [t["kind"] for t in m.status()["tiers"]] == ["pm", "ssd", "hdd"]


def test_a_pm_tier_larger_than_its_file_system_is_refused_even_with_force():
    with small_tmpfs("12M") as d:
        for extra in ([], ["--force"]):
            cp = terrace("mkfs", *extra, "--tier", f"pm:{d}/pm:64M", check=False)
            msg = assert_clean_error(cp, mentions=[f"{d}/pm"])
            assert "free" in msg and "MiB" in msg, helpers.describe(cp, "no free space named")
            assert cp.returncode == 1
            assert not (d / "pm").exists(), "mkfs failed but created the PM file"


def _memory_available() -> int:
    """MemAvailable + SwapFree, in bytes (what mkfs compares a tmpfs PM tier with)."""
    kib = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        kib[key] = int(value.split()[0])
    return (kib["MemAvailable"] + kib.get("SwapFree", 0)) * 1024


def test_a_pm_tier_on_tmpfs_larger_than_the_memory_available_warns():
    """A tmpfs may be larger than RAM: a PM tier that fits it but not the
    memory left gets a warning (the file is sparse; nothing is allocated)."""
    avail_mib = _memory_available() >> 20
    size_mib = avail_mib + 1024
    with small_tmpfs(f"{2 * size_mib}M") as d:
        cp = terrace("mkfs", "--tier", f"pm:{d}/pm:{size_mib}M")
        assert "warning" in cp.stderr and f"{d}/pm" in cp.stderr, helpers.describe(cp, "no warning")
        assert "more than the memory available" in cp.stderr, cp.stderr
        assert os.stat(d / "pm").st_blocks * 512 < size_mib << 19, "mkfs allocated the PM tier"
        # One that fits the memory: no warning.
        cp = terrace("mkfs", "--force", "--tier", f"pm:{d}/pm:64M")
        assert "warning" not in cp.stderr, cp.stderr


def test_a_block_tier_larger_than_its_file_system_needs_force_and_warns():
    with small_tmpfs("24M") as d, temp_pool_path() as pool:
        ssd = d / "ssd.img"
        cp = terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M", check=False)
        msg = assert_clean_error(cp, mentions=[str(ssd), "--force"])
        assert "free" in msg
        assert not ssd.exists() and not pool.exists()
        cp = terrace("mkfs", "--force", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        assert "warning" in cp.stderr and str(ssd) in cp.stderr, helpers.describe(cp, "no warning")
        # One that fits needs no --force.
        cp = terrace("mkfs", "--force", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:16M")
        assert "warning" not in cp.stderr


def test_the_default_inode_count_counts_the_block_tiers():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd:
        alone = terrace("mkfs", "--tier", f"pm:{pool}:256M").stdout
        tiered = terrace("mkfs", "--force", "--tier", f"pm:{pool}:256M", "--tier", f"ssd:{ssd}:4G").stdout
    count = lambda out: int(re.search(r"inodes: (\d+)", out).group(1))  # noqa: E731
    assert count(alone) == 16383
    assert count(tiered) == 81919, tiered
    # The help's formula counts slots (16,384): the line names them and
    # says why files get one fewer.
    assert "inodes: 16383 (16,384 slots; slot 0 is reserved)" in alone, alone
    assert "inodes: 81919 (81,920 slots; slot 0 is reserved)" in tiered, tiered
    help_text = " ".join(terrace("mkfs", "--help").stdout.split())
    assert "Slot 0 is reserved" in help_text, help_text


def test_mkfs_help_describes_what_block_tiers_do_now(terrace_bin):
    text = terrace("mkfs", "--help").stdout
    assert "later versions" not in text
    for word in ("migrate", "Inodes:", "free space", "--force"):
        assert word in text, f"mkfs --help does not mention {word!r}"


@pytest.mark.pool(size="64M")
def test_set_with_one_argument_shows_the_names_the_two_argument_form_takes(terrace_mount):
    mnt = terrace_mount.path
    assert terrace("set", mnt, "policy").stdout.strip() == "policy = default"
    terrace("set", mnt, "policy", "nvmfs")
    assert terrace("set", mnt, "policy").stdout.strip() == "policy = nvmfs"
    assert terrace("set", mnt, "migration_policy").stdout.strip() == "migration_policy = nvmfs"


def test_rule_of_a_directory_lists_the_rules_below_it():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt):
            (mnt / "d" / "e").mkdir(parents=True)
            for f in ("d/e/wal", "d/plain", "top"):
                (mnt / f).write_bytes(b"x")
            terrace("rule", mnt / "d" / "e" / "wal", "pm")
            terrace("rule", mnt / "top", "ssd")
            lines = terrace("rule", mnt).stdout.splitlines()
            assert lines == [f"{mnt}: auto (no rule)", f"{mnt}/d/e/wal: pm", f"{mnt}/top: ssd"], lines
            assert terrace("rule", mnt, "--list").stdout.splitlines() == lines
            cp = terrace("rule", mnt, "pm", "--list", check=False)
            assert cp.returncode == 2 and "cannot be used with" in cp.stderr, cp.stderr
            lines = terrace("rule", mnt / "d" / "e").stdout.splitlines()
            assert lines == [f"{mnt}/d/e: auto (no rule)", f"{mnt}/d/e/wal: pm"], lines
            out = terrace("rule", mnt / "d" / "plain").stdout.strip()
            assert out == f"{mnt}/d/plain: auto (no rule)"


def test_a_listing_counts_the_files_that_inherited_their_directorys_rule_instead_of_naming_each():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt):
            big = mnt / "big"
            big.mkdir()
            terrace("rule", big, "ssd")
            (big / "sub").mkdir()
            for i in range(200):
                (big / "sub" / f"f{i}").write_bytes(b"x")
            terrace("rule", big / "sub" / "f7", "pm")
            lines = terrace("rule", mnt).stdout.splitlines()
            assert lines == [
                f"{mnt}: auto (no rule)",
                f"{big}: ssd",
                "  and 200 files and directories below it with the same rule (--all lists them)",
                f"{big}/sub/f7: pm",
            ], lines
            every = terrace("rule", big, "--all").stdout.splitlines()
            assert len(every) == 1 + 1 + 200, every[:5]
            assert f"{big}/sub/f123: ssd" in every and f"{big}/sub/f7: pm" in every


@pytest.mark.pool(size="64M")
def test_where_of_a_directory_says_it_is_a_directory(terrace_mount):
    d = terrace_mount.path / "dir"
    d.mkdir()
    out = terrace("where", d).stdout
    assert "a directory" in out and "empty or sparse file" not in out, out


@pytest.mark.pool(size="64M")
def test_anyone_may_read_the_status_of_a_root_mount(terrace_mount):
    cp = as_nobody("status", terrace_mount.path)
    assert cp.returncode == 0, helpers.describe(cp, "status as nobody")
    assert "Terrace pool" in cp.stdout


def test_a_control_socket_that_refuses_the_user_is_named_not_called_dead(monkeypatch):
    run_dir = Path(tempfile.mkdtemp(prefix="terrace-run-"))
    os.chmod(run_dir, 0o700)
    monkeypatch.setenv("TERRACE_RUN_DIR", str(run_dir))
    try:
        with temp_pool_path() as pool, temp_mountpoint() as mnt:
            helpers.mkfs(pool, "64M")
            with mounted_pool(pool, mnt):
                cp = as_nobody("status", mnt)
                msg = assert_clean_error(cp)
                assert "permission denied" in msg and "may have died" not in msg, msg
                assert "root" in msg
    finally:
        with contextlib.suppress(OSError):
            for f in run_dir.iterdir():
                f.unlink()
            run_dir.rmdir()


@pytest.mark.pool(size="64M")
def test_a_failed_non_root_umount_prints_the_fusermount_error_once(terrace_mount):
    terrace_mount.kill()
    cp = as_nobody("umount", terrace_mount.path)
    assert cp.returncode != 0
    lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, helpers.describe(cp, "expected the error once, on one line")
    assert lines[0].startswith("terrace: ")


def test_an_empty_block_tier_shows_no_fragmentation():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt):
            text = terrace("status", mnt).stdout
    io = text[text.index("  I/O"):].splitlines()
    ssd_row = next(ln for ln in io if ln.strip().startswith("ssd"))
    assert ssd_row.split()[-1] == "-", ssd_row


def test_a_path_inside_a_mount_names_the_mount_point_and_migrate_takes_it_as_what_to_move():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            (mnt / "d").mkdir()
            (mnt / "d" / "f").write_bytes(b"x" * 65536)
            for cmd in (["status"], ["set"], ["sync"], ["umount"], ["iostat"]):
                cp = terrace(*cmd, mnt / "d", check=False)
                assert_clean_error(cp, mentions=[str(mnt / "d"), f"inside the mount {mnt}"])
            # `terrace migrate FILE`: the file is what moves, on its mount.
            cp = terrace("migrate", "--to", "ssd", mnt / "d" / "f")
            assert cp.stdout.startswith("terrace: moved 64.0 KiB of 1 file to ssd"), cp.stdout
            rows = helpers.json.loads(terrace("where", "--json", mnt / "d" / "f").stdout)
            assert rows["bytes_per_tier"] == {"ssd": 65536}, rows


def test_a_user_mounts_their_own_pool_where_dev_fuse_lets_them_and_is_told_why_not_elsewhere():
    """An unprivileged user (HPC sites) formats, mounts, uses and unmounts a
    pool of their own, through fusermount3, when /dev/fuse is 0666 (most
    systems). Where it is 0600 (this CI machine's containers), the mount
    fails with one line naming /dev/fuse and what to change, not a bare
    "Permission denied" (found by hand, 2026-11-30)."""
    fuse_mode = os.stat("/dev/fuse").st_mode & 0o7777
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        os.chown(mnt, 65534, 65534)
        cp = as_nobody("mkfs", "--tier", f"pm:{pool}:64M")
        assert cp.returncode == 0, helpers.describe(cp, "mkfs as nobody")
        try:
            os.chmod("/dev/fuse", 0o600)
            cp = as_nobody("mount", "--daemon", pool, mnt)
            assert_clean_error(cp, mentions=["/dev/fuse", "0600", "chmod 0666 /dev/fuse"])
            assert not helpers.is_mounted(mnt)
            os.chmod("/dev/fuse", 0o666)
            cp = as_nobody("mount", "--daemon", pool, mnt)
            assert cp.returncode == 0, helpers.describe(cp, "mount as nobody with /dev/fuse 0666")
            write = helpers.run([*NOBODY, "sh", "-c",
                                 f"echo mine > {mnt}/f && cat {mnt}/f && stat -c %u {mnt}/f"],
                                check=False)
            assert write.stdout == "mine\n65534\n", helpers.describe(write, "write as nobody")
            # Without allow_other the mount is its owner's alone, as with any FUSE mount.
            with pytest.raises(PermissionError):
                os.stat(mnt / "f")
            assert "Terrace pool" in as_nobody("status", mnt).stdout
            cp = as_nobody("umount", mnt)
            assert cp.returncode == 0, helpers.describe(cp, "umount as nobody")
            assert not helpers.is_mounted(mnt)
        finally:
            os.chmod("/dev/fuse", fuse_mode)
        assert terrace("fsck", pool).returncode == 0


def test_a_path_that_is_not_what_the_command_takes_is_named_for_what_it_is(terrace_mount):
    """fsck given the mount point names the pool mounted there (fsck takes
    the pool, unmounted); given another directory, says what it takes; the
    commands that take a mount point tell a missing path and a file from a
    directory with nothing mounted (they all said "not mounted")."""
    mnt = terrace_mount.path
    msg = assert_clean_error(terrace("fsck", mnt, check=False),
                             mentions=[str(mnt), str(terrace_mount.pool), "terrace umount"])
    assert "is where the pool" in msg, msg
    msg = assert_clean_error(terrace("fsck", "/tmp", check=False), mentions=["pm tier"])
    assert "is a directory" in msg, msg
    with tempfile.TemporaryDirectory() as d:
        missing, plain = Path(d) / "missing", Path(d) / "file"
        plain.write_text("x")
        for cmd in ("status", "sync", "scrub"):
            msg = assert_clean_error(terrace(cmd, missing, check=False), mentions=[str(missing)])
            assert "no such file or directory" in msg, msg
            msg = assert_clean_error(terrace(cmd, plain, check=False), mentions=[str(plain)])
            assert "not a mount point (a file" in msg, msg
            msg = assert_clean_error(terrace(cmd, d, check=False), mentions=[d])
            assert "not mounted" in msg, msg


def test_a_mount_waits_for_the_daemon_still_serving_its_mount_point_to_exit(terrace_mount):
    """`umount -l M` while a file is open leaves the old daemon serving that
    file (as `umount M` leaves it persisting the pool for a moment). A new
    `terrace mount OTHER M` waits for it to exit, up to 3 s, instead of
    refusing at once with "another terrace daemon still serves this mount
    point": a script's `umount M; terrace mount P M` works."""
    m = terrace_mount
    old_pid = m.pid
    held = open(m.path / "held", "w")
    with temp_pool_path("second") as other:
        helpers.mkfs(other, "64M")
        proc = None
        try:
            helpers.lazy_unmount(m.path)
            proc = subprocess.Popen([str(helpers.TERRACE_BIN), "mount", str(other), str(m.path),
                                     "--daemon"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            time.sleep(0.5)
            assert proc.poll() is None, f"gave up while the old daemon served: {proc.communicate()}"
            assert helpers.pid_alive(old_pid), "the old daemon exited before its file closed"
            held.close()
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, f"exit {proc.returncode}: {out} {err}"
            assert helpers.is_mounted(m.path)
            second = helpers.Mount(other, m.path)
            assert second.status()["pool"].endswith(other.name), second.status()["pool"]
            assert not helpers.pid_alive(old_pid)
        finally:
            held.close()
            if proc is not None and proc.poll() is None:
                proc.kill()
            if helpers.is_mounted(m.path):
                helpers.unmount(helpers.Mount(other, m.path))


def _stop_the_mounting_child(mnt: Path, timeout: float = 5.0) -> Optional[int]:
    """Finds the daemon `terrace mount --daemon` started for `mnt` (the
    `--foreground-child` process) and stops it (SIGSTOP) as soon as it
    appears; its pid, or None if it did not appear within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in helpers.find_pids_with_arg("--foreground-child", str(mnt)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                return pid
        time.sleep(0.001)
    return None


def test_mount_daemon_says_the_daemon_is_still_mounting_after_10_s(pool, mountpoint):
    """A large pool takes a while to mount (its logs are replayed):
    `terrace mount --daemon` says after 10 s that the daemon is still
    mounting, with its pid and log, and keeps waiting instead of giving up
    or staying silent. The daemon is held with SIGSTOP before its mount
    appears, then let go; the mount must then come up and the command
    succeed. (A try where the mount appeared before the stop is undone and
    made again.)"""
    for attempt in range(5):
        proc = subprocess.Popen([str(helpers.TERRACE_BIN), "mount", str(pool), str(mountpoint),
                                 "--daemon"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        child = None
        try:
            child = _stop_the_mounting_child(mountpoint)
            assert child is not None, "the daemon process did not appear"
            if helpers.is_mounted(mountpoint):
                # Mounted before the stop: nothing to see; try again.
                print(f"attempt {attempt}: mounted before the stop")
                os.kill(child, signal.SIGCONT)
                child = None
                proc.communicate(timeout=30)
                helpers.unmount(helpers.Mount(pool, mountpoint))
                continue
            time.sleep(11)
            assert proc.poll() is None, f"gave up on a daemon still mounting: {proc.communicate()}"
            os.kill(child, signal.SIGCONT)
            child = None
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, f"exit {proc.returncode}: {out} {err}"
            note = [line for line in out.splitlines() if "still mounting" in line]
            assert note, f"no 'still mounting' note in: {out!r} {err!r}"
            assert "waiting up to 10 min" in note[0] and ".log" in note[0], note[0]
            assert "mounted" in out.splitlines()[-1], out
            assert helpers.is_mounted(mountpoint)
            m = helpers.Mount(pool, mountpoint)
            assert f"(pid {m.find_pid()})" in note[0], note[0]
            assert helpers.unmount(m)
            return
        finally:
            if child is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGCONT)
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            if helpers.is_mounted(mountpoint):
                helpers.unmount(helpers.Mount(pool, mountpoint))
    pytest.fail("the mount appeared before the daemon could be stopped, 5 times")


def test_a_bad_option_or_setting_is_a_usage_error_exit_2_and_a_failure_exit_1(pool, mountpoint):
    """One exit-code rule for every command: 2 for what the user typed wrong
    (found before anything changed), 1 for a command that failed."""
    for opts in ("bogus_option", "placement_policy=bogus", "sync_threshold_bytes=lots",
                 "norecovery", "metrics=nowhere"):
        cp = terrace("mount", "-o", opts, pool, mountpoint, check=False)
        assert_clean_error(cp)
        assert cp.returncode == 2, helpers.describe(cp, f"mount -o {opts} is a usage error")
        assert not helpers.is_mounted(mountpoint)
    with mounted_pool(pool, mountpoint) as m:
        before = terrace("set", m.path, "placement_policy").stdout
        for args, named in ((["placement_policy", "bogus"], "bogus"),
                            (["no_such_setting", "1"], "no_such_setting"),
                            (["no_such_setting"], "no_such_setting")):
            cp = terrace("set", m.path, *args, check=False)
            assert_clean_error(cp, mentions=[named])
            assert cp.returncode == 2, helpers.describe(cp, f"set {' '.join(args)} is a usage error")
        assert terrace("set", m.path, "placement_policy").stdout == before, "a refused set changed the setting"
        cp = terrace("iostat", m.path, "0", check=False)
        assert cp.returncode == 2, helpers.describe(cp, "a bad iostat interval is a usage error")
        # A tier the pool does not have (a PM-only pool here): `ssd` is a
        # tier kind, but not one of this pool.
        (m.path / "d").mkdir()
        (m.path / "d" / "f").write_bytes(b"")
        for args in (["migrate", m.path, "--to", "floppy"], ["tier", "remove", m.path, "9"],
                     ["rule", m.path / "d" / "f", "floppy"], ["rule", "-r", m.path / "d", "ssd"]):
            cp = terrace(*args, check=False)
            assert_clean_error(cp, mentions=["no tier"] if args[0] == "rule" else [])
            what = " ".join(map(str, args[:2]))
            assert cp.returncode == 2, helpers.describe(cp, f"{what} of no tier is a usage error")
        # ... found before anything changed.
        for p in (m.path / "d", m.path / "d" / "f"):
            assert terrace("rule", p).stdout.startswith(f"{p}: auto (no rule)"), "a refused rule was set"
    cp = terrace("mount", str(pool) + ".missing", mountpoint, check=False)
    assert_clean_error(cp, mentions=[".missing"])
    assert cp.returncode == 1, helpers.describe(cp, "a pool that is not there is a failure, not a usage error")


def test_a_rule_on_a_fifo_says_rules_are_for_files_and_directories_not_that_it_is_off_terrace(terrace_mount):
    fifo = terrace_mount.path / "fifo"
    os.mkfifo(fifo)
    for args in ([fifo, "pm"], [fifo]):
        cp = terrace("rule", *args, check=False)
        msg = assert_clean_error(cp, mentions=[str(fifo)])
        assert "a FIFO" in msg and "regular files and directories" in msg, helpers.describe(cp, "misleading")
        assert "not on a Terrace mount" not in msg
    # Off Terrace, a FIFO is still off Terrace.
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        other = Path(d) / "fifo"
        os.mkfifo(other)
        msg = assert_clean_error(terrace("rule", other, check=False))
        assert "not on a Terrace mount" in msg
