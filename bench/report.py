#!/usr/bin/env python3
"""Summarise a bench/run.sh run: medians, ratios, targets, machine description.

  report.py machine OUT --mode M --targets "..." --jobs "..." [--setting k=v ...]
      writes OUT/machine.json (machine description, date, settings); run.sh calls
      it before measuring.
  report.py report OUT [--docs docs/benchmarks.md]
      reads OUT/raw/<target>__<job>__r<rep>.json (fio JSON or metadata.py JSON),
      writes OUT/summary.csv, OUT/summary.json and OUT/report.md, and replaces the
      section of the given Markdown file between
      <!-- BEGIN bench:MODE --> and <!-- END bench:MODE --> (appended if absent).

Each number is the median over the repetitions of a job; ratios compare Terrace
with ext4 on disk and with the FUSE passthrough ceiling; the issue's targets are
checked (sync 4 KiB writes >= 5x ext4 and >= 70% of FUSE, 4 KiB random reads
>= 70% of FUSE, metadata >= 50% of FUSE).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paper  # noqa: E402
import targets  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

TARGETS = {
    "terrace": "Terrace",
    "fuse": "FUSE ceiling",
    "shm": "/dev/shm",
    "ext4": "ext4 (disk)",
}
TARGET_DESCRIPTIONS = {
    "terrace": "Terrace mounted through FUSE, PM tier emulated by a file on /dev/shm",
    "fuse": "minimal FUSE passthrough example (target/release/examples/passthrough) over a /dev/shm "
            "directory: the FUSE ceiling",
    "shm": "a directory on /dev/shm (tmpfs, no FUSE)",
    "ext4": "a directory on the virtio disk (/var/tmp, ext4)",
}


@dataclass(frozen=True)
class Metric:
    """How one row of the table is extracted from a raw result."""

    key: str  # row id
    job: str  # raw file job name
    label: str
    unit: str
    kind: str  # "iops", "bw" (fio) or a metadata.py field
    direction: str = ""  # fio direction: read / write


METRICS = [
    Metric("randwrite-fsync-1j", "randwrite-fsync-1j", "4 KiB random write + fsync, 1 job", "IOPS", "iops", "write"),
    Metric("randwrite-fsync-2j", "randwrite-fsync-2j", "4 KiB random write + fsync, 2 jobs", "IOPS", "iops", "write"),
    Metric("randread", "randread", "4 KiB random read", "IOPS", "iops", "read"),
    Metric("seqwrite", "seqwrite", "1 MiB sequential write (incl. final fsync)", "MB/s", "bw", "write"),
    Metric("seqread", "seqread", "1 MiB sequential read", "MB/s", "bw", "read"),
    Metric("metadata", "metadata", "metadata: create + stat + delete", "ops/s", "total_ops"),
    Metric("metadata-create", "metadata", "metadata: create (open+write+close)", "ops/s", "create_ops"),
    Metric("metadata-stat", "metadata", "metadata: stat", "ops/s", "stat_ops"),
    Metric("metadata-delete", "metadata", "metadata: delete", "ops/s", "delete_ops"),
]

# Targets from the issue: (baseline target, minimum ratio Terrace/baseline).
GOALS = {
    "randwrite-fsync-1j": [("ext4", 5.0), ("fuse", 0.7)],
    "randwrite-fsync-2j": [("ext4", 5.0), ("fuse", 0.7)],
    "randread": [("fuse", 0.7)],
    "metadata": [("fuse", 0.5)],
}


# ---------------------------------------------------------------------------
# machine description
# ---------------------------------------------------------------------------


def _sh(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=REPO).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def describe_machine() -> dict:
    """CPU, memory, kernel, distribution, tool versions and the Terrace commit."""
    cpu = ""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and not cpu:
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    distro = ""
    if os.path.exists("/etc/os-release"):
        with open("/etc/os-release") as f:
            m = re.search(r'^PRETTY_NAME="?([^"\n]*)', f.read(), re.M)
            distro = m.group(1) if m else ""
    commit = _sh("git", "rev-parse", "--short", "HEAD")
    # Results files (which the run itself replaces) do not make the code dirty.
    if commit and _sh(
        "git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/results"
    ):
        commit += " (with uncommitted changes)"
    return {
        "hostname": socket.gethostname(),
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": cpu,
        "nproc": os.cpu_count(),
        "cpu_flags_of_interest": sorted(flags & {"clwb", "clflushopt", "avx512f", "sse4_2", "pclmulqdq"}),
        "memory_gib": round(mem_kib / (1 << 20), 1),
        "kernel": platform.release(),
        "distribution": distro,
        "virtualization": _sh("systemd-detect-virt") or "unknown",
        "fio": _sh("fio", "--version"),
        "python": platform.python_version(),
        "terrace_commit": commit or "unknown (no commits yet)",
        "fuse_uring_enabled": _read("/sys/module/fuse/parameters/enable_uring"),
    }


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def cmd_machine(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = dict(s.split("=", 1) for s in args.setting)
    info = {"machine": describe_machine(), "mode": args.mode, "targets": args.targets.split(),
            "jobs": args.jobs.split(), "systems": args.systems.split(), "workloads": args.workloads.split(),
            "settings": settings}
    (out / "machine.json").write_text(json.dumps(info, indent=2) + "\n")
    return 0


# ---------------------------------------------------------------------------
# extraction
# ---------------------------------------------------------------------------


def _pct(d: dict, name: str, pct: str = "99.000000"):
    try:
        return d[name]["percentile"][pct] / 1000.0
    except (KeyError, TypeError):
        return None


def extract(metric: Metric, raw: dict) -> tuple[float | None, dict]:
    """(value, extras) of one raw result for one metric."""
    if metric.kind in ("iops", "bw"):
        jobs = raw.get("jobs") or []
        if not jobs:
            return None, {}
        # group_reporting: one aggregated entry; otherwise sum over jobs.
        side = [j[metric.direction] for j in jobs]
        if metric.kind == "iops":
            value = sum(s["iops"] for s in side)
        else:
            value = sum(s["bw_bytes"] for s in side) / 1e6
        extras = {"p99_us": _pct(side[0], "clat_ns"), "mean_lat_us": side[0].get("lat_ns", {}).get("mean", 0) / 1000}
        sync = jobs[0].get("sync") or {}
        if sync.get("total_ios"):
            extras["fsync_p99_us"] = _pct(sync, "lat_ns")
            extras["fsync_mean_us"] = (sync.get("lat_ns") or {}).get("mean", 0) / 1000
        if jobs[0].get("error"):
            return None, {"error": jobs[0]["error"]}
        return value, extras
    value = raw.get(metric.kind)
    return (float(value) if value is not None else None), {}


def load(out: Path) -> dict:
    """results[metric key][target] = {"values": [...], "median": x, extras}."""
    raw_dir = out / "raw"
    results: dict = {}
    pat = re.compile(r"^(?P<target>.+?)__(?P<job>.+)__r(?P<rep>\d+)\.json$")
    for f in sorted(raw_dir.glob("*.json")):
        m = pat.match(f.name)
        if not m:
            continue
        try:
            raw = json.loads(f.read_text())
        except ValueError:
            continue
        for metric in METRICS:
            if metric.job != m["job"]:
                continue
            value, extras = extract(metric, raw)
            if value is None:
                continue
            slot = results.setdefault(metric.key, {}).setdefault(m["target"], {"values": [], "extras": []})
            slot["values"].append(value)
            slot["extras"].append(extras)
    for per_target in results.values():
        for slot in per_target.values():
            slot["median"] = statistics.median(slot["values"])
            merged = {}
            for k in {k for e in slot["extras"] for k in e}:
                vals = [e[k] for e in slot["extras"] if isinstance(e.get(k), (int, float))]
                if vals:
                    merged[k] = statistics.median(vals)
            slot["extras"] = merged
    return results


# ---------------------------------------------------------------------------
# formatting
# ---------------------------------------------------------------------------


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == "MB/s":
        return f"{v:,.0f}"
    if v >= 100_000:
        return f"{v / 1000:,.0f}k"
    if v >= 10_000:
        return f"{v / 1000:,.1f}k"
    return f"{v:,.0f}"


def ratio(results: dict, key: str, base: str) -> float | None:
    per = results.get(key, {})
    if "terrace" in per and base in per and per[base]["median"]:
        return per["terrace"]["median"] / per[base]["median"]
    return None


def fmt_ratio(r: float | None, as_percent: bool) -> str:
    if r is None:
        return "n/a"
    return f"{r * 100:.0f}%" if as_percent else f"{r:.2f}×"


def goal_status(results: dict, key: str) -> tuple[str, str]:
    goals = GOALS.get(key)
    if not goals:
        return "", ""
    text = ", ".join(f"≥ {f:.0f}× ext4" if b == "ext4" else f"≥ {f * 100:.0f}% FUSE" for b, f in goals)
    ratios = [ratio(results, key, b) for b, _ in goals]
    if any(r is None for r in ratios):
        return text, "n/a"
    met = all(r >= f for r, (_, f) in zip(ratios, goals))
    return text, "met" if met else "**not met**"


def build_markdown(out: Path, info: dict, results: dict, failures: list[str], docs_rel: str) -> str:
    mode = info.get("mode", "?")
    mach = info.get("machine", {})
    s = info.get("settings", {})
    targets = [t for t in TARGETS if t in info.get("targets", TARGETS)]
    reps = s.get("reps", "?")
    lines = [
        f"## Results: {mode} run ({reps} repetition{'s' if reps != '1' else ''} per job"
        f"{', medians' if reps not in ('1', '?') else ''})",
        "",
        f"Measured {mach.get('date_utc', '?')} on `{mach.get('hostname', '?')}`: {mach.get('cpu_model', '?')}, "
        f"{mach.get('nproc', '?')} vCPUs ({mach.get('virtualization', '?')}), {mach.get('memory_gib', '?')} GiB RAM, "
        f"Linux {mach.get('kernel', '?')}, {mach.get('distribution', '?')}; {mach.get('fio', 'fio ?')}; "
        f"Terrace commit {mach.get('terrace_commit', '?')}.",
        "",
        f"Settings: fio psync, {s.get('runtime_s', '?')} s per job after {s.get('ramp_s', '?')} s ramp, "
        f"random-I/O files of {s.get('rand_file_size', '?')}, sequential file of {s.get('seq_file_size', '?')}, "
        f"O_DIRECT reads: {'yes' if s.get('direct') == '1' else 'no'}, metadata job on "
        f"{int(s.get('metadata_files', 0) or 0):,} files; Terrace pool {s.get('terrace_pool', '?')}"
        f"{(', mount options ' + s['terrace_mount_opts']) if s.get('terrace_mount_opts') else ''}.",
        "",
        "| job | unit | " + " | ".join(TARGETS[t] for t in targets)
        + " | Terrace / ext4 | Terrace / FUSE | target | |",
        "|---|---|" + "---:|" * len(targets) + "---:|---:|---|---|",
    ]
    for metric in METRICS:
        per = results.get(metric.key, {})
        if not per:
            continue
        goal, status = goal_status(results, metric.key)
        cells = [fmt_value(per.get(t, {}).get("median"), metric.unit) for t in targets]
        lines.append(f"| {metric.label} | {metric.unit} | " + " | ".join(cells) + " | "
                     + f"{fmt_ratio(ratio(results, metric.key, 'ext4'), False)} | "
                     + f"{fmt_ratio(ratio(results, metric.key, 'fuse'), True)} | {goal} | {status} |")
    lat_rows = []
    for key, label, mean_k, p99_k in (("randwrite-fsync-1j", "write() in write + fsync, 1 job", "mean_lat_us", "p99_us"),
                                      ("randwrite-fsync-1j", "fsync() in write + fsync, 1 job", "fsync_mean_us",
                                       "fsync_p99_us"),
                                      ("randread", "4 KiB random read", "mean_lat_us", "p99_us")):
        per = results.get(key, {})
        if not per:
            continue
        cells = []
        for t in targets:
            e = per.get(t, {}).get("extras", {})
            mean, p99 = e.get(mean_k), e.get(p99_k)
            cells.append("n/a" if mean is None else f"{mean:.1f} / {p99:.1f}" if p99 is not None else f"{mean:.1f}")
        lat_rows.append(f"| {label} | " + " | ".join(cells) + " |")
    if lat_rows:
        lines += ["", "Latency per call, µs (mean / p99):", "",
                  "| call | " + " | ".join(TARGETS[t] for t in targets) + " |",
                  "|---|" + "---:|" * len(targets)] + lat_rows
    lines += ["", "Systems: " + "; ".join(f"**{TARGETS[t]}**: {TARGET_DESCRIPTIONS[t]}" for t in targets) + "."]
    if failures:
        lines += ["", "Failed measurements (not in the table):", ""] + [f"- `{f}`" for f in failures]
    lines += ["", f"Raw fio/metadata JSON, summary.csv and machine.json: `{docs_rel}`. "
              f"Reproduce with `make bench{'-quick' if mode == 'quick' else ''}`."]
    return "\n".join(lines) + "\n"


def update_docs(doc: Path, mode: str, section: str) -> None:
    """Replace (or append) the marked section for this mode in `doc`."""
    begin, end = f"<!-- BEGIN bench:{mode} -->", f"<!-- END bench:{mode} -->"
    block = f"{begin}\n{section}{end}\n"
    if doc.exists():
        text = doc.read_text()
    else:
        text = ("# Terrace benchmarks\n\n"
                "Produced by `make bench` (full) and `make bench-quick` (bench/run.sh, bench/report.py); "
                "the sections between the BEGIN/END markers are rewritten by each run.\n\n")
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)


def cmd_report(args) -> int:
    out = Path(args.out)
    info_path = out / "machine.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {"machine": describe_machine()}
    results = load(out)
    failures = []
    if (out / "failures.txt").exists():
        failures = [ln.strip() for ln in (out / "failures.txt").read_text().splitlines() if ln.strip()]

    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "unit", "target", "median", "runs", "values", "p99_us", "mean_lat_us",
                    "fsync_mean_us", "fsync_p99_us"])
        for metric in METRICS:
            for t, slot in results.get(metric.key, {}).items():
                e = slot["extras"]
                w.writerow([metric.key, metric.unit, t, f"{slot['median']:.2f}", len(slot["values"]),
                            " ".join(f"{v:.2f}" for v in slot["values"]),
                            *(f"{e[k]:.2f}" if k in e else "" for k in
                              ("p99_us", "mean_lat_us", "fsync_mean_us", "fsync_p99_us"))])
    summary = {
        "info": info,
        "results": results,
        "ratios": {m.key: {"terrace_vs_ext4": ratio(results, m.key, "ext4"),
                           "terrace_vs_fuse": ratio(results, m.key, "fuse")} for m in METRICS},
        "goals": {k: goal_status(results, k)[1] for k in GOALS},
        "failures": failures,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    try:
        rel = str(out.resolve().relative_to(REPO)) + "/"
    except ValueError:
        rel = str(out) + "/"
    reps = info.get("settings", {}).get("reps", "?")
    reps_note = (f"median of {reps} runs, error bars min–max" if reps not in ("1", "?")
                 else "1 run (quick mode): no spread")
    has_micro = any(results.get(m.key) for m in METRICS)
    section = build_markdown(out, info, results, failures, rel) if has_micro else ""

    cells = paper.load(out)
    paper.write_csv(out, cells)
    figures = paper.plots(out, cells, reps_note)
    micro_png = paper.micro_plot(out, results, METRICS, TARGETS, reps_note) if has_micro else None
    if micro_png:
        figures.insert(0, micro_png)
    target_runs = targets.load(out)
    target_section = targets.markdown(out, target_runs, machine_line(info), rel)
    if target_section:
        png = targets.plot(out, target_runs, reps_note)
        if png:
            figures.append(png)
    skipped = []
    if (out / "skipped.txt").exists():
        skipped = sorted({ln.strip() for ln in (out / "skipped.txt").read_text().splitlines() if ln.strip()})

    parts = [f"# Terrace benchmark: {info.get('mode', '?')} run\n", machine_line(info) + "\n"]
    probe = paper.probe_table(out)
    if probe:
        parts.append(probe)
    if cells:
        parts.append(paper_settings(info) + "\n")
    if section:
        parts.append(section)
    if cells:
        parts.append(paper.markdown(out, cells, figures))
    if target_section:
        parts.append(target_section)
    if figures:
        parts.append("Figures (" + reps_note + "): " + ", ".join(f"[{f}]({f})" for f in figures) + ".\n")
    if skipped:
        parts.append("Skipped (the harness said why):\n\n" + "\n".join(f"- `{x}`" for x in skipped) + "\n")
    if failures and not section:
        parts.append("Failed measurements (not in the tables):\n\n" + "\n".join(f"- `{x}`" for x in failures) + "\n")
    report = "\n".join(parts)
    (out / "report.md").write_text(report)
    print(report)
    if not matplotlib_available():
        print("note: matplotlib is missing (python3-matplotlib): no PNG plots", file=sys.stderr)
    if args.docs and section:
        update_docs(Path(args.docs), info.get("mode", "quick"), section)
        print(f"updated {args.docs}", file=sys.stderr)
    if args.docs and target_section and info.get("mode") != "quick":
        update_docs(Path(args.docs), "targets", target_section)
        print(f"updated {args.docs} (targets)", file=sys.stderr)
    if args.readme and rel.startswith("docs/results/"):
        update_readme(Path(args.readme), info, rel, figures, reps_note)
        print(f"updated {args.readme}", file=sys.stderr)
    return 0


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def machine_line(info: dict) -> str:
    mach = info.get("machine", {})
    return (f"Measured {mach.get('date_utc', '?')} on `{mach.get('hostname', '?')}`: {mach.get('cpu_model', '?')}, "
            f"{mach.get('nproc', '?')} vCPUs ({mach.get('virtualization', '?')}), {mach.get('memory_gib', '?')} GiB "
            f"RAM, Linux {mach.get('kernel', '?')}, {mach.get('distribution', '?')}; {mach.get('fio', 'fio ?')}; "
            f"Terrace commit {mach.get('terrace_commit', '?')}.")


def paper_settings(info: dict) -> str:
    s = info.get("settings", {})
    systems = info.get("systems", [])
    return (f"Paper workloads: data set {s.get('dataset', '?')} per workload (Terrace-N% and mergerfs (N% PM) "
            f"get N% of it as PM); disk loop devices of {s.get('disk_size', '?')} over files in "
            f"{s.get('disk_dir', '?')} (direct-io on), journal/log loop devices of {s.get('journal_size', '?')} "
            f"over /dev/shm files; {s.get('runtime_s', '?')} s per timed job; fio Zipf jobs: "
            f"{s.get('zipf_jobs', '?')} jobs with a private {s.get('zipf_file_mb', '?')} MiB file each, "
            f"reads O_DIRECT, writes O_SYNC; file-server/web-proxy/mail-server: {s.get('fb_files', '?')} files of "
            f"2 MiB mean, {s.get('fb_workers', '?')} process(es); RocksDB fills: {s.get('kv_ops', '?')} synchronous "
            f"operations; Terrace pools with {s.get('terrace_inodes', '?')} inode slots. "
            f"Systems: {', '.join(paper.system_label(x) for x in systems) or '?'}.")


def update_readme(readme: Path, info: dict, rel: str, figures: list[str], reps_note: str) -> None:
    """Rewrite the 'latest run' section of docs/results/README.md for this mode."""
    mode = info.get("mode", "quick")
    d = rel[len("docs/results/"):].rstrip("/")
    mach = info.get("machine", {})
    body = [f"Latest {mode} run: [{d}]({d}/report.md) — {mach.get('date_utc', '?')}, Terrace commit "
            f"{mach.get('terrace_commit', '?')}, {reps_note}.", ""]
    if figures:
        body.append("Figures: " + ", ".join(f"[{f}]({d}/{f})" for f in figures) + ".")
        body.append("")
    update_docs(readme, f"latest-{mode}", "\n".join(body))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("machine", help="write OUT/machine.json")
    m.add_argument("out")
    m.add_argument("--mode", required=True)
    m.add_argument("--targets", required=True)
    m.add_argument("--jobs", required=True)
    m.add_argument("--systems", default="", help="systems of the paper workloads")
    m.add_argument("--workloads", default="", help="paper workloads")
    m.add_argument("--setting", nargs="*", default=[], help="key=value pairs recorded with the run")
    r = sub.add_parser("report", help="summarise OUT/raw into tables")
    r.add_argument("out")
    r.add_argument("--docs", help="Markdown file whose bench section is rewritten")
    r.add_argument("--readme", help="docs/results/README.md: its latest-run section is rewritten")
    args = ap.parse_args()
    return cmd_machine(args) if args.cmd == "machine" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
