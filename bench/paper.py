"""The paper experiments' part of the report (imported by bench/report.py).

Reads OUT/raw/<system>__<job>__r<rep>.json (+ .dev.json device counters), and
writes OUT/results.csv, the Markdown tables of report.md and the PNG figures.
Every number comes from the raw files; nothing is typed in.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

RAW_NAME = re.compile(r"^(?P<system>.+?)__(?P<job>.+)__r(?P<rep>\d+)\.json$")
LOCALITY = {"1.04": "90/10", "0.88": "80/20", "0.71": "70/30", "0.44": "60/40", "0": "50/50"}

FIGURES = [
    # (figure id, title, job prefix / predicate, unit)
    ("zipf-read", "fio 4 KiB random read, Zipf locality (paper Fig. 4a/b)", "IOPS"),
    ("zipf-write", "fio 4 KiB synchronous random write, Zipf locality (paper Fig. 4c/d)", "IOPS"),
    ("filebench", "File server, web proxy, mail server (paper Fig. 6, Table 4)", "ops/s"),
    ("sqlite", "SQLite transactions by journal mode (paper Fig. 8)", "tx/s"),
    ("rocksdb", "RocksDB db_bench, synchronous WAL (paper Fig. 7)", "ops/s"),
]
BASELINES = ("ext4-loop", "ext4-dj", "xfs-ml")


def figure_of(job: str) -> str | None:
    if job.startswith("zipf-read-"):
        return "zipf-read"
    if job.startswith("zipf-write-"):
        return "zipf-write"
    if job in ("fileserver", "webproxy", "varmail"):
        return "filebench"
    if job.startswith("sqlite-"):
        return "sqlite"
    if job.startswith("rocksdb-"):
        return "rocksdb"
    return None


def job_label(job: str) -> str:
    for prefix in ("zipf-read-", "zipf-write-"):
        if job.startswith(prefix):
            t = job[len(prefix):]
            return f"{LOCALITY.get(t, t)} (θ={t})"
    if job.startswith("sqlite-"):
        return job[len("sqlite-"):].upper()
    if job.startswith("rocksdb-"):
        return job[len("rocksdb-"):]
    return job


def job_order(job: str) -> tuple:
    if job.startswith("zipf-"):
        t = job.rsplit("-", 1)[1]
        return (0, 0 if job.startswith("zipf-read-") else 1, -float(t))
    order = ["fileserver", "webproxy", "varmail", "sqlite-delete", "sqlite-persist", "sqlite-wal",
             "rocksdb-fillseq", "rocksdb-fillrandom", "rocksdb-readseq"]
    return (1, order.index(job) if job in order else 99, job)


def system_label(system: str) -> str:
    base, _, setting = system.partition("@")
    m = re.fullmatch(r"terrace-pm(\d+)", base)
    if m:
        label = f"Terrace-{m[1]}%"
    elif (m := re.fullmatch(r"mergerfs-pm(\d+)", base)):
        label = f"mergerfs ({m[1]}% PM)"
    else:
        label = {"ext4-loop": "ext4 (disk)", "ext4-dj": "EXT4-DJ", "xfs-ml": "XFS-ML", "shm": "PM only",
                 "ext4": "ext4 (dir)", "terrace": "Terrace (PM pool)", "fuse": "FUSE ceiling"}.get(base, base)
    return f"{label} [{setting.replace('@', ', ')}]" if setting else label


def system_order(system: str) -> tuple:
    base = system.partition("@")[0]
    fixed = ["ext4-loop", "ext4-dj", "xfs-ml", "mergerfs", "terrace", "shm"]
    m = re.search(r"(\d+)$", base)
    kind = re.sub(r"-pm\d+$", "", base)
    return (fixed.index(kind) if kind in fixed else 9, int(m[1]) if m else 0, system)


def extract(job: str, raw: dict) -> tuple[float | None, int | None, dict]:
    """(throughput, operations done, extras) of one raw paper result."""
    if job.startswith("zipf-"):
        jobs = raw.get("jobs") or []
        if not jobs or jobs[0].get("error"):
            return None, None, {}
        side = "read" if job.startswith("zipf-read-") else "write"
        iops = sum(j[side]["iops"] for j in jobs)
        ios = sum(j[side].get("total_ios", 0) for j in jobs)
        try:
            p99 = jobs[0][side]["clat_ns"]["percentile"]["99.000000"] / 1000
        except (KeyError, TypeError):
            p99 = None
        return iops, ios, {"p99_us": p99}
    if job in ("fileserver", "webproxy", "varmail"):
        return raw.get("ops_per_s"), raw.get("total_ops"), {"read_mb_per_s": raw.get("read_mb_per_s"),
                                                             "write_mb_per_s": raw.get("write_mb_per_s")}
    if job.startswith("sqlite-"):
        return raw.get("tx_per_s"), raw.get("transactions"), {
            k: raw.get(k) for k in ("insert_tx_per_s", "update_tx_per_s", "delete_tx_per_s")}
    if job.startswith("rocksdb-"):
        return raw.get("ops_per_s"), raw.get("num"), {"mb_per_s": raw.get("mb_per_s")}
    return None, None, {}


@dataclass
class Cell:
    values: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    dev: list = field(default_factory=list)
    extras: list = field(default_factory=list)

    @property
    def median(self):
        return statistics.median(self.values) if self.values else None

    def dev_median(self, role: str, key: str):
        vals = [d["devices"][role][key] for d in self.dev
                if role in d.get("devices", {}) and isinstance(d["devices"][role].get(key), (int, float))]
        return statistics.median(vals) if vals else None

    def tier_median(self, kind: str, key: str):
        vals = []
        for d in self.dev:
            for name, t in ((d.get("terrace") or {}).get("tiers") or {}).items():
                if name.startswith(kind) and isinstance(t.get(key), (int, float)):
                    vals.append(t[key])
        return statistics.median(vals) if vals else None

    def per_op(self, role: str):
        """Bytes written to the device per operation (median over runs)."""
        vals = []
        for d, n in zip(self.dev, self.ops):
            w = (d.get("devices", {}).get(role) or {}).get("write_bytes")
            if isinstance(w, (int, float)) and n:
                vals.append(w / n)
        return statistics.median(vals) if vals else None


def load(out: Path) -> dict:
    """cells[job][system] = Cell (paper jobs only)."""
    cells: dict = {}
    for f in sorted((out / "raw").glob("*.json")):
        m = RAW_NAME.match(f.name)
        if not m or figure_of(m["job"]) is None:
            continue
        try:
            raw = json.loads(f.read_text())
        except ValueError:
            continue
        value, ops, extras = extract(m["job"], raw)
        if value is None:
            continue
        cell = cells.setdefault(m["job"], {}).setdefault(m["system"], Cell())
        cell.values.append(value)
        cell.ops.append(ops)
        cell.extras.append(extras)
        dev_path = f.with_name(f.name[:-len(".json")] + ".dev.json")
        try:
            cell.dev.append(json.loads(dev_path.read_text()))
        except (OSError, ValueError):
            cell.dev.append({})
    return cells


def fmt(v, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if unit == "MB/s":
        return f"{v:,.0f}"
    if abs(v) >= 100_000:
        return f"{v / 1000:,.0f}k"
    if abs(v) >= 10_000:
        return f"{v / 1000:,.1f}k"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.1f}"


def fmt_cell(cell: Cell | None, unit: str) -> str:
    if not cell or not cell.values:
        return "n/a"
    if len(cell.values) == 1:
        return fmt(cell.median, unit)
    return f"{fmt(cell.median, unit)} ({fmt(min(cell.values), unit)}–{fmt(max(cell.values), unit)})"


def mib(v) -> str:
    return "n/a" if v is None else f"{v / (1 << 20):,.1f}"


def kib(v) -> str:
    return "n/a" if v is None else f"{v / 1024:,.1f}"


def value_key(v: str) -> tuple:
    """Sort key of a setting's value: sizes and numbers by magnitude, others by name."""
    m = re.fullmatch(r"([\d.]+)\s*([KkMmGgTt]?)", v)
    if not m:
        return (1, 0.0, v)
    return (0, float(m[1]) * 1024 ** " kmgt".index(m[2].lower() or " "), v)


