#!/usr/bin/env python3
"""Write the results file of an xfstests run against Terrace (called by run.sh).

Reads the ./check output, xfstests' results folder, the expected-failures
file, the `terrace status --json` lines the umount helper saved and the final
fsck of the pools; writes a Markdown report; prints the counts.

Exit status: 0 no unexpected failures, 1 unexpected failures (or a final fsck
that found problems), 2 the run produced no results.
"""

import argparse
import collections
import datetime
import difflib
import json
import os
import platform
import re
import subprocess
import sys

TEST_RE = re.compile(r"^([a-z0-9]+/\d{3,})\b(.*)$")


def parse_args():
    p = argparse.ArgumentParser()
    for name in ("config", "check-log", "results", "tests", "expected", "status-log", "fsck",
                 "out", "command", "terrace-version", "git-rev", "xfstests", "pools",
                 "mount-opts", "options"):
        p.add_argument("--" + name, default="")
    p.add_argument("--check-rc", type=int, default=0)
    p.add_argument("--seconds", type=int, default=0)
    return p.parse_args()


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def parse_check_log(text):
    """Returns (ran, notrun, failed, per-test status lines)."""
    ran = notrun = failed = None
    lines = {}
    for line in text.splitlines():
        if line.startswith("Ran:"):
            ran = line[4:].split()
        elif line.startswith("Not run:"):
            notrun = line[8:].split()
        elif line.startswith("Failures:"):
            failed = line[9:].split()
        else:
            m = TEST_RE.match(line)
            if m:
                lines[m.group(1)] = m.group(2).strip()
    if ran is None:
        # Interrupted run: classify the per-test lines.
        ran, notrun, failed = [], [], []
        for t, rest in lines.items():
            if "[expunged]" in rest:
                continue
            if "[not run]" in rest:
                notrun.append(t)
                continue
            ran.append(t)
            if "output mismatch" in rest or "[failed" in rest or "_check_" in rest:
                failed.append(t)
    return ran, notrun or [], failed or [], lines


def parse_expected(path):
    expected, known = {}, {}
    for raw in read(path).splitlines():
        line = raw.strip()
        m = re.match(r"^#\s*known:\s*([a-z0-9]+/\d+)\s*(?:#\s*(.*))?$", line)
        if m:
            known[m.group(1)] = (m.group(2) or "").strip()
            continue
        if not line or line.startswith("#"):
            continue
        test, _, reason = line.partition("#")
        expected[test.strip()] = reason.strip()
    return expected, known


def failure_hint(test, results, tests_dir, status_line):
    hints = []
    bad = os.path.join(results, test + ".out.bad")
    good = os.path.join(tests_dir, test + ".out")
    if os.path.exists(bad):
        diff = [l for l in difflib.unified_diff(read(good).splitlines(), read(bad).splitlines(), lineterm="", n=0)
                if l[:1] in "+-" and not l.startswith(("+++", "---"))]
        if diff:
            hints.append(" / ".join(d[:110] for d in diff[:2]) + (f" (+{len(diff) - 2} more lines)" if len(diff) > 2 else ""))
    if os.path.exists(os.path.join(results, test + ".dmesg")):
        hints.append("kernel warning in dmesg")
    full = read(os.path.join(results, test + ".full"))
    if "Terrace pool" in full and "inconsistent (terrace fsck)" in full:
        hints.append("terrace fsck found problems in the scratch pool")
    if not hints and status_line:
        hints.append(status_line)
    return "; ".join(hints) or "see the .full file"


def notrun_reasons(results, notrun):
    reasons = collections.OrderedDict()
    for t in notrun:
        r = read(os.path.join(results, t + ".notrun")).strip().splitlines()
        reason = r[0] if r else "(no reason recorded)"
        reasons.setdefault(reason, []).append(t)
    return sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def activity(status_log):
    keys = collections.OrderedDict([
        ("mounts with counters saved", None),
        ("bytes written", ("bytes_written",)),
        ("writes placed on PM", ("placed_pm",)),
        ("writes placed on block tiers", ("placed_block",)),
        ("placement overflows (PM full)", ("placement_overflows",)),
        ("DRAM cache write-backs", ("cache", "writebacks")),
        ("DRAM cache bytes written back", ("cache", "writeback_bytes")),
        ("migration bytes down", ("migration", "bytes_down")),
        ("migration bytes up", ("migration", "bytes_up")),
        ("migration bytes copied (clean copies)", ("migration", "bytes_copied")),
        ("migration entries moved", ("migration", "entries_moved")),
        ("logs moved to a block tier", ("log_migration", "moved")),
        ("extents recycled", ("cleaner", "extents_recycled")),
        ("fsyncs", ("fsyncs",)),
    ])
    sums = collections.OrderedDict((k, 0) for k in keys)
    text, pos, dec = read(status_log), 0, json.JSONDecoder()
    while True:
        start = text.find("{", pos)
        if start < 0:
            break
        try:
            s, pos = dec.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        sums["mounts with counters saved"] += 1
        for k, path in keys.items():
            if path is None:
                continue
            v = s
            for p in path:
                v = v.get(p, 0) if isinstance(v, dict) else 0
            if isinstance(v, (int, float)):
                sums[k] += v
    return sums


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


def machine():
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""
    mem = sh("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo")
    cpu = sh("lscpu | sed -n 's/^Model name: *//p' | head -n1")
    return [
        ("kernel", platform.release()),
        ("CPUs", f"{os.cpu_count()} ({cpu})" if cpu else str(os.cpu_count())),
        ("RAM", mem),
        ("OS", sh(". /etc/os-release && echo $PRETTY_NAME")),
        ("/dev/shm", sh("df -h --output=fstype,size /dev/shm | tail -n1")),
        ("/var/tmp", sh("df -h --output=fstype,size /var/tmp | tail -n1")),
    ]


