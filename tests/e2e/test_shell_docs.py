"""Shell completions and manual pages generated from the clap definitions
(issue 18 point 8): `terrace completions SHELL`, the hidden `terrace man DIR`,
and `make install-docs`, which `make install` runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import REPO, TERRACE_BIN, describe, run, terrace

SUBCOMMANDS = ["mkfs", "mount", "umount", "status", "fsck", "where", "set", "migrate", "rule",
               "tier", "iostat", "scrub", "sync", "completions"]
# Subcommands of subcommands get pages of their own too.
NESTED = ["tier-add", "tier-remove"]


def test_the_bash_completion_script_is_valid_bash_and_completes_subcommands(tmp_path):
    script = tmp_path / "terrace.bash"
    script.write_text(terrace("completions", "bash").stdout)
    run(["bash", "-n", script])
    # Completing `terrace wh` offers `where`.
    cp = run(["bash", "-c", f"source {script}; COMP_WORDS=(terrace wh); COMP_CWORD=1; "
              "_terrace terrace wh terrace; printf '%s\\n' \"${COMPREPLY[@]}\""])
    assert "where" in cp.stdout.split(), cp.stdout


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_parse(shell, tmp_path):
    text = terrace("completions", shell).stdout
    assert "terrace" in text and "migrate" in text
    # `make setup` installs both shells; a machine without them fails here
    # rather than passing unchecked.
    assert shutil.which(shell), f"{shell} is not installed (make setup installs it)"
    script = tmp_path / f"terrace.{shell}"
    script.write_text(text)
    run([shell, "-n", script])


def test_fish_completes_subcommands_and_options(tmp_path):
    script = tmp_path / "terrace.fish"
    script.write_text(terrace("completions", "fish").stdout)
    cp = run(["fish", "-c", f"source {script}; complete -C 'terrace wh'"])
    assert cp.stdout.split("\t")[0] == "where", cp.stdout
    cp = run(["fish", "-c", f"source {script}; complete -C 'terrace migrate --'"])
    assert "--to" in cp.stdout.split(), cp.stdout


def test_the_zsh_script_defines_its_completion_function(tmp_path):
    script = tmp_path / "_terrace"
    script.write_text(terrace("completions", "zsh").stdout)
    cp = run(["zsh", "-fc", f"autoload -U compinit; compinit -u -D; source {script}; "
              "whence -w _terrace"])
    assert cp.stdout.strip() == "_terrace: function", cp.stdout


def test_an_unknown_shell_is_a_usage_error():
    cp = terrace("completions", "tcsh", check=False)
    assert cp.returncode == 2, describe(cp, "expected a usage error")
    assert "possible values" in cp.stderr


def test_man_pages_render_for_the_command_and_every_subcommand(tmp_path):
    out = terrace("man", tmp_path / "man1").stdout
    assert f"{1 + len(SUBCOMMANDS) + len(NESTED)} manual pages" in out, out
    pages = sorted(p.name for p in (tmp_path / "man1").iterdir())
    assert pages == sorted(["terrace.1"] + [f"terrace-{s}.1" for s in SUBCOMMANDS + NESTED]), pages
    for name in pages:
        text = (tmp_path / "man1" / name).read_text()
        assert ".TH " in text and ".SH NAME" in text, name
    if shutil.which("man") is None:
        return  # the roff headers above are what can be checked
    env = dict(os.environ, MANWIDTH="100", LC_ALL="C.UTF-8")
    cp = subprocess.run(["man", "-l", str(tmp_path / "man1" / "terrace-where.1")],
                        capture_output=True, text=True, env=env, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert "NAME" in cp.stdout and "--all" in cp.stdout and "Examples:" in cp.stdout, cp.stdout


def test_make_install_docs_puts_completions_and_pages_in_place(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    dest = tmp_path / "root"
    run(["make", "-C", REPO, "--no-print-directory", "install-docs", f"TERRACE={TERRACE_BIN}",
         f"DESTDIR={dest}", "PREFIX=/usr", "MANGZIP=1"])
    for rel in ["usr/share/bash-completion/completions/terrace", "usr/share/zsh/site-functions/_terrace",
                "usr/share/fish/vendor_completions.d/terrace.fish", "usr/share/man/man1/terrace.1.gz",
                "usr/share/man/man1/terrace-mount.1.gz"]:
        assert (dest / rel).is_file() and (dest / rel).stat().st_size > 0, rel
    run(["bash", "-n", dest / "usr/share/bash-completion/completions/terrace"])
