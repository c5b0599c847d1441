"""What the installed plugin costs a project that does not use it (issue 7, item 5).

In a temporary project with one trivial test, `pytest -q` runs with the plugin (it loads from
its entry point, as in any environment where this package is installed) and with
`-p no:npuperf`, alternating, in fresh processes of the same run; the medians and their
difference are printed. Goal: within 0.3 s. It also says which heavy modules a plugin-loaded
run imported (goal: none of torch, pandas, numpy).

    python benchmarks/bench_import.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import timed

GOAL_S = 0.3
HEAVY = ("torch", "pandas", "numpy")
TRIVIAL_TEST = "def test_one():\n    assert 1 + 1 == 2\n"
# Runs pytest in-process on the project, then names the heavy modules it left imported.
_PROBE = ("import sys, pytest; code = pytest.main(['-q', '-p', 'no:cacheprovider']); "
          f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules]); sys.exit(code)")


def heavy_modules(cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=cwd, capture_output=True,
                          text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("HEAVY ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"probe failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return line.removeprefix("HEAVY ")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11, help="runs of each (default 11)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_import_") as tmp:
        project = Path(tmp)
        (project / "test_unrelated.py").write_text(TRIVIAL_TEST)
        (project / "pytest.ini").write_text("[pytest]\n")  # the rootdir: nothing of ours
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        timed(base, project)  # warm the file cache for both variants
        with_plugin: list[float] = []
        without: list[float] = []
        for _ in range(args.repeat):
            with_plugin.append(timed(base, project))
            without.append(timed([*base, "-p", "no:npuperf"], project))
        loaded = heavy_modules(project)
    ours, bare = statistics.median(with_plugin), statistics.median(without)
    print(f"one-test pytest run, median of {args.repeat}: with the plugin {ours:.3f} s, "
          f"with -p no:npuperf {bare:.3f} s, difference {ours - bare:+.3f} s "
          f"(goal <= {GOAL_S} s)")
    print(f"heavy modules imported by a plugin-loaded run: {loaded} (goal: [])")
    return 0


if __name__ == "__main__":
    sys.exit(main())
