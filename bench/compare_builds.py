#!/usr/bin/env python3
"""The table of bench/compare_builds.sh: two Terrace builds (base, head) on the
same workloads, run alternately in one session.

    bench/compare_builds.py OUT --rounds N --base LABEL --head LABEL [--docs FILE]

OUT holds one bench/run.sh results directory per build and round
(OUT/base-r1, OUT/head-r1, ...). Every measurement of the micro jobs
(summary.csv) and of the paper workloads and targets (results.csv) is reduced
to the median over the rounds of each build; the ratio head/base is the
result. A ratio is "within noise" when it lies inside the spread the rounds
of either build show for that measurement (at least ±10%, a 3-second quick
run's usual spread on this machine); otherwise the row says faster or slower.
Writes OUT/compare.md and OUT/compare.csv, and with --docs the section between
`<!-- BEGIN bench:compare -->` and `<!-- END bench:compare -->` of FILE.
"""
import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

LOWER_IS_BETTER = {"s", "ms", "us", "µs"}
MIN_NOISE = 0.10


def read_rows(run_dir):
    """{(kind, job, system, setting, unit): value} of one bench/run.sh results dir."""
    rows = {}
    micro = run_dir / "summary.csv"
    if micro.exists():
        with open(micro, newline="") as f:
            for r in csv.DictReader(f):
                if r.get("median"):
                    rows[("micro", r["job"], r["target"], "", r["unit"])] = float(r["median"])
    paper = run_dir / "results.csv"
    if paper.exists():
        with open(paper, newline="") as f:
            for r in csv.DictReader(f):
                if r.get("median"):
                    key = (r["figure"], r["job"], r["system"], r["setting"], r["unit"])
                    rows[key] = float(r["median"])
    return rows


def compare(out, rounds):
    """Rows of (key, base values, head values), for keys both builds measured."""
    runs = {b: [read_rows(out / f"{b}-r{r}") for r in range(1, rounds + 1)] for b in ("base", "head")}
    keys = sorted(set().union(*(set(r) for r in runs["base"])) & set().union(*(set(r) for r in runs["head"])))
    table = []
    for key in keys:
        base = [r[key] for r in runs["base"] if key in r]
        head = [r[key] for r in runs["head"] if key in r]
        table.append((key, base, head))
    return table


def verdict(key, base, head):
    b, h = statistics.median(base), statistics.median(head)
    if b <= 0:
        return None, "no base value"
    ratio = h / b
    spread = max(
        (max(base) - min(base)) / b if len(base) > 1 else 0.0,
        (max(head) - min(head)) / h if len(head) > 1 and h > 0 else 0.0,
    )
    noise = max(MIN_NOISE, spread)
    better = ratio if key[4] not in LOWER_IS_BETTER else (1 / ratio if ratio else float("inf"))
    if abs(better - 1) <= noise:
        return ratio, f"within noise (±{noise:.0%})"
    return ratio, "faster" if better > 1 else "slower"


def fmt(v):
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}"


def markdown(table, rounds, base_label, head_label, machine):
    lines = [
        f"Same-run comparison (`bench/compare_builds.sh`, `make bench-compare`): base {base_label} "
        f"vs head {head_label}, {rounds} alternating round(s) of `bench/run.sh quick` on the Terrace "
        f"systems; medians per build; machine: {machine}.",
        "",
        "| measurement | system | unit | base | head | head/base | |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    counts = {}
    for key, base, head in table:
        ratio, word = verdict(key, base, head)
        kind, job, system, setting, unit = key
        name = job if kind == "micro" else f"{kind}: {job}"
        sysname = system + (f" ({setting})" if setting else "")
        r = f"{ratio:.2f}" if ratio is not None else "–"
        lines.append(f"| {name} | {sysname} | {unit} | {fmt(statistics.median(base))} | "
                     f"{fmt(statistics.median(head))} | {r} | {word} |")
        counts[word.split(" (")[0]] = counts.get(word.split(" (")[0], 0) + 1
    summary = ", ".join(f"{n} {w}" for w, n in sorted(counts.items()))
    lines += ["", f"{len(table)} measurements: {summary}."]
    return "\n".join(lines) + "\n"


def machine_line(out):
    for p in sorted(out.glob("*/machine.json")):
        try:
            m = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        info = m.get("machine", m)
        parts = [f"{info.get('cpu_model', '?')} × {info.get('nproc', '?')}",
                 f"{info.get('memory_gib', '?')} GiB", f"kernel {info.get('kernel', '?')}",
                 str(info.get("distribution", "?")), f"virtualization {info.get('virtualization', '?')}"]
        if parts:
            return ", ".join(parts)
    return "see the machine.json of each run"


def rewrite_section(path, body):
    begin, end = "<!-- BEGIN bench:compare -->", "<!-- END bench:compare -->"
    text = path.read_text()
    block = f"{begin}\n{body}{end}"
    if begin in text and end in text:
        pre, rest = text.split(begin, 1)
        post = rest.split(end, 1)[1]
        text = pre + block + post
    else:
        text = text.rstrip("\n") + "\n\n## Build against build (same run)\n\n" + block + "\n"
    path.write_text(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--base", required=True, help="label of the base build")
    ap.add_argument("--head", required=True, help="label of the head build")
    ap.add_argument("--docs", type=Path, help="Markdown file whose bench:compare section is rewritten")
    a = ap.parse_args()
    table = compare(a.out, a.rounds)
    if not table:
        sys.exit(f"error: no measurement in {a.out} that both builds made (did bench/run.sh fail?)")
    md = markdown(table, a.rounds, a.base, a.head, machine_line(a.out))
    (a.out / "compare.md").write_text(md)
    with open(a.out / "compare.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "job", "system", "setting", "unit", "base_values", "head_values", "ratio", "verdict"])
        for key, base, head in table:
            ratio, word = verdict(key, base, head)
            w.writerow([*key, " ".join(map(str, base)), " ".join(map(str, head)),
                        f"{ratio:.4f}" if ratio is not None else "", word])
    if a.docs:
        rewrite_section(a.docs, md)
    print(md)


if __name__ == "__main__":
    main()