def sweep_groups(sweeps: list[str]) -> dict:
    """{(base system, key): [(value, system spec), ...]} with values in increasing order."""
    by_key: dict = {}
    for s in sweeps:
        base, _, setting = s.partition("@")
        key, _, val = setting.partition("=")
        by_key.setdefault((base, key), []).append((val, s))
    return {k: sorted(v, key=lambda x: value_key(x[0])) for k, v in by_key.items()}


def split_systems(cells: dict) -> tuple[list[str], list[str]]:
    systems = sorted({s for per in cells.values() for s in per}, key=system_order)
    return [s for s in systems if "@" not in s], [s for s in systems if "@" in s]


def write_csv(out: Path, cells: dict) -> None:
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["figure", "job", "system", "setting", "unit", "median", "min", "max", "runs", "values",
                    "disk_write_bytes", "disk_write_requests", "disk_avg_write_request_bytes",
                    "disk_write_bytes_per_op", "journal_write_bytes", "terrace_ssd_tier_write_bytes",
                    "terrace_pm_tier_used_bytes_after"])
        unit = {fid: u for fid, _, u in FIGURES}
        for job in sorted(cells, key=job_order):
            for system in sorted(cells[job], key=system_order):
                c = cells[job][system]
                base, _, setting = system.partition("@")
                w.writerow([figure_of(job), job, base, setting, unit[figure_of(job)], f"{c.median:.2f}",
                            f"{min(c.values):.2f}", f"{max(c.values):.2f}", len(c.values),
                            " ".join(f"{v:.2f}" for v in c.values),
                            *(("" if x is None else f"{x:.0f}") for x in (
                                c.dev_median("disk", "write_bytes"), c.dev_median("disk", "write_requests"),
                                c.dev_median("disk", "avg_write_request_bytes"), c.per_op("disk"),
                                c.dev_median("journal", "write_bytes"), c.tier_median("ssd", "write_bytes"),
                                c.tier_median("pm", "used_after")))])


