#!/usr/bin/env python3
"""tools/ncu_stalls.py on a hand-made source-view CSV whose answers are known: stall shares over all samples
(the Not Issued columns left out), instructions ranked by samples with their two largest stalls, and a clear
error for a file that is not a source view."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "ncu_stalls.py")

HEADER = ['"Address"', '"Source"', '"Warp Stall Sampling (All Samples)"', '"Instructions Executed"',
          '"stall_long_sb"', '"stall_barrier"', '"stall_short_sb"', '"stall_long_sb (Not Issued)"']


def write_csv(rows):
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    f.write('"Kernel Name","void k<(int)128>(Args)",\n')
    f.write(",".join(HEADER) + "\n")
    for r in rows:
        f.write(",".join(f'"{x}"' for x in r) + "\n")
    f.close()
    return f.name


def run(path, *args):
    return subprocess.run([sys.executable, SCRIPT, path, *args], capture_output=True, text=True)


class NcuStallsTest(unittest.TestCase):
    def test_shares_and_ranking(self):
        path = write_csv([
            ["0x10", "@!P0 BRA 0x7f00", "60", "1,024", "60", "0", "0", "999"],
            ["0x20", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "30", "1024", "0", "25", "5", "999"],
            ["0x30", "IADD3 R1, R2, R3, RZ", "10", "512", "0", "0", "10", "999"],
        ])
        try:
            result = run(path, "--top", "2")
        finally:
            os.unlink(path)
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertIn("100 warp samples over 3 instructions", out)
        shares = dict(line.split() for line in out.splitlines() if line.endswith("%"))
        self.assertEqual(shares, {"long_sb": "60.0%", "barrier": "25.0%", "short_sb": "15.0%"})
        self.assertNotIn("Not Issued", out)
        listed = [line for line in out.splitlines() if line.startswith("  ") and "(" in line and "%" not in line]
        self.assertEqual(len(listed), 2)
        self.assertIn("BRA", listed[0])
        self.assertIn("(long_sb 60)", listed[0])
        self.assertIn("1024", listed[0])  # "1,024" read as a number
        self.assertIn("(barrier 25, short_sb 5)", listed[1])

    def test_not_a_source_view(self):
        f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        f.write('"ID","Kernel Name","Metric Name"\n"0","k","gpu__time_duration.sum"\n')
        f.close()
        try:
            result = run(f.name)
        finally:
            os.unlink(f.name)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no source-view header", result.stderr)


if __name__ == "__main__":
    unittest.main()
