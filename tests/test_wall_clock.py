"""The clock the duty cycle is measured against starts at pytest's start: not at the creation
of a process that ran something else before exec-ing pytest (a shell's install), not later
than the plugin's import."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pytest_npuperf
from pytest_npuperf.measure import clock
from tests.replay_project import BENCH, FAST, MATMUL_ROWS, run_json, write_db

ROOT = Path(__file__).resolve().parents[1]


def test_pytest_start_is_the_import_less_the_cpu_time_used_by_then(monkeypatch):
    monkeypatch.setattr(clock, "IMPORTED_AT", 1000.0)
    monkeypatch.setattr(clock, "CPU_AT_IMPORT", 0.3)
    monkeypatch.setattr(clock, "_process_age_s", lambda: None)
    assert clock.pytest_start() == pytest.approx(999.7)
    # A process created after that (an embedding program's threads used CPU in parallel):
    # its creation.
    monkeypatch.setattr(clock.time, "time", lambda: 1010.0)
    monkeypatch.setattr(clock, "_process_age_s", lambda: 10.1)
    assert clock.pytest_start() == pytest.approx(999.9)
    # A shell that waited 60 s before exec-ing: the estimate, not the process's creation.
    monkeypatch.setattr(clock, "_process_age_s", lambda: 70.0)
    assert clock.pytest_start() == pytest.approx(999.7)


def test_in_this_process_the_start_is_between_its_creation_and_the_import():
    start = clock.pytest_start()
    assert start <= pytest_npuperf.IMPORTED_AT
    age = clock._process_age_s()
    if age is not None:  # Linux; 10 ms ticks
        assert start >= time.time() - age - 0.02


def test_a_later_run_in_the_same_process_starts_at_its_configure(monkeypatch):
    monkeypatch.setattr(clock, "_STARTS", {"claimed": False})
    first, how = clock.run_origin()
    assert (first, how) == (pytest.approx(clock.pytest_start()), clock.FROM_PYTEST_START)
    before = time.time()
    later, how = clock.run_origin()
    assert how == clock.FROM_CONFIGURE and before <= later <= time.time()


# Says, once the run is over, where its clock started, when its process was created (the
# shell's fork), and when it imported the plugin.
CLOCK_CONFTEST = """
import json
import time
from pathlib import Path

import pytest_npuperf
from pytest_npuperf.harness.stash import wall_origin
from pytest_npuperf.measure.clock import _process_age_s


def pytest_unconfigure(config):
    now = time.time()
    origin, how = wall_origin(config)
    Path("clock.json").write_text(json.dumps({
        "origin": origin, "how": how, "created": now - _process_age_s(),
        "imported": pytest_npuperf.IMPORTED_AT, "now": now}))
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None or clock._process_age_s() is None,
                    reason="needs bash and /proc")
def test_a_shell_that_waited_before_exec_ing_pytest_is_not_counted(pytester):
    """`bash -c 'sleep S && exec pytest ...'` is one process from the shell's start: the
    session's wall time, and the duty cycle printed from it, leave the sleep out."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    pytester.makeconftest(CLOCK_CONFTEST)
    db = write_db(pytester.path / "db", {"MatMulV2": MATMUL_ROWS[:1]})
    out = pytester.path / "out"
    pause = 1.0
    command = [sys.executable, "-m", "pytest", "bench", "--npuperf-db", str(db),
               "--npuperf-out", str(out), "--npuperf-model-profile", "off", *FAST]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(["bash", "-c", f"sleep {pause} && exec {shlex.join(command)}"],
                          cwd=pytester.path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    seen = json.loads((pytester.path / "clock.json").read_text())
    assert seen["how"] == clock.FROM_PYTEST_START
    # After the sleep (10 ms ticks), not after the plugin's import.
    assert seen["created"] + pause - 0.02 <= seen["origin"] <= seen["imported"]
    report = run_json(out)
    assert report["session"]["wall_from"] == clock.FROM_PYTEST_START
    assert 0 < report["totals"]["session_wall_s"] <= seen["now"] - seen["origin"]
    assert "wall time since pytest start" in done.stdout
