#!/usr/bin/env python3
"""Runs the Python suites for CTest: exit 77 (CTest's "skipped") when nothing ran because what the
suites need is missing, so that a skip is never counted as a pass; the reasons are printed. With
GSRQ_REQUIRE_HF=1 any skip fails the suite."""
import os
import sys

try:
    import pytest
except ImportError:
    print("skipped: pytest is not installed for", sys.executable)
    sys.exit(77)


class Count:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.passed += 1
        elif report.failed:
            self.failed += 1
        elif report.skipped:
            self.skipped += 1

    def pytest_collectreport(self, report):
        if report.skipped:
            self.skipped += 1


c = Count()
rc = pytest.main(["-rs", "-q", *sys.argv[1:]], plugins=[c])
if os.environ.get("GSRQ_REQUIRE_HF") == "1" and c.skipped:
    # tools/test.sh installs everything these suites need: a skip there is a missing dependency.
    print(f"{c.skipped} skipped with GSRQ_REQUIRE_HF=1 (reasons above): counted as a failure")
    sys.exit(1)
if rc == 0 and c.passed == 0 and c.failed == 0:
    sys.exit(77)
sys.exit(int(rc))
