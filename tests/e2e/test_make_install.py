"""`make install` run whole (issue 18 points 1, 2 and 8) into a staging
directory: `make -o build install PREFIX=… DESTDIR=…` installs the binary
built already (no cargo run), the mount(8) helper link
/sbin/mount.fuse.terrace, the systemd unit with PREFIX in its command lines,
/etc/terrace, shell completions and man pages — all under DESTDIR; a second
run replaces its own link, and a helper that is another file is kept."""

from __future__ import annotations

import filecmp
import os
import shutil

import pytest

from helpers import REPO, TERRACE_BIN, run

PREFIX = "/opt/terrace"
SUBCOMMANDS = ["mkfs", "mount", "umount", "status", "fsck", "where", "set", "migrate", "rule",
               "tier", "iostat", "scrub", "sync", "completions"]


def _make_install(dest, *extra):
    return run(["make", "-C", REPO, "--no-print-directory", "-o", "build", "install",
                f"TERRACE={TERRACE_BIN}", f"PREFIX={PREFIX}", f"DESTDIR={dest}", *extra], timeout=120)


def test_make_install_puts_every_file_under_destdir_without_building(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    dest = tmp_path / "root"
    existed = os.path.lexists(PREFIX)
    # What it would run: no cargo (the binary is built already).
    dry = run(["make", "-C", REPO, "--no-print-directory", "-n", "-o", "build", "install",
               f"TERRACE={TERRACE_BIN}", f"PREFIX={PREFIX}", f"DESTDIR={dest}"])
    assert "cargo" not in dry.stdout and "setup.sh" not in dry.stdout, dry.stdout
    assert not dest.exists(), "make -n wrote files"

    cp = _make_install(dest)
    assert "Compiling" not in cp.stderr, cp.stderr
    prefix = dest / PREFIX.lstrip("/")

    binary = prefix / "bin" / "terrace"
    assert binary.is_file() and os.access(binary, os.X_OK), binary
    assert filecmp.cmp(binary, TERRACE_BIN, shallow=False), "the installed binary is not the built one"
    assert run([binary, "--version"]).stdout.startswith("terrace "), "the installed binary does not run"

    helper = dest / "sbin" / "mount.fuse.terrace"
    assert helper.is_symlink(), f"{helper} is not a link"
    assert os.readlink(helper) == f"{PREFIX}/bin/terrace", os.readlink(helper)
    assert f"linked {helper}" in cp.stdout, cp.stdout

    unit = dest / "etc" / "systemd" / "system" / "terrace@.service"
    text = unit.read_text()
    assert "/usr/local/bin/terrace" not in text, "PREFIX was not substituted in the unit"
    assert f"ExecStart={PREFIX}/bin/terrace mount ${{POOL}} %f -o ${{OPTIONS}}" in text, text
    assert f"{PREFIX}/bin/terrace umount" in text, text
    assert "Type=notify" in text and "[Install]" in text
    assert (dest / "etc" / "terrace").is_dir()

    share = prefix / "share"
    completions = [share / "bash-completion" / "completions" / "terrace",
                   share / "zsh" / "site-functions" / "_terrace",
                   share / "fish" / "vendor_completions.d" / "terrace.fish"]
    for c in completions:
        assert c.is_file() and c.stat().st_size > 0, c
        assert "iostat" in c.read_text(), f"{c} does not complete iostat"
    run(["bash", "-n", completions[0]])
    man = share / "man" / "man1"
    assert (man / "terrace.1").is_file()
    for sub in SUBCOMMANDS:
        page = man / f"terrace-{sub}.1"
        assert page.is_file() and page.read_text().startswith(".ie"), page
    # Nothing landed outside DESTDIR.
    if not existed:
        assert not os.path.lexists(PREFIX), f"make install wrote {PREFIX} outside DESTDIR"

    # Again over the same tree: the link is replaced, the files rewritten.
    again = _make_install(dest)
    assert os.readlink(helper) == f"{PREFIX}/bin/terrace", again.stdout

    # A mount helper that is a file of its own is kept.
    helper.unlink()
    helper.write_text("#!/bin/sh\nexit 0\n")
    kept = _make_install(dest)
    assert "kept" in kept.stdout and helper.read_text() == "#!/bin/sh\nexit 0\n", kept.stdout
