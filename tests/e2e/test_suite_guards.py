"""The suite guards itself: a run that could not mount anything is a failure,
never a green run of skipped tests."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import helpers

HERE = Path(__file__).resolve().parent


def _pytest_as_nobody(site: Path, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """Run pytest on the e2e folder as user nobody, with a copy of pytest that
    nobody can read (this interpreter may live under root's home)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": str(site),
           "PYTHONDONTWRITEBYTECODE": "1"}
    env.update(env_extra or {})
    python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
           python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=120)


def _readable_copy_of_pytest(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        src = Path(mod.__file__)
        if src.name == "__init__.py":
            shutil.copytree(src.parent, dest / src.parent.name, dirs_exist_ok=True)
        else:
            shutil.copy(src, dest / src.name)
    os.chmod(dest, 0o755)
    for root, dirs, files in os.walk(dest):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return dest


def test_without_root_the_mount_tests_fail_instead_of_skipping(terrace_bin):
    # Not pytest's tmp_path: its parents are private to root.
    with tempfile.TemporaryDirectory(prefix="terrace-guard-") as tmp:
        os.chmod(tmp, 0o755)
        _check_guard(_readable_copy_of_pytest(Path(tmp) / "site"))


def _check_guard(site: Path) -> None:
    target = "test_bad_input.py::test_mounting_a_missing_pool_fails_cleanly_and_creates_nothing"
    cp = _pytest_as_nobody(site, target)
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0, f"as nobody the run passed:\n{out}"
    assert "must run as root" in out and "skipped" not in out.splitlines()[-1], out
    opted_out = _pytest_as_nobody(site, target, env_extra={"TERRACE_E2E_ALLOW_SKIP": "1"})
    assert opted_out.returncode == 0 and "skipped" in opted_out.stdout, \
        helpers.describe(opted_out, "the explicit opt-out")
