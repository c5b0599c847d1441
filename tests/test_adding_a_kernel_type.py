"""Adding a kernel type is one catalog entry and one replay module (docs/kernels.md): a kernel
type registered the documented way, into a scratch catalog, is collected and replayed, parsed
from a real torch trace, mapped for the simulator and given a shape grid pattern, with no
edit to the shipped catalog, trace mapping or simulator mapping."""

from __future__ import annotations

import pytest
import torch

import tests.added_kernel as added
from pytest_npuperf.db.columns import MICROBENCH_STATUS
from pytest_npuperf.db.op_mapping import MappingContext
from pytest_npuperf.db.table import read_table
from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.grid.config import load_config
from pytest_npuperf.ingest.parse import parse_profiling
from pytest_npuperf.kernels import catalog, registry
from pytest_npuperf.kernels.extensions import register
from pytest_npuperf.kernels.mapping_writer import default_op_mapping
from pytest_npuperf.kernels.torch_ops import TorchOperators
from pytest_npuperf.measure.result import STATUS_OK
from pytest_npuperf.replay.cases import CaseRef
from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions
from tests.kernel_rows import row
from tests.replay_project import BENCH, FAST, VERSION, write_db
from tests.test_kernels_implementation import POLICY

KERNEL = added.KERNEL_TYPE
CELLS = row([((16, 64), added.F32)], [((16, 64), added.F32)])


@pytest.fixture
def added_kernel(monkeypatch):
    """The kernel registered as a package's entry point or a conftest hands it over, into a
    catalog that is gone after the test."""
    monkeypatch.setattr(catalog, "_BY_TYPE", dict(catalog._BY_TYPE))
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))
    assert catalog.entry_for(KERNEL) is None
    register(added.ENTRY)


def test_the_shipped_catalog_does_not_know_it():
    assert catalog.entry_for(KERNEL) is None
    assert not TorchOperators().is_mapped("aten::leaky_relu")
    assert KERNEL not in load_config().assignments


def test_it_replays_from_its_entry(added_kernel):
    ref = CaseRef(f"{KERNEL}-16x64", KERNEL, f"{KERNEL}.csv", 0, "sig", True)
    result = CaseRunner(CpuBackend(), RunnerOptions(policy=POLICY)).run(
        ref, CELLS, "node", f"db/{KERNEL}.csv")
    assert result.status == STATUS_OK, result.error
    assert result.flops == 2 * 16 * 64 and result.stats.samples == POLICY.min_samples


def test_a_traced_call_becomes_a_row_of_it(added_kernel, tmp_path):
    """A real torch.profiler trace of the call, parsed into a database: the row the entry's
    operator and slot conversion make, with the call's time."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(16, 64)
    torch.nn.functional.leaky_relu(x)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            torch.nn.functional.leaky_relu(x)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    db = tmp_path / "db"
    parse_profiling([trace], db, show_progress=False)
    table = read_table(db / f"{KERNEL}.csv")
    assert list(table["Input Shapes"]) == ["16,64"]
    assert list(table["Output Shapes"]) == ["16,64"]
    assert list(table["Input Data Types"]) == ["FLOAT"]  # how traced rows spell it
    assert int(table["Profiling Count"][0]) == 3


def test_the_simulator_maps_its_operator_and_the_grid_has_its_pattern(added_kernel, tmp_path):
    mapping = default_op_mapping(MappingContext(tmp_path, [KERNEL]))
    assert mapping["operator_mappings"]["aten.leaky_relu.default"] == {"kernel_type": KERNEL}
    config = load_config()
    (pattern,) = config.assignments[KERNEL].patterns
    assert config.patterns[pattern].name == KERNEL


@pytest.mark.slow
def test_a_conftest_adds_it_and_a_session_collects_and_replays_it(pytester):
    """The documented hook in a project's conftest.py: the row of its table is collected as a
    case, replayed and written back."""
    pytester.makeconftest("def pytest_npuperf_register_kernels(register):\n"
                          "    from tests.added_kernel import ENTRY\n"
                          "    register(ENTRY)\n")
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {KERNEL: [CELLS]})
    out = pytester.path / "out"
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out", str(out),
                                *FAST)
    result.assert_outcomes(passed=1)
    (copy,) = out.glob(f"CPU_*/vllm_ascend/{VERSION}")
    status = read_table(copy / f"{KERNEL}.csv")[MICROBENCH_STATUS][0]
    assert status.split(" (")[0] == STATUS_OK