def markdown(out: Path, cells: dict, figures: list[str]) -> str:
    systems, sweeps = split_systems(cells)
    lines: list[str] = []
    if not cells:
        return ""
    lines += ["## Paper experiments (Ziggurat §6, scaled)", "",
              "Cells: median over the runs, (min–max) when there was more than one run.", ""]
    for fid, title, unit in FIGURES:
        jobs = sorted((j for j in cells if figure_of(j) == fid), key=job_order)
        present = [s for s in systems if any(s in cells[j] for j in jobs)]
        if not jobs or not present:
            continue
        lines += [f"### {title}", "", f"Unit: {unit}." + (f" Plot: `{fid}.png`." if f"{fid}.png" in figures else ""),
                  "", "| system | " + " | ".join(job_label(j) for j in jobs) + " |",
                  "|---|" + "---:|" * len(jobs)]
        for s in present:
            lines.append(f"| {system_label(s)} | " + " | ".join(fmt_cell(cells[j].get(s), unit) for j in jobs) + " |")
        lines.append("")

    # Terrace against the block baselines
    rows = []
    for job in sorted(cells, key=job_order):
        per = cells[job]
        base = {b: per[b].median for b in BASELINES if b in per}
        if not base:
            continue
        best_b = max(base, key=base.get)
        for s in (x for x in systems if x.startswith("terrace-pm") and x in per):
            rows.append(f"| {figure_of(job)}: {job_label(job)} | {system_label(s)} | "
                        f"{per[s].median / base[best_b]:.2f}× | {system_label(best_b)} |"
                        + (f" {per[s].median / per['shm'].median * 100:.0f}% |" if "shm" in per and per["shm"].median
                           else " n/a |"))
    if rows:
        lines += ["### Terrace against the best block-device baseline", "",
                  "Ratio of Terrace's median to the best median among ext4 (disk), EXT4-DJ and XFS-ML for the "
                  "same job (> 1: Terrace is faster), and Terrace as a share of PM only.", "",
                  "| job | Terrace | Terrace / best baseline | best baseline | Terrace / PM only |",
                  "|---|---|---:|---|---:|"] + rows + [""]

    # device-level traffic
    dev_rows = []
    for job in sorted(cells, key=job_order):
        for s in systems:
            c = cells[job].get(s)
            if not c or not any(d.get("devices") for d in c.dev):
                continue
            dev_rows.append(
                f"| {job} | {system_label(s)} | {fmt_cell(c, '')} | {mib(c.dev_median('disk', 'write_bytes'))} | "
                f"{fmt(c.dev_median('disk', 'write_requests'))} | {kib(c.dev_median('disk', 'avg_write_request_bytes'))} | "
                f"{kib(c.per_op('disk'))} | {mib(c.dev_median('journal', 'write_bytes'))} | "
                f"{mib(c.tier_median('ssd', 'write_bytes'))} |")
    if dev_rows:
        lines += ["### Device-level writes (slow device = the disk loop device)", "",
                  "Bytes and requests the file system wrote to its disk loop device during the measurement "
                  "(/sys/block/loopN/stat, after a final sync), the average write request, disk bytes per "
                  "operation of the workload, writes to the /dev/shm journal/log device (EXT4-DJ, XFS-ML), and "
                  "Terrace's own count of bytes written to its SSD tier (`terrace status --json`)."
                  + (" Plot: `device-writes.png`." if "device-writes.png" in figures else ""), "",
                  "| job | system | throughput | disk MiB written | disk write requests | avg request KiB | "
                  "disk KiB / op | journal MiB | Terrace SSD tier MiB |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"] + dev_rows + [""]

    # sweeps
    if sweeps:
        lines += ["### Parameter sweeps (paper §6.7)", "",
                  "Terrace settings changed with `terrace set` after mounting; throughput per job and value."
                  + " Plots: `sweep-<setting>.png`.", ""]
        for (base, key), vals in sweep_groups(sweeps).items():
            jobs = sorted({j for j in cells for _, s in vals if s in cells[j]}, key=job_order)
            lines += [f"`{key}` on {system_label(base)}:", "",
                      "| value | " + " | ".join(job for j in jobs for job in [j]) + " |",
                      "|---|" + "---:|" * len(jobs)]
            for val, s in vals:
                lines.append(f"| {val} | " + " | ".join(fmt_cell(cells[j].get(s), '') for j in jobs) + " |")
            lines.append("")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------


