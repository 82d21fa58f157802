"""The performance targets of the placement and migration issues (imported by bench/report.py).

Reads the raw results of the SYSTEM:GROUP pairs that bench/run.sh measured
(BENCH_PAIRS, workloads in bench/tiering.py and bench/fio/zipf-*.fio) and the
raw device probe, and writes a table of same-run ratios, each with its goal and
whether this run met it, plus `group-size.png` (migration bandwidth against the
group migration size, paper Figure 10). Every number comes from the raw files.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

RAW_NAME = re.compile(r"^(?P<system>.+?)__(?P<job>.+)__r(?P<rep>\d+)\.json$")
JOBS = ("syncappend", "seqbig", "overwrite", "overwrite-hot", "migrate")
PM10 = "terrace-pm10"


@dataclass
class Runs:
    values: list = field(default_factory=list)
    raw: list = field(default_factory=list)
    dev: list = field(default_factory=list)

    @property
    def median(self):
        return statistics.median(self.values) if self.values else None

    def dev_median(self, key: str, role: str = "disk"):
        vals = [d["devices"][role][key] for d in self.dev
                if isinstance(((d.get("devices") or {}).get(role) or {}).get(key), (int, float))]
        return statistics.median(vals) if vals else None

    def per_op(self, key: str = "write_bytes", role: str = "disk"):
        """Median over runs of the device's `key` divided by the run's operations."""
        vals = []
        for d, raw in zip(self.dev, self.raw):
            v = ((d.get("devices") or {}).get(role) or {}).get(key)
            ops = raw.get("total_ops")
            if ops is None and raw.get("jobs"):
                ops = sum(j["write"].get("total_ios", 0) + j["read"].get("total_ios", 0) for j in raw["jobs"])
            if isinstance(v, (int, float)) and ops:
                vals.append(v / ops)
        return statistics.median(vals) if vals else None

    def spread(self) -> str:
        return "" if len(self.values) < 2 else f" ({fmt(min(self.values))}–{fmt(max(self.values))})"


def fmt(v) -> str:
    if v is None:
        return "n/a"
    if abs(v) >= 10_000:
        return f"{v / 1000:,.1f}k"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.2f}"


def value_of(job: str, raw: dict):
    if job.startswith("zipf-"):
        jobs = raw.get("jobs") or []
        side = "read" if job.startswith("zipf-read-") else "write"
        return sum(j[side]["iops"] for j in jobs) if jobs else None
    return raw.get("ops_per_s", raw.get("mb_per_s"))


def load(out: Path) -> dict:
    """runs[(job, system)] = Runs, for the jobs the targets use."""
    runs: dict = {}
    for f in sorted((out / "raw").glob("*.json")):
        m = RAW_NAME.match(f.name)
        if not m or not (m["job"] in JOBS or m["job"].startswith("zipf-")):
            continue
        try:
            raw = json.loads(f.read_text())
        except ValueError:
            continue
        v = value_of(m["job"], raw)
        if v is None:
            continue
        r = runs.setdefault((m["job"], m["system"]), Runs())
        r.values.append(v)
        r.raw.append(raw)
        try:
            r.dev.append(json.loads(f.with_name(f.name[:-5] + ".dev.json").read_text()))
        except (OSError, ValueError):
            r.dev.append({})
    return runs


def probe_seq_write(out: Path, job: str = "seqwrite-fresh"):
    """MB/s of 1 MiB O_DIRECT writes to a loop device over a disk file (the probe):
    `seqwrite-fresh` writes a fresh preallocated region once and syncs (what the
    SSD tier is to migration here), `seqwrite` rewrites a 1 GiB region for the
    probe's run time."""
    try:
        j = json.loads((out / "probe" / f"disk__{job}.json").read_text())["jobs"][0]["write"]
        return j["bw_bytes"] / (1 << 20)
    except (OSError, ValueError, KeyError, IndexError):
        return None


