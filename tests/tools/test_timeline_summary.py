#!/usr/bin/env python3
"""tools/timeline_summary.py on hand-made timelines whose answers are known: the exposed times of a step add
up to its span with overlapping kernels, replays are cut where the graph changes and outside graphs, the
first replay is dropped, and kernel names lose their namespaces and casts but keep template arguments."""
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "timeline_summary.py")
spec = importlib.util.spec_from_file_location("timeline_summary", SCRIPT)
summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary)

GEMV = "void (anonymous namespace)::gemv_kernel<(deltabit::DType)5, 16, 2, false>(KernelArgs, long, long)"
EMBED = "(anonymous namespace)::embedding_kernel(const unsigned char*, long)"


def write_timeline(rows):
    f = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
    f.write("start_ns\tend_ns\tgrid_x\tblock_x\tgraph_id\tname\n")
    for start, end, graph, name in rows:
        f.write(f"{start}\t{end}\t320\t128\t{graph}\t{name}\n")
    f.close()
    return f.name


def summarise(rows, *args):
    """The summary's output for a timeline of `rows` (start, end, graph, name), run with `args`."""
    path = write_timeline(rows)
    try:
        return subprocess.run([sys.executable, SCRIPT, path, *args], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(path)


class TimelineSummaryTest(unittest.TestCase):
    def test_kind_keeps_template_arguments_and_grid(self):
        self.assertEqual(summary.kind_of(GEMV, "320"), "gemv_kernel<5, 16, 2, false> g320")
        self.assertEqual(summary.kind_of(EMBED, "20"), "embedding_kernel g20")

    def test_replays_split_on_graph_change_and_drop_the_first(self):
        records = [(0, 1, 7, "a"), (1, 2, 7, "b"), (3, 4, 8, "a"), (5, 6, 0, "eager"), (7, 8, 8, "a"), (9, 10, 7, "a")]
        runs = summary.replays(records)
        self.assertEqual([len(r) for r in runs], [1, 1, 1])  # [7,7] dropped; 8 | eager cut | 8 | 7
        self.assertEqual([r[0][2] for r in runs], [8, 8, 7])

    def test_exposed_times_add_up_to_the_span(self):
        # Each step: a GEMV 0..5000, the embedding overlapping it 4000..7000 (exposed 2000), 2 µs between steps.
        rows, t = [], 0
        for step in range(4):
            graph = 7 if step % 2 == 0 else 8
            rows.append((t, t + 5000, graph, GEMV))
            rows.append((t + 4000, t + 7000, graph, EMBED))
            t += 9000
        out = summarise(rows, "--steps", "5")
        self.assertIn("3 replays: span median 7.0 µs, 2 kernels each", out)
        self.assertIn("summed kernel time 8.0 µs", out)
        self.assertIn("gap between them median 2.0 µs", out)
        lines = {line.split("  ")[-1].strip(): line for line in out.splitlines()[2:]}
        self.assertRegex(lines["gemv_kernel<5, 16, 2, false> g320"], r"1\.0\s+5\.00\s+5\.0\s+71\.4%")
        self.assertRegex(lines["embedding_kernel g320"], r"1\.0\s+3\.00\s+2\.0\s+28\.6%")

    def test_idle_time_before_a_kernel_is_reported_as_part_of_its_exposed_time(self):
        # Each step: a GEMV 0..5000, then nothing until the embedding 8000..9000 (3 µs idle), 2 µs between steps.
        rows, t = [], 0
        for step in range(3):
            rows.append((t, t + 5000, 7, GEMV))
            rows.append((t + 8000, t + 9000, 7, EMBED))
            rows.append((t + 9500, t + 9600, 0, EMBED))  # an eager kernel ends the replay
            t += 11000
        out = summarise(rows)
        self.assertIn("2 replays: span median 9.0 µs", out)
        self.assertIn("GPU idle within the span median 3.0 µs (33.3%)", out)
        lines = {line.split("  ")[-1].strip(): line for line in out.splitlines()[2:]}
        self.assertRegex(lines["embedding_kernel g320"], r"1\.0\s+1\.00\s+4\.0\s+44\.4%\s+3\.0\s+embedding")
        self.assertRegex(lines["gemv_kernel<5, 16, 2, false> g320"], r"5\.0\s+55\.6%\s+0\.0\s+gemv")

    def test_longest_calls_print_no_gap_between_them(self):
        rows = [(0, 1000, 0, EMBED), (500_000, 520_000, 0, EMBED), (1_000_000, 1_100_000, 0, GEMV),
                (1_500_000, 1_510_000, 0, EMBED)]
        out = summarise(rows, "--eager", "--longest", "--steps", "2")
        self.assertIn("2 calls: span median 60.0 µs", out)
        self.assertNotIn("gap between them", out)

    def test_eager_calls_are_cut_at_idle_gaps_outside_graphs(self):
        # Graph kernels are ignored; eager kernels 0..10 and 5..20 overlap (one call), then 300 µs idle.
        records = [(0, 10_000, 0, "a"), (5_000, 20_000, 0, "b"), (21_000, 22_000, 9, "graph"),
                   (320_000, 330_000, 0, "a"), (330_000, 340_000, 0, "b"), (700_000, 701_000, 0, "a")]
        calls = summary.eager_calls(records, 200_000)
        self.assertEqual([[r[3] for r in c] for c in calls], [["a", "b"], ["a"]])  # the first call dropped

    def test_longest_eager_calls(self):
        # Three calls after the dropped first: 20 µs, 100 µs, 10 µs long; --longest --steps 1 takes the 100 µs one.
        rows = [(0, 1000, 0, EMBED), (500_000, 520_000, 0, EMBED), (1_000_000, 1_100_000, 0, GEMV),
                (1_500_000, 1_510_000, 0, EMBED)]
        out = summarise(rows, "--eager", "--longest", "--steps", "1")
        self.assertIn("1 calls: span median 100.0 µs, 1 kernels each", out)
        self.assertIn("gemv_kernel<5, 16, 2, false> g320", out)

    def test_host_calls_in_each_calls_window(self):
        # Calls (after the dropped first) at 1000..1100 µs and 2000..2100 µs; before each, the host spends 400 µs
        # in cudaStreamSynchronize and launches 2 kernels of 5 µs. The window of the call at 2000 runs from the
        # previous call's end (1100) to its own end (2100): 1000 µs, 900 of them before its first kernel, 590 in
        # no runtime call.
        rows = [(0, 1000, 0, EMBED), (1_000_000, 1_100_000, 0, GEMV), (2_000_000, 2_100_000, 0, GEMV)]
        api = []
        for start in (1_000_000, 2_000_000):
            api += [(start - 500_000, start - 100_000, "cudaStreamSynchronize"),
                    (start - 20_000, start - 15_000, "cudaLaunchKernel"), (start - 10_000, start - 5_000, "cudaLaunchKernel")]
        path = write_timeline(rows)
        api_path = path[:-len(".tsv")] + ".api.tsv"
        with open(api_path, "w") as f:
            f.write("start_ns\tend_ns\tthread\tname\n")
            for s, e, name in api:
                f.write(f"{s}\t{e}\t1\t{name}\n")
        try:
            out = subprocess.run([sys.executable, SCRIPT, path, "--eager", "--steps", "1"], capture_output=True,
                                 text=True, check=True).stdout
        finally:
            os.unlink(path)
            os.unlink(api_path)
        self.assertIn("window median 1000.0 µs", out)
        self.assertIn("before its first kernel 900.0 µs", out)
        self.assertIn("in no runtime call 590.0 µs", out)  # 1000 − 400 − 2 × 5
        self.assertIn("longest runtime calls (its first kernel at +900.0 µs): cudaStreamSynchronize 400.0 µs at +400.0", out)
        lines = {line.split("  ")[-1].strip(): line for line in out.splitlines() if line.endswith(("Synchronize", "Kernel"))}
        self.assertRegex(lines["cudaStreamSynchronize"], r"1\.0\s+400\.00\s+400\.0\s+40\.0%")
        self.assertRegex(lines["cudaLaunchKernel"], r"2\.0\s+5\.00\s+10\.0\s+1\.0%")

    def test_events_list_idle_stretches_and_long_runtime_calls_in_time_order(self):
        # Kernels 0..1 ms, 5..6 ms (4 ms idle before), 6.5..7 ms (0.5 ms idle: under 1 ms); a 3 ms
        # cudaStreamSynchronize at 1.5 ms and a 0.2 ms launch (under 1 ms).
        other = "void (anonymous namespace)::other_kernel(int)"
        rows = [(0, 1_000_000, 0, EMBED), (5_000_000, 6_000_000, 0, GEMV), (6_500_000, 7_000_000, 0, other)]
        path = write_timeline(rows)
        api_path = path[:-len(".tsv")] + ".api.tsv"
        with open(api_path, "w") as f:
            f.write("start_ns\tend_ns\tthread\tname\n1500000\t4500000\t1\tcudaStreamSynchronize\n"
                    "4600000\t4800000\t1\tcudaLaunchKernel\n")
        try:
            out = subprocess.run([sys.executable, SCRIPT, path, "--events-ms", "1"], capture_output=True, text=True,
                                 check=True).stdout.splitlines()
            after = subprocess.run([sys.executable, SCRIPT, path, "--events-ms", "1", "--after", "gemv"],
                                   capture_output=True, text=True, check=True).stdout
        finally:
            os.unlink(path)
            os.unlink(api_path)
        self.assertEqual(len(out), 2)
        self.assertRegex(out[0], r"^\s+1\.000 ms  GPU idle\s+4\.00 ms, then gemv_kernel<5, 16, 2, false> g320$")
        self.assertRegex(out[1], r"^\s+1\.500 ms  cudaStreamSynchronize\s+3\.00 ms$")
        self.assertEqual(after, "")  # nothing that long from the GEMV on

    def test_no_host_section_without_runtime_calls(self):
        rows = [(0, 1000, 0, EMBED), (1_000_000, 1_100_000, 0, GEMV)]
        self.assertNotIn("host, per call", summarise(rows, "--eager"))

    def test_refuses_a_file_that_is_not_a_timeline(self):
        f = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
        f.write("a\tb\n1\t2\n")
        f.close()
        try:
            result = subprocess.run([sys.executable, SCRIPT, f.name], capture_output=True, text=True)
        finally:
            os.unlink(f.name)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("not a timeline TSV", result.stderr)


class MissingFileTest(unittest.TestCase):
    def test_a_missing_file_is_an_error_that_says_how_to_make_one(self):
        result = subprocess.run([sys.executable, SCRIPT, "/nonexistent/step.tsv"], capture_output=True, text=True)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("cannot read the timeline", result.stderr)
        self.assertIn("CUDA_INJECTION64_PATH", result.stderr)
        self.assertNotIn("Traceback", result.stderr)


if __name__ == "__main__":
    unittest.main()
