#!/usr/bin/env python3
"""Per-kernel totals from an Nsight Compute CSV (`ncu --csv --metrics ...`), largest first.

Reads the CSV that `ncu --csv` writes to stdout (lines before the header are skipped), groups launches by
kernel name (template arguments and parameters dropped) and prints, per kernel: launches, total and mean
time, share of the summed time, and GB/s when dram__bytes_read.sum was collected. Usage and the ncu
command lines that suit the decode step: docs/bench.md, "Profiling a decode step".

    python3 tools/ncu_kernel_summary.py profile.csv
"""
import collections
import csv
import sys

TIME_METRIC = "gpu__time_duration.sum"
BYTES_METRIC = "dram__bytes_read.sum"
TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def short_name(name):
    """'void (anonymous namespace)::gemv_kernel<5, 8, 2, 0>(Args, long)' -> 'gemv_kernel'."""
    name = name.split("(")[0] if not name.startswith("void (") else name[len("void "):]
    name = name.split("<")[0].split("(")[0]
    return name.rsplit("::", 1)[-1].replace("void ", "").strip()


def read_rows(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header is None:
        sys.exit(f"{path}: no ncu CSV header (a line starting with \"ID\") — was ncu run with --csv?")
    return list(csv.DictReader(lines[header:]))


def value(row, units, path):
    unit = row["Metric Unit"]
    if unit not in units:
        sys.exit(f"{path}: metric {row['Metric Name']} in unknown unit {unit!r}")
    return float(row["Metric Value"].replace(",", "")) * units[unit]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    time_us = collections.defaultdict(float)
    launches = collections.Counter()
    dram = collections.defaultdict(float)
    for row in read_rows(path):
        name = short_name(row["Kernel Name"])
        if row["Metric Name"] == TIME_METRIC:
            time_us[name] += value(row, TIME_UNITS, path)
            launches[name] += 1
        elif row["Metric Name"] == BYTES_METRIC:
            dram[name] += value(row, BYTE_UNITS, path)
    if not time_us:
        sys.exit(f"{path}: no {TIME_METRIC} rows — pass --metrics {TIME_METRIC} to ncu")
    total = sum(time_us.values())
    print(f"{'kernel':44s} {'launches':>8s} {'total us':>10s} {'mean us':>8s} {'share':>6s} {'GB/s':>7s}")
    for name in sorted(time_us, key=lambda k: -time_us[k]):
        gbs = f"{dram[name] / (time_us[name] * 1e3):7.0f}" if dram[name] else ""
        print(f"{name[:44]:44s} {launches[name]:8d} {time_us[name]:10.1f} {time_us[name] / launches[name]:8.2f} "
              f"{100 * time_us[name] / total:5.1f}% {gbs}")
    print(f"{'all':44s} {sum(launches.values()):8d} {total:10.1f}")


if __name__ == "__main__":
    main()
