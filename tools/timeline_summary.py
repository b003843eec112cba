#!/usr/bin/env python3
"""Where a replayed decode step's time goes, from a kernel timeline (tools/cuda_timeline).

Reads the TSV the timeline library writes (start_ns, end_ns, grid_x, block_x, graph_id, name), cuts it into
graph replays (maximal runs of consecutive kernels with one graph_id), drops the first (it may be cut off),
and for the last --steps replays prints: the step's span, its kernels, and per kind of kernel (name + grid)
the count per step, the mean duration as it ran (overlaps included), and the EXPOSED time — how far the
step's end moved while that kernel was the last to finish (the exposed times add up to the span exactly,
so they say what a kernel costs the step, not what it costs alone), and of that the IDLE time — how long the
GPU ran nothing before the kernel started (a launch the host had not yet made: a host-bound stretch). With --eager, the same for the kernels
launched outside graphs (prompt chunks), cut into calls where the GPU idled for --gap-us. Usage and an
example: docs/bench.md, "A kernel timeline of the decode step".

    python3 tools/timeline_summary.py step.tsv [--steps 20]
    python3 tools/timeline_summary.py step.tsv --eager [--gap-us 200] [--longest --steps 3]   # prompt chunks
    python3 tools/timeline_summary.py step.tsv --events-ms 1 [--after gemm_q1_0]   # where the GPU waited

With --eager it also reads the host's CUDA runtime calls the library writes beside the kernels (step.api.tsv)
when that file is there, and prints what the host spent each call's window in — from the previous call's
last kernel to this call's last: time the GPU did not run this call's kernels is found there (a
synchronisation, an allocation, a stretch of launches before the first kernel).
"""
import argparse
import collections
import csv
import re
import signal
import statistics
import sys


def kind_of(name, grid):
    """'void (anonymous namespace)::gemv_kernel<(deltabit::DType)5, 16, 2, false>(Args, long)' -> 'gemv_kernel<5, 16, 2, false> g320'."""
    base = re.sub(r"^void ", "", name).replace("(anonymous namespace)::", "").replace("deltabit::cuda::", "")
    base = re.sub(r"\(([A-Za-z_:]+)\)(?=-?\d)", "", base)  # casts of template arguments: (DType)5 -> 5
    return f"{base.split('(', 1)[0]} g{grid}"