def group_sizes(runs: dict) -> list[tuple[int, str, Runs]]:
    """[(group bytes, label, Runs)] of the migrate job, smallest group first."""
    res = []
    for (job, system), r in runs.items():
        m = re.fullmatch(r"terrace-pm\d+@group_migration_bytes=(\d+)([KMG]?)", system)
        if job == "migrate" and m:
            size = int(m[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[m[2]]
            res.append((size, m[1] + (m[2] or " B"), r))
    return sorted(res, key=lambda x: x[0])


def ratio(a, b):
    return a / b if a is not None and b else None


def verdict(value, goal: float, at_least: bool = True) -> str:
    if value is None:
        return "not measured"
    ok = value >= goal if at_least else value <= goal
    return "met" if ok else "**not met**"


def rows(out: Path, runs: dict) -> list[list[str]]:
    """The target table: [target, measured, ratio, goal, verdict]."""
    get = runs.get
    res = []

    def add(name, detail, value, goal_text, goal, at_least=True, fmt_value=None):
        shown = "n/a" if value is None else (fmt_value(value) if fmt_value else f"{value:.2f}×")
        res.append([name, detail, shown, goal_text, verdict(value, goal, at_least)])

    # Issue 3 (a): synchronous appends.
    t, e = get(("syncappend", PM10)), get(("syncappend", "ext4-loop"))
    add("3a. 4 KiB append + fsync, 1,000 files (ops/s)",
        f"Terrace-10% {fmt(t and t.median)}{t.spread() if t else ''} / ext4 {fmt(e and e.median)}",
        ratio(t and t.median, e and e.median), "≥ 3× ext4", 3.0)
    # Issue 3 (b): large sequential asynchronous writes.
    t, e = get(("seqbig", PM10)), get(("seqbig", "ext4-loop"))
    add("3b. 1 MiB sequential writes of 4× PM, then fsync (MB/s)",
        f"Terrace-10% {fmt(t and t.median)}{t.spread() if t else ''} / ext4 {fmt(e and e.median)}",
        ratio(t and t.median, e and e.median), "≥ 0.8× ext4", 0.8)
    req = t.dev_median("avg_write_request_bytes") if t else None
    add("3b. average write request at the SSD tier (KiB)", "loop device counters, Terrace-10%",
        None if req is None else req / 1024, "≥ 512 KiB", 512, fmt_value=lambda v: f"{v:,.0f} KiB")
    # Issue 3 (c): random asynchronous overwrites become large requests.
    t, e = get(("overwrite", PM10)), get(("overwrite", "ext4-loop"))
    req = t.dev_median("avg_write_request_bytes") if t else None
    ereq = e.dev_median("avg_write_request_bytes") if e else None
    add("3c. random 4 KiB async overwrites of a 4× PM file: write request at the SSD tier (KiB)",
        f"Terrace-10% ({fmt(t and t.median)} ops/s); ext4: {'n/a' if ereq is None else f'{ereq / 1024:,.0f} KiB'}"
        f" ({fmt(e and e.median)} ops/s)",
        None if req is None else req / 1024, "≥ 64 KiB", 64, fmt_value=lambda v: f"{v:,.0f} KiB")
    # Issue 4: group migration bandwidth against the raw device.
    seq = probe_seq_write(out)
    rewrite = probe_seq_write(out, "seqwrite")
    default = [r for size, _, r in group_sizes(runs) if size == 16 << 20]
    mig = default[0].median if default else None
    add("4. group migration (16 MiB groups) bandwidth / raw sequential write to a fresh region (MB/s)",
        f"migration {fmt(mig)} / fio 1 MiB O_DIRECT writes, one synced pass over a fresh preallocated "
        f"region {fmt(seq)} (rewriting a written region: {fmt(rewrite)}, ratio "
        f"{'n/a' if ratio(mig, rewrite) is None else f'{ratio(mig, rewrite):.2f}'})", ratio(mig, seq),
        "≥ 0.8", 0.8)
    # Issue 4: small PM with locality.
    t10, t100 = get(("zipf-write-1.04", PM10)), get(("zipf-write-1.04", "terrace-pm100"))
    add("4. 4 KiB sync random writes, 90/10 locality: PM 10% / PM 100% (IOPS)",
        f"{fmt(t10 and t10.median)}{t10.spread() if t10 else ''} / {fmt(t100 and t100.median)}",
        ratio(t10 and t10.median, t100 and t100.median), "≥ 0.7", 0.7)
    # Issue 4: NVMFS writes less to the SSD than Ziggurat on overwrite-heavy work.
    # Per operation: the runs are timed, so a faster policy does more of them.
    for job, label in (("overwrite", "random 4 KiB async overwrites"),
                       ("overwrite-hot", "random 4 KiB async overwrites of a hot region of ¾ PM size "
                        "(NVMFS Fig. 8, modified IOZONE)"),
                       ("zipf-write-1.04", "90/10 sync random writes")):
        n = get((job, PM10 + "@migration_policy=nvmfs"))
        z = get((job, PM10 + "@migration_policy=ziggurat"))
        d = get((job, PM10))
        nb, zb = (n.per_op() if n else None), (z.per_op() if z else None)
        db = d.per_op() if d else None
        lru = get((job, PM10 + "@migration_policy=nvmfs@nvmfs_flush_order=lru"))
        lb = lru.per_op() if lru else None
        kb = lambda v: "n/a" if v is None else f"{v / 1024:,.1f} KiB/op"  # noqa: E731
        lru_text = "" if lru is None else f", nvmfs with NVMFS's LRU flush order {kb(lb)}"
        add(f"4. SSD bytes written per operation, {label}: nvmfs / ziggurat",
            f"nvmfs {kb(nb)}, ziggurat {kb(zb)}, default {kb(db)}{lru_text}", ratio(nb, zb), "≤ 0.7", 0.7,
            at_least=False)
    return res


def sweep_table(out: Path, runs: dict) -> str:
    sizes = group_sizes(runs)
    if not sizes:
        return ""
    seq = probe_seq_write(out)
    lines = ["Group migration size sweep (`terrace migrate` of data written in 64 KiB writes; paper Fig. 10):", "",
             "| group size | migration MB/s | / raw sequential write (fresh region) | requests at the SSD | average request |",
             "|---|---:|---:|---:|---:|"]
    for _, label, r in sizes:
        req = r.dev_median("avg_write_request_bytes")
        n = r.dev_median("write_requests")
        rr = ratio(r.median, seq)
        lines.append(f"| {label} | {fmt(r.median)}{r.spread()} | {'n/a' if rr is None else f'{rr:.2f}'} | "
                     f"{fmt(n)} | {'n/a' if req is None else f'{req / 1024:,.0f} KiB'} |")
    return "\n".join(lines) + "\n"


def plot(out: Path, runs: dict, reps_note: str) -> str | None:
    sizes = group_sizes(runs)
    if not sizes:
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    xs = list(range(len(sizes)))
    ax.errorbar(xs, [r.median for _, _, r in sizes],
                yerr=[[r.median - min(r.values) for _, _, r in sizes],
                      [max(r.values) - r.median for _, _, r in sizes]],
                marker="o", capsize=3, label="Terrace group migration")
    seq = probe_seq_write(out)
    if seq:
        ax.axhline(seq, color="grey", linestyle="--", label="raw device, 1 MiB O_DIRECT writes (fresh region)")
        ax.axhline(0.8 * seq, color="grey", linestyle=":", label="80% of raw")
    ax.set_xticks(xs)
    ax.set_xticklabels([label for _, label, _ in sizes])
    ax.set_xlabel("group migration size")
    ax.set_ylabel("MB/s written to the SSD tier")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"Migration bandwidth vs group size ({reps_note})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "group-size.png", dpi=110)
    plt.close(fig)
    return "group-size.png"


def markdown(out: Path, runs: dict, machine_line: str, rel: str) -> str:
    """The targets section (report.md and docs/benchmarks.md); "" without target results."""
    table = rows(out, runs)
    if all(r[2] == "n/a" for r in table):
        return ""
    lines = ["## Targets of the placement and migration issues", "", machine_line, "",
             "Each ratio compares systems measured in the same run (median of the runs; min–max in brackets); "
             "Terrace-10% is a pool whose PM tier holds 10% of the data set, with an SSD tier on a loop "
             "device over a disk file (direct I/O), like ext4's. Workloads: `bench/tiering.py`, "
             "`bench/fio/zipf-rand.fio`.", "",
             "| target | measured | value | goal | |", "|---|---|---:|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in table]
    lines.append("")
    sweep = sweep_table(out, runs)
    if sweep:
        lines += [sweep]
    lines.append(f"Raw results: `{rel}raw/`. Reproduce with `bench/run.sh targets` (or `make bench`).")
    return "\n".join(lines) + "\n"
