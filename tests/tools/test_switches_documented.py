#!/usr/bin/env python3
"""docs/switches.md lists every DELTABIT_* environment variable the engine, its tests and tools read, and
nothing else: a switch added without a line there, or a line left behind when its switch went, fails here.

A variable counts as read where its name is a string literal in C++ source (how core/env_switch.h and
std::getenv take them); macros such as DELTABIT_HAVE_CUDA are never quoted, so they are not switches."""
import os
import re
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SOURCE_DIRS = ("src", "tests", "tools", "bench")
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
# Names quoted in source that are not switches of the engine: the env_switch unit test's own variable.
NOT_SWITCHES = {"DELTABIT_TEST_ENV_SWITCH"}
LITERAL = re.compile(r'"(DELTABIT_[A-Z0-9_]+)"')
DOCUMENTED = re.compile(r"`(DELTABIT_[A-Z0-9_]+)")


def switches_read():
    """Name -> the first file that reads it."""
    found = {}
    for top in SOURCE_DIRS:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for switch in LITERAL.findall(f.read()):
                        found.setdefault(switch, os.path.relpath(path, ROOT))
    for name in NOT_SWITCHES:
        found.pop(name, None)
    return found


def switches_documented():
    with open(os.path.join(ROOT, "docs", "switches.md"), encoding="utf-8") as f:
        return set(DOCUMENTED.findall(f.read()))


class SwitchesDocumented(unittest.TestCase):
    def test_the_scan_finds_the_known_switches(self):
        # Guards the scan itself: if these two were not found, an empty scan would pass everything.
        read = switches_read()
        self.assertIn("DELTABIT_PROGRAMMATIC_LAUNCH", read)
        self.assertIn("DELTABIT_CPU_REFERENCE", read)

    def test_every_switch_read_is_documented(self):
        documented = switches_documented()
        missing = {name: path for name, path in switches_read().items() if name not in documented}
        self.assertEqual(missing, {}, "read in the code but not listed in docs/switches.md (name: where it is read)")

    def test_every_documented_switch_is_read(self):
        stale = sorted(switches_documented() - set(switches_read()))
        self.assertEqual(stale, [], "listed in docs/switches.md but read nowhere in src/, tests/, tools/, bench/")


if __name__ == "__main__":
    unittest.main()