def read(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
    except OSError as e:
        sys.exit(f"{path}: cannot read the timeline ({e.strerror}); write one with tools/cuda_timeline "
                 "(CUDA_INJECTION64_PATH, DELTABIT_TIMELINE_OUT)")
    if not rows or "start_ns" not in rows[0]:
        sys.exit(f"{path}: not a timeline TSV (expected a start_ns column; see tools/cuda_timeline)")
    return [(int(r["start_ns"]), int(r["end_ns"]), int(r["graph_id"]), kind_of(r["name"], r["grid_x"])) for r in rows]


def replays(records):
    runs, current = [], []
    for rec in records:
        if rec[2] == 0:
            if current:
                runs.append(current)
            current = []
            continue
        if current and current[-1][2] != rec[2]:
            runs.append(current)
            current = []
        current.append(rec)
    if current:
        runs.append(current)
    return runs[1:]  # the first may have begun before the kept records


def eager_calls(records, gap_ns):
    """Kernels outside graphs (prompt chunks, eager steps), cut where the GPU idled for gap_ns or more."""
    calls, current, frontier = [], [], None
    for rec in records:
        if rec[2] != 0:
            continue
        if current and rec[0] - frontier >= gap_ns:
            calls.append(current)
            current = []
        frontier = rec[1] if not current else max(frontier, rec[1])
        current.append(rec)
    if current:
        calls.append(current)
    return calls[1:]  # the first may have begun before the kept records


def read_api(path):
    """The runtime calls beside a timeline (start_ns, end_ns, thread, name), or None when there are none."""
    api_file = path[:-len(".tsv")] + ".api.tsv" if path.endswith(".tsv") else path + ".api.tsv"
    try:
        with open(api_file, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
    except OSError:
        return None
    return sorted((int(r["start_ns"]), int(r["end_ns"]), r["name"]) for r in rows)


def host_windows(all_calls, chosen, api):
    """For each chosen call: its window (from the previous call's last kernel — for the first call, from its
    first runtime call at most 1 s before — to its own last kernel), the host time in it before the call's
    first kernel, the time in no runtime call at all (the host computing, or another library), and per
    runtime call name [count, time inside the window]."""
    ends = {c[0][0]: max(r[1] for r in c) for c in all_calls}
    starts = sorted(ends)
    out = []
    for call in chosen:
        first_kernel, end = call[0][0], ends[call[0][0]]
        i = starts.index(first_kernel)
        begin = ends[starts[i - 1]] if i > 0 else None
        lower = begin if begin is not None else first_kernel - 1_000_000_000
        names = collections.defaultdict(lambda: [0, 0])
        longest = []  # (time inside the window, name, start)
        covered, frontier = 0, None
        for s, e, name in api:
            if s >= end:
                break
            lo, hi = max(s, lower), min(e, end)
            if hi <= lo:
                continue
            if begin is None:
                begin = lo
            names[name][0] += 1
            names[name][1] += hi - lo
            longest.append((hi - lo, name, lo))
            frontier = lo if frontier is None else max(frontier, lo)
            covered += max(0, hi - frontier)
            frontier = max(frontier, hi)
        begin = lower if begin is None else begin
        longest = [(t, name, lo - begin) for t, name, lo in sorted(longest, reverse=True)[:5]]
        out.append((end - begin, max(0, first_kernel - begin), end - begin - covered, names, longest))
    return out


def print_host(windows, n):
    window = statistics.median(w[0] for w in windows) / 1e3
    before = statistics.median(w[1] for w in windows) / 1e3
    outside = statistics.median(w[2] for w in windows) / 1e3
    print(f"host, per call: window median {window:.1f} µs (the previous call's last kernel to this call's last), "
          f"of which before its first kernel {before:.1f} µs, in no runtime call {outside:.1f} µs")
    totals = collections.defaultdict(lambda: [0, 0])
    for _, _, _, names, _ in windows:
        for name, (count, t) in names.items():
            totals[name][0] += count
            totals[name][1] += t
    print(f"{'per each':>8} {'mean µs':>8} {'µs a call':>10} {'share':>6}  runtime call")
    for name, (count, t) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        if t / n < 0.005 * window * 1e3:
            continue
        print(f"{count / n:8.1f} {t / count / 1e3:8.2f} {t / n / 1e3:10.1f} {100 * t / n / (window * 1e3):5.1f}%  {name}")
    _, before_last, _, _, longest = windows[-1]
    print(f"the last call's longest runtime calls (its first kernel at +{before_last / 1e3:.1f} µs): " +
          ", ".join(f"{name} {t / 1e3:.1f} µs at +{at / 1e3:.1f}" for t, name, at in longest))


def print_events(records, api, min_ms, after, limit):
    """In time order from the first kernel whose name contains `after`: every stretch of min_ms or more in
    which the GPU ran nothing (and the kernel that ended it), and every runtime call that long."""
    min_ns = min_ms * 1e6
    start = next((r[0] for r in records if after in r[3]), None) if after else (records[0][0] if records else None)
    if start is None:
        sys.exit(f"no kernel named like {after!r} in the timeline")
    events = []
    frontier = None
    for s, e, _, kind in records:
        if frontier is not None and s - frontier >= min_ns and frontier >= start:
            events.append((frontier, f"GPU idle {(s - frontier) / 1e6:8.2f} ms, then {kind}"))
        frontier = e if frontier is None else max(frontier, e)
    for s, e, name in api or []:
        if e - s >= min_ns and s >= start:
            events.append((s, f"{name} {(e - s) / 1e6:8.2f} ms"))
    events.sort()
    origin = records[0][0]
    for t, text in events[:limit]:
        print(f"{(t - origin) / 1e6:12.3f} ms  {text}")
    if len(events) > limit:
        print(f"... {len(events) - limit} more (--steps raises the limit)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("timeline")
    parser.add_argument("--steps", type=int, default=20, help="how many of the last replays (or calls) to analyse")
    parser.add_argument("--eager", action="store_true",
                        help="analyse the kernels launched outside graphs (prompt chunks) instead of the replays")
    parser.add_argument("--gap-us", type=float, default=200.0,
                        help="with --eager: an idle gap this long ends one call (default 200 µs)")
    parser.add_argument("--longest", action="store_true",
                        help="with --eager: the longest calls (a bench's pp512 prompts), not the last ones")
    parser.add_argument("--events-ms", type=float,
                        help="instead: list, in time order, GPU idle stretches and runtime calls this long or longer "
                             "(at most 10 × --steps lines), times from the first kernel kept")
    parser.add_argument("--after", default="",
                        help="with --events-ms: start at the first kernel whose name contains this")
    args = parser.parse_args()
    records = read(args.timeline)
    if args.events_ms is not None:
        print_events(records, read_api(args.timeline), args.events_ms, args.after, 10 * args.steps)
        return
    what = "calls" if args.eager else "replays"
    steps = eager_calls(records, args.gap_us * 1e3) if args.eager else replays(records)
    all_calls = list(steps)
    if args.eager and args.longest:
        steps = sorted(steps, key=lambda c: max(r[1] for r in c) - c[0][0])
    steps = steps[-args.steps:]
    if args.eager and args.longest:
        steps.sort(key=lambda c: c[0][0])  # back in time order; the gaps between them mean nothing
    if not steps:
        sys.exit(f"{args.timeline}: no {'eager calls' if args.eager else 'graph replays'} in the timeline")
    spans, gaps, idles = [], [], []
    per_kind = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])  # launches, duration, exposed, idle (ns)
    previous_end = None
    for step in steps:
        start = min(r[0] for r in step)
        frontier, idle_total = start, 0
        for s, e, _, kind in step:
            exposed = max(0, e - frontier)
            idle = max(0, s - frontier)  # part of `exposed`: nothing ran on the GPU before this kernel began
            frontier = max(frontier, e)
            k = per_kind[kind]
            k[0] += 1
            k[1] += e - s
            k[2] += exposed
            k[3] += idle
            idle_total += idle
        spans.append(frontier - start)
        idles.append(idle_total)
        if previous_end is not None:
            gaps.append(start - previous_end)
        previous_end = frontier
    n = len(steps)
    span_us = statistics.median(spans) / 1e3
    kernels = sum(k[0] for k in per_kind.values()) / n
    busy = sum(k[1] for k in per_kind.values()) / n / 1e3
    idle_us = statistics.median(idles) / 1e3
    in_order = not (args.eager and args.longest)
    print(f"{n} {what}: span median {span_us:.1f} µs, {kernels:.0f} kernels each, "
          f"summed kernel time {busy:.1f} µs ({busy / span_us:.2f}× the span: overlap), "
          f"GPU idle within the span median {idle_us:.1f} µs ({100 * idle_us / span_us:.1f}%)"
          + (f", gap between them median {statistics.median(gaps) / 1e3:.1f} µs" if gaps and in_order else ""))
    print(f"{'per each':>8} {'mean µs':>8} {'exposed µs':>10} {'share':>6} {'idle µs':>8}  kernel")
    total_exposed = sum(k[2] for k in per_kind.values())
    for kind, (count, duration, exposed, idle) in sorted(per_kind.items(), key=lambda kv: -kv[1][2]):
        print(f"{count / n:8.1f} {duration / count / 1e3:8.2f} {exposed / n / 1e3:10.1f} "
              f"{100 * exposed / total_exposed:5.1f}% {idle / n / 1e3:8.1f}  {kind}")
    api = read_api(args.timeline) if args.eager else None
    if api:
        print_host(host_windows(all_calls, steps, api), n)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends the output quietly, as other tools do
    main()
