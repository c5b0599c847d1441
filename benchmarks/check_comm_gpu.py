"""Collective cases on CUDA (nccl), for a GPU host: what this CPU-only project cannot run here.

1. Smoke: `torchrun --nproc-per-node N -m pytest bench/test_collectives.py` over every op with
   BF16 and FLOAT8_E4M3 (skipped where NCCL has no fp8), 1 KiB .. 64 MiB, N = the GPUs of the
   host (`--nproc`). Checks: exit status 0, every case passed or skipped with a reason, the
   hcom tables written under $OUT (or a temporary directory) with device events as the method.
   With one GPU the groups have one rank (NCCL refuses two ranks on one GPU): it still checks
   nccl's set-up, device buffers, events and the bit-for-bit check on the device.
2. With 2 or more GPUs, a fault: rank 1 is killed in the second case; rank 0 must fail that
   case within --npuperf-comm-timeout (30 s here) and write the first case (checks
   TORCH_NCCL_ASYNC_ERROR_HANDLING=2: an NCCL error must not end rank 0 before it writes).

    python benchmarks/check_comm_gpu.py [--nproc N]

Prints the sessions' summaries and PASS/FAIL per check; exit status 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KILL = '''
import os, signal, pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if os.environ.get("RANK") == "1" and "2KiB" in item.nodeid:
        os.kill(os.getpid(), signal.SIGKILL)
'''


def torchrun(nproc: int, args: list[str], cwd: Path, timeout: float) -> tuple[int, str, float]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(nproc), "-m", "pytest", "-p", "no:cacheprovider", "--npuperf-device", "cuda",
               *args]
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def tables(out: Path) -> dict[str, list[dict[str, str]]]:
    found = {}
    for path in sorted(out.glob("*/hccl/*/hcom_*.csv")):
        with open(path, newline="") as handle:
            found[path.name] = list(csv.DictReader(handle))
    return found


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check here")
        return 0
    nproc = args.nproc or torch.cuda.device_count()
    results = []
    base = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="npuperf-comm-gpu-"))
    smoke = base / "smoke"
    code, text, wall = torchrun(nproc, [str(ROOT / "bench" / "test_collectives.py"),
                                        "--npuperf-comm-sizes", "1K,64K,4M,64M",
                                        "--npuperf-comm-dtypes", "BF16,FLOAT8_E4M3",
                                        "--npuperf-out", str(smoke)], ROOT, 900)
    print(text[-6000:])
    written = tables(smoke)
    methods = {r["method"].split(" around")[0] for rows in written.values() for r in rows}
    results.append(("smoke: exit 0", code == 0))
    results.append(("smoke: 5 tables written", len(written) == 5))
    results.append(("smoke: timed with cuda events", methods == {"cuda events"}))
    results.append(("smoke: every row checked ok", all(
        r["check"].startswith("ok") for rows in written.values() for r in rows)))
    print(f"smoke run: {wall:.1f} s, {sum(map(len, written.values()))} rows")
    if nproc >= 2:
        fault = base / "fault"
        fault.mkdir(parents=True, exist_ok=True)
        (fault / "conftest.py").write_text(KILL)
        (fault / "test_collectives.py").write_text(
            (ROOT / "pytest_npuperf" / "bench" / "test_collectives.py").read_text())
        code, text, wall = torchrun(nproc, ["test_collectives.py", "--npuperf-comm-ops",
                                            "all_reduce", "--npuperf-comm-sizes", "1K,2K,4K",
                                            "--npuperf-comm-timeout", "30",
                                            "--npuperf-out", str(fault / "out")], fault, 300)
        print(text[-4000:])
        rows = tables(fault / "out").get("hcom_allReduce_.csv", [])
        results.append(("fault: the session fails", code != 0))
        results.append(("fault: rank 0 reports the fault", "fault: rank 0" in text))
        results.append(("fault: the first case is written",
                         [r["message_bytes"] for r in rows] == ["1024"]))
        results.append((f"fault: ended in {wall:.0f} s (< 120 s)", wall < 120))
    for name, ok in results:
        print(f"{'PASS' if ok else 'FAIL'} {name}")
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
