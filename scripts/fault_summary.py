#!/usr/bin/env python3
"""Totals of a fault-campaign report (JSON lines written by
crates/core/tests/fault_campaign.rs through TERRACE_FAULT_REPORT), as the
Markdown table of docs/reliability.md.

    scripts/fault_summary.py target/faults-report.jsonl
"""

import json
import sys
from collections import defaultdict

ROWS = [
    ("rounds", "rounds (fresh pool each)"),
    ("ops", "operations"),
    ("faults_injected", "faults injected"),
    ("ssd_read_faults", "  SSD reads failed (EIO)"),
    ("ssd_write_faults", "  SSD writes failed (EIO)"),
    ("ssd_sync_faults", "  SSD syncs failed (EIO)"),
    ("ssd_lost_syncs", "  SSD syncs failed losing unsynced writes (Linux errseq)"),
    ("pm_poisoned_reads", "  PM loads poisoned"),
    ("op_errors", "operations that returned an error"),
    ("bytes_lost", "acknowledged bytes lost"),
    ("wrong_bytes", "wrong bytes served (silent corruption)"),
    ("panics", "panics"),
    ("crash_remounts", "crash images checked (fsck --data, mount, compare)"),
    ("clean_remounts", "clean unmount + remounts checked"),
    ("faulty_mounts", "crash images mounted under SSD read faults"),
    ("faulty_mounts_refused", "  of which refused"),
    ("bytes_checked", "bytes compared after remounts"),
    ("scrub_bad", "blocks scrub flagged (failed reads)"),
    ("scrub_repaired", "blocks scrub repaired from a copy"),
    ("pm_poison_served", "poisoned PM reads served without error (known gap)"),
    ("failures", "other failures"),
]


def main() -> None:
    totals: dict = defaultdict(lambda: defaultdict(int))
    errnos: dict = defaultdict(lambda: defaultdict(int))
    by_op: dict = defaultdict(lambda: defaultdict(int))
    seeds: dict = defaultdict(list)
    for line in open(sys.argv[1]):
        line = line.strip()
        if not line:
            continue
        rec = json.loads(line)
        name, c = rec["campaign"], rec["counts"]
        seeds[name].append(c["base_seed"])
        for k, v in c.items():
            if isinstance(v, int) and k != "base_seed":
                totals[name][k] += v
        for k, v in c.get("op_errors_by_errno", {}).items():
            errnos[name][k] += v
        for k, v in c.get("op_errors_by_op", {}).items():
            by_op[name][k] += v
    names = list(totals)
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    print("| base seeds | " + " | ".join(", ".join(map(str, seeds[n])) for n in names) + " |")
    for key, label in ROWS:
        print(f"| {label} | " + " | ".join(f"{totals[n][key]:,}" for n in names) + " |")
    for n in names:
        print(f"\n{n}: errors by errno: " + ", ".join(f"{k} {v:,}" for k, v in sorted(errnos[n].items())))
        print(f"{n}: errors by operation: " + ", ".join(f"{k} {v:,}" for k, v in sorted(by_op[n].items())))


if __name__ == "__main__":
    main()
