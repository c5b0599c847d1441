"""The package as pip installs it: a wheel built from this checkout, installed into a fresh
virtual environment, replays the embedded default database from an empty directory. The
suite, the database and the `npuperf` script must all ship in the wheel; nothing may be read
from the checkout.

The fresh environment reaches its dependencies (torch, pandas, pytest...) in this one's site
directories through a .pth file written after the install, so nothing is downloaded or
reinstalled, and the package imported there is the wheel's copy.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import pytest_npuperf
from pytest_npuperf.db.columns import AVERAGE_DURATION
from pytest_npuperf.harness.options import DEFAULT_DB
from tests.conftest import read_rows, tree_digest
from tests.replay_project import FAST, VERSION

CHECKOUT = Path(pytest_npuperf.__file__).resolve().parents[1]
# What setuptools reads to build the wheel: a copy keeps build/ and *.egg-info out of the checkout.
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "pytest_npuperf")
CASE = "MatMulV3 and 32x7168x128"


def _run(command: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The fresh environment's directory, the wheel installed in it."""
    work = tmp_path_factory.mktemp("installed")
    source = work / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        path = CHECKOUT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                  "--no-index", "-q", "-w", str(work / "dist"), str(source)], work)
    assert built.returncode == 0, built.stderr
    [wheel] = (work / "dist").glob("pytest_npuperf-*.whl")
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    done = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                 "--no-index", "-q", str(wheel)], work)
    assert done.returncode == 0, done.stderr
    # After the install: pip there sees no other copy of the package to replace.
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                             "['purelib'])"], work).stdout.strip())
    ours = [*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"]]
    (purelib / "dependencies.pth").write_text(
        "".join(f"{p}\n" for p in dict.fromkeys(ours) if Path(p).is_dir()))
    return venv


def _shipped(package: Path) -> dict[str, str]:
    return {name: digest for name, digest in tree_digest(package).items()
            if "__pycache__" not in name}


@pytest.mark.slow
def test_the_installed_package_replays_from_an_empty_directory(installed, tmp_path):
    [package] = installed.glob("lib/python*/site-packages/pytest_npuperf")
    # Every file of the package ships (the suite, the embedded database, the grid configs),
    # not only those the package-data patterns foresaw.
    assert _shipped(package) == _shipped(CHECKOUT / "pytest_npuperf")
    packaged_db = package / DEFAULT_DB.relative_to(CHECKOUT / "pytest_npuperf")
    before = tree_digest(packaged_db)
    empty = tmp_path / "empty"
    empty.mkdir()

    result = _run([str(installed / "bin" / "npuperf"), "bench", "-k", CASE, *FAST], empty)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "1 passed" in output, output[-3000:]
    [copy] = (empty / "npuperf-out").glob(f"CPU_*/vllm_ascend/{VERSION}")
    measured = [r for r in read_rows(copy / "MatMulV3.csv") if r[AVERAGE_DURATION]]
    assert [r["Input Shapes"] for r in measured] == ["32,7168;128,7168"]
    assert float(measured[0][AVERAGE_DURATION]) > 0
    [run] = (empty / "npuperf-out" / "reports").glob("run_*.json")
    database = json.loads(run.read_text())["database"]  # the wheel's copy, not the checkout's
    assert database == {"source": str(packaged_db.resolve()), "target": str(copy),
                        "native": False, "dry_run": False}
    assert (empty / "npuperf-out" / "history.sqlite").is_file()
    assert tree_digest(packaged_db) == before  # package data: never written
