#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction source view.

Reads the CSV of `ncu -i REPORT --page source --csv --print-source sass` (one kernel profiled with
`--set full` or the WarpStateStats and SourceCounters sections) and prints the share of every stall reason
over all warp samples, then the instructions that drew the most samples, each with its two largest stall
reasons and how often it executed — which says, for a warp-specialised kernel, whether the consumers wait
on their data (a long scoreboard stall at the mbarrier-wait branch), on the tensor cores (a barrier stall
at WARPGROUP.DEPBAR) or on shared memory (short scoreboard). docs/bench.md shows the command lines.

    python3 tools/ncu_stalls.py sass.csv [--top 25]
"""
import argparse
import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def read_table(path):
    """The header row (the one naming the source and the stall columns) and the rows after it."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    for i, row in enumerate(rows):
        if "Source" in row and SAMPLES in row:
            return row, [r for r in rows[i + 1:] if len(r) >= len(row)]
    sys.exit(f"{path}: no source-view header (columns 'Source' and '{SAMPLES}') — "
             "was it written by ncu --page source --csv --print-source sass?")


def number(text):
    text = text.replace(",", "").strip()
    return int(float(text)) if text else 0


def summarise(path, top):
    header, rows = read_table(path)
    col = {name: i for i, name in enumerate(header)}
    stalls = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]
    totals = {s: 0 for s in stalls}
    instructions = []
    for r in rows:
        per = {s: number(r[col[s]]) for s in stalls}
        for s, v in per.items():
            totals[s] += v
        executed = number(r[col["Instructions Executed"]]) if "Instructions Executed" in col else 0
        instructions.append((number(r[col[SAMPLES]]), executed, r[col["Source"]].strip(), per))
    all_samples = sum(totals.values())
    if all_samples == 0:
        sys.exit(f"{path}: no stall samples (profile with --set full or --section WarpStateStats)")
    out = [f"{all_samples} warp samples over {len(instructions)} instructions", "", "stall reason share"]
    for s, v in sorted(totals.items(), key=lambda kv: -kv[1]):
        if v > 0:
            out.append(f"  {s[len('stall_'):]:<20} {100.0 * v / all_samples:5.1f}%")
    out += ["", f"top {top} instructions by samples: samples  executed  instruction  (largest stalls)"]
    for samples, executed, source, per in sorted(instructions, key=lambda x: -x[0])[:top]:
        largest = sorted(((v, s) for s, v in per.items() if v > 0), reverse=True)[:2]
        why = ", ".join(f"{s[len('stall_'):]} {v}" for v, s in largest)
        out.append(f"  {samples:7d} {executed:9d}  {source[:72]:<72}  ({why})")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    parser.add_argument("--top", type=int, default=25, help="instructions to list (default 25)")
    args = parser.parse_args()
    print(summarise(args.csv, args.top))


if __name__ == "__main__":
    main()