def main():
    a = parse_args()
    log = read(a.check_log)
    ran, notrun, failed, lines = parse_check_log(log)
    if not ran and not notrun:
        print("report: the run produced no results (see %s)" % a.check_log, file=sys.stderr)
        return 2
    expected, known = parse_expected(a.expected)
    # ./check's "Ran:" list includes the tests that were not run.
    notrun_set, failed_set = set(notrun), set(failed)
    executed = [t for t in ran if t not in notrun_set]
    passed = [t for t in executed if t not in failed_set]
    unexpected = [t for t in failed if t not in expected]
    expected_failed = [t for t in failed if t in expected]
    expected_passed = sorted(t for t in expected if t in passed)
    expected_notrun = sorted(t for t in expected if t in notrun)
    fsck = read(a.fsck)
    fsck_bad = [m.group(1) for m in re.finditer(r"^## terrace fsck (\S+) \(exit (?!0\))", fsck, re.M)]
    times = []
    for line in read(os.path.join(a.results, "check.time")).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] in executed:
            times.append((int(parts[1]), parts[0]))
    times.sort(reverse=True)

    o = []
    w = o.append
    today = datetime.date.today().isoformat()
    w(f"# xfstests on Terrace: `{a.config}` config, {today}\n")
    w(f"Command: `{a.command}` (or `make xfstests XFSTESTS_CONFIG={a.config}`), "
      f"{a.seconds // 60} min {a.seconds % 60} s.\n")
    w("| | |\n|---|---|")
    w(f"| passed | **{len(passed)}** |")
    w(f"| failed | **{len(failed)}** ({len(expected_failed)} expected, **{len(unexpected)} unexpected**) |")
    w(f"| not run | {len(notrun)} |")
    w(f"| total | {len(executed) + len(notrun)} |")
    if a.check_rc not in (0, 1):
        w(f"| ./check exit status | {a.check_rc} |")
    w("")
    w("## Setup\n")
    w(f"- Terrace: `{a.terrace_version}`, {a.git_rev}")
    w(f"- xfstests: `{a.xfstests}`, FSTYP=fuse, FUSE_SUBTYP=.terrace, mounted through "
      "`/sbin/mount.fuse.terrace` (tests/xfstests/)")
    w(f"- pools: {a.pools}")
    w(f"- mount options: `{a.mount_opts}` (plus each test's own)")
    w(f"- harness: {a.options}")
    w("")
    w("## Machine\n")
    for k, v in machine():
        w(f"- {k}: {v}")
    w("")
    w(f"## Unexpected failures ({len(unexpected)})\n")
    if unexpected:
        w("Failed and not in tests/xfstests/expected-failures (first differing lines of the output):\n")
        for t in unexpected:
            note = f" **[known bug: {known[t]}]**" if t in known else ""
            w(f"- `{t}`{note}: {failure_hint(t, a.results, a.tests, lines.get(t, ''))}")
    else:
        w("None.")
    w("")
    w(f"## Expected failures that failed ({len(expected_failed)})\n")
    for t in expected_failed:
        w(f"- `{t}`: {expected[t]}")
    if not expected_failed:
        w("None.")
    w("")
    if expected_passed or expected_notrun:
        w("## Expected failures that did not fail\n")
        for t in expected_passed:
            w(f"- `{t}` passed: remove it from expected-failures ({expected[t]})")
        for t in expected_notrun:
            w(f"- `{t}` not run ({expected[t]})")
        w("")
    w(f"## Not run ({len(notrun)}), by reason\n")
    w("| tests | reason | examples |\n|---:|---|---|")
    for reason, tests in notrun_reasons(a.results, notrun):
        ex = " ".join(tests[:4]) + (" …" if len(tests) > 4 else "")
        w(f"| {len(tests)} | {reason.replace('|', '/')} | {ex} |")
    w("")
    w("## Terrace activity during the run\n")
    w("Sums of the TEST pool's `terrace status` counters, saved at each of its unmounts (the SCRATCH pool is not counted):\n")
    for k, v in activity(a.status_log).items():
        w(f"- {k}: {human(v) if 'bytes' in k else v}")
    w("")
    w("## Final fsck of the pools\n")
    w("```")
    w(fsck.strip() or "(none)")
    w("```\n")
    if times:
        w("## Slowest tests\n")
        w(", ".join(f"`{t}` {s} s" for s, t in times[:10]))
        w("")
    w("## All results\n")
    w("<details><summary>passed</summary>\n\n" + " ".join(passed) + "\n\n</details>\n")
    w("<details><summary>failed</summary>\n\n" + " ".join(failed) + "\n\n</details>\n")
    w("<details><summary>not run</summary>\n\n" + " ".join(notrun) + "\n\n</details>")

    with open(a.out, "w") as f:
        f.write("\n".join(o) + "\n")

    print(f"xfstests ({a.config}): {len(passed)} passed, {len(failed)} failed "
          f"({len(unexpected)} unexpected), {len(notrun)} not run", file=sys.stderr)
    if unexpected:
        print("unexpected failures: " + " ".join(unexpected), file=sys.stderr)
    if fsck_bad:
        print("terrace fsck found problems in: " + " ".join(fsck_bad), file=sys.stderr)
    return 1 if unexpected or fsck_bad else 0


if __name__ == "__main__":
    sys.exit(main())