def _bars(ax, groups: list[str], series: list[tuple[str, list]], unit: str) -> None:
    """Grouped bars: one group per x label, one bar per series; median with min/max error bars."""
    n = max(1, len(series))
    width = 0.8 / n
    vals_all = []
    for i, (label, cells) in enumerate(series):
        xs, ys, lo, hi = [], [], [], []
        for g, c in enumerate(cells):
            if c is None or not c.values:
                continue
            med = c.median
            xs.append(g - 0.4 + width * (i + 0.5))
            ys.append(med)
            lo.append(med - min(c.values))
            hi.append(max(c.values) - med)
            vals_all += c.values
        if xs:
            ax.bar(xs, ys, width, label=label, yerr=[lo, hi], capsize=2, error_kw={"elinewidth": 0.8})
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=0 if len(groups) < 6 else 30, ha="center" if len(groups) < 6 else "right")
    ax.set_ylabel(unit)
    positive = [v for v in vals_all if v > 0]
    if positive and max(positive) / min(positive) > 50:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)


def plots(out: Path, cells: dict, reps_note: str) -> list[str]:
    """Write the PNG figures; returns their file names ([] without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    systems, sweeps = split_systems(cells)
    for fid, title, unit in FIGURES:
        jobs = sorted((j for j in cells if figure_of(j) == fid), key=job_order)
        present = [s for s in systems if any(s in cells[j] for j in jobs)]
        if not jobs or not present:
            continue
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(jobs) + 0.35 * len(present)), 4.2))
        _bars(ax, [job_label(j) for j in jobs], [(system_label(s), [cells[j].get(s) for j in jobs]) for s in present],
              unit)
        ax.set_title(f"{title}\n{reps_note}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
        fig.tight_layout()
        fig.savefig(out / f"{fid}.png", dpi=110)
        plt.close(fig)
        written.append(f"{fid}.png")

    # device writes: disk bytes per operation and average request size
    jobs = sorted((j for j in cells if any(any(d.get("devices") for d in c.dev) for c in cells[j].values())),
                  key=job_order)
    present = [s for s in systems if any(s in cells[j] and any(d.get("devices") for d in cells[j][s].dev)
                                         for j in jobs)]
    if jobs and present:
        fig, axes = plt.subplots(2, 1, figsize=(max(7, 0.9 * len(jobs) + 0.3 * len(present)), 7))
        for ax, (key, ylabel) in zip(axes, (("per_op", "disk KiB written per operation"),
                                            ("avg", "average disk write request, KiB"))):
            series = []
            for s in present:
                pseudo = []
                for j in jobs:
                    c = cells[j].get(s)
                    if c is None:
                        pseudo.append(None)
                        continue
                    vals = []
                    for d, n in zip(c.dev, c.ops):
                        dd = (d.get("devices") or {}).get("disk") or {}
                        if key == "per_op" and n and isinstance(dd.get("write_bytes"), (int, float)):
                            vals.append(dd["write_bytes"] / n / 1024)
                        elif key == "avg" and isinstance(dd.get("avg_write_request_bytes"), (int, float)):
                            vals.append(dd["avg_write_request_bytes"] / 1024)
                    pseudo.append(Cell(values=vals) if vals else None)
                series.append((system_label(s), pseudo))
            _bars(ax, jobs, series, ylabel)
        axes[0].set_title(f"Writes to the slow (disk) loop device per workload\n{reps_note}", fontsize=9)
        axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
        fig.tight_layout()
        fig.savefig(out / "device-writes.png", dpi=110)
        plt.close(fig)
        written.append("device-writes.png")

    # sweeps: throughput normalised to the best value of each job
    groups = sweep_groups(sweeps)
    for (base, key), vals in groups.items():
        jobs = sorted({j for j in cells for _, s in vals if s in cells[j]}, key=job_order)
        if not jobs:
            continue
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for j in jobs:
            meds = [cells[j][s].median if s in cells[j] else None for _, s in vals]
            best = max((m for m in meds if m), default=None)
            if not best:
                continue
            xs = [i for i, m in enumerate(meds) if m]
            ys = [meds[i] / best for i in xs]
            lo = [(meds[i] - min(cells[j][vals[i][1]].values)) / best for i in xs]
            hi = [(max(cells[j][vals[i][1]].values) - meds[i]) / best for i in xs]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=2, label=j)
        ax.set_xticks(range(len(vals)))
        ax.set_xticklabels([v for v, _ in vals])
        ax.set_xlabel(key)
        ax.set_ylabel("throughput / best value's throughput")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title(f"Sweep of {key} ({system_label(base)})\n{reps_note}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
        fig.tight_layout()
        name = f"sweep-{key}.png" if sum(k == key for _, k in groups) == 1 else f"sweep-{key}-{base}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(name)
    return written


def micro_plot(out: Path, results: dict, metrics: list, labels: dict, reps_note: str) -> str | None:
    """Bars of the micro jobs (report.py's METRICS), log scale, one bar per target."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [m for m in metrics if results.get(m.key)]
    if not rows:
        return None
    targets = [t for t in labels if any(t in results[m.key] for m in rows)]
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(rows)), 4.2))
    series = []
    for t in targets:
        series.append((labels[t], [Cell(values=results[m.key][t]["values"]) if t in results[m.key] else None
                                   for m in rows]))
    _bars(ax, [m.key for m in rows], series, "IOPS, MB/s or ops/s (see table)")
    ax.set_title(f"Micro jobs (docs/benchmarks.md)\n{reps_note}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(out / "micro.png", dpi=110)
    plt.close(fig)
    return "micro.png"


def probe_table(out: Path) -> str:
    """Markdown table of the raw device probe (fio at the start of the run)."""
    rows = []
    for where, label in (("disk", "loop device over a disk file (direct-io)"),
                         ("shm", "loop device over a /dev/shm file")):
        cells = []
        for job, side, kind in (("randwrite-sync", "write", "iops"), ("randread", "read", "iops"),
                                ("seqwrite", "write", "bw"), ("seqwrite-fresh", "write", "bw")):
            try:
                j = json.loads((out / "probe" / f"{where}__{job}.json").read_text())["jobs"][0][side]
                cells.append(fmt(j["iops"]) if kind == "iops" else f"{j['bw_bytes'] / 1e6:,.0f}")
            except (OSError, ValueError, KeyError, IndexError):
                cells.append("n/a")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    if all("n/a | n/a | n/a | n/a" in r for r in rows):
        return ""
    return "\n".join(["Raw devices (fio, psync, O_DIRECT, one job; 1 MiB writes rewrite a 1 GiB region for "
                       "the probe's run time, or write a fresh preallocated 1 GiB region once and sync it):", "",
                      "| device | 4 KiB write, O_SYNC (IOPS) | 4 KiB random read (IOPS) | 1 MiB write, rewrite (MB/s) "
                      "| 1 MiB write, fresh region + fsync (MB/s) |",
                      "|---|---:|---:|---:|---:|"] + rows) + "\n"
