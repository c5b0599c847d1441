"""Implementations as an axis (issue 21): the registry lists what can run here and what is
absent, `--npuperf-impl all` makes one case per implementation, a best-of keeps the fastest
that passes verification, a compile failure falls back to eager, and the row, the run JSON
and the history say which implementation a value is."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.test_operators  # (see below)

from pytest_npuperf.db.table import read_table
from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.history.baseline import judge_samples
from pytest_npuperf.history.records import KIND_KERNEL, CaseRecord
from pytest_npuperf.kernels import implementation_options, vendors
from pytest_npuperf.kernels.implementation import Implementation, Unsupported
from pytest_npuperf.kernels.implementation_options import options
from pytest_npuperf.kernels.spec import implemented
from pytest_npuperf.measure.policy import SamplingPolicy
from pytest_npuperf.measure.result import STATUS_OK, STATUS_SKIPPED
from pytest_npuperf.replay.cases import CaseRef
from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions
from tests.kernel_rows import prepare
from tests.replay_project import BENCH, FAST, cells, run_json, write_db

# torch's own compile stack, imported by it, still defines jit script methods.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")

# In-process pytester runs drop the modules first imported inside them, and torch.compile's
# stack registers operator namespaces once per process: it is imported here, at collection.
torch.compile(lambda x: x + 1, backend="aot_eager")(torch.zeros(1))

POLICY = SamplingPolicy(warmup=1, min_samples=3, max_samples=5, budget_s=0.05, min_time_s=0,
                        reject_preempted=False)  # the host's load is not under test
SWIGLU = cells("4,64", "DT_BF16", "ND", "4,32", "DT_BF16")
RMSNORM = cells("4,256;256", "DT_BF16;DT_BF16", "ND;ND", "4,256;4,1", "DT_BF16;DT_FLOAT",
                "ND;ND")
MATMUL = cells("16,64;32,64", "DT_FLOAT;DT_FLOAT", "ND;ND", "16,32", "DT_FLOAT")


@pytest.fixture
def quick_compile(monkeypatch):
    """torch.compile through a backend that traces but generates no code: the mechanism is
    under test here (inductor itself: test_inductor_fuses_...), in milliseconds."""
    monkeypatch.setattr(implementation_options, "COMPILE_BACKEND", "aot_eager")


def with_vendors(monkeypatch, *extra: Implementation) -> None:
    monkeypatch.setattr(vendors, "VENDORS", (*vendors.VENDORS, *extra))


# -- the registry --------------------------------------------------------------------------------
def test_each_device_lists_its_implementations_and_names_the_absent_ones():
    cpu = {o.name: o.absent for o in options("RmsNorm", "norm", "cpu", portable=True)}
    assert list(cpu) == ["eager", "compiled"]  # vendor kernels are CUDA's
    cuda = {o.name: o.absent for o in options("RmsNorm", "norm", "cuda", portable=True)}
    assert list(cuda)[:2] == ["eager", "compiled"] and {"vllm", "liger"} <= set(cuda)
    assert cuda["vllm"].startswith("not installed: vllm (pip install vllm")
    npu = [o.name for o in options("RmsNorm", "norm", "npu", portable=True)]
    assert npu[0] == "npu"  # the real operator first: the NPU's default
    # A GEMM's portable path is the real kernel (cuBLAS, oneDNN): nothing to compile.
    assert [o.name for o in options("MatMulV2", "gemm", "cpu", portable=True)] == ["eager"]


def test_a_library_that_is_not_installed_is_listed_absent_and_never_breaks_collection(
        pytester, monkeypatch, quick_compile):
    missing = Implementation("fastnorm", "a fused norm", ("cpu",), ("SwiGlu",),
                             ("npuperf_no_such_module",), "pip install fastnorm",
                             "no_such_module:build")
    with_vendors(monkeypatch, missing)
    swiglu = {o.name: o.absent for o in options("SwiGlu", "activation", "cpu", portable=True)}
    assert swiglu["fastnorm"] == "not installed: npuperf_no_such_module (pip install fastnorm)"
    db = write_db(pytester.path / "db", {"SwiGlu": [SWIGLU], "MatMulV2": [MATMUL]})
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest_inprocess("--collect-only", "-q", "--npuperf-db", str(db),
                                          "--npuperf-impl", "all", *FAST)
    ids = [line for line in result.outlines if "::test_kernel[" in line]
    assert len(ids) == 3 and all("fastnorm" not in i for i in ids), result.outlines
    assert sum(i.endswith("-compiled]") for i in ids) == 1  # SwiGlu's; a GEMM has none


def test_an_implementation_that_cannot_run_here_is_one_usage_error(pytester):
    db = write_db(pytester.path / "db", {"SwiGlu": [SWIGLU]})
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest_inprocess("--npuperf-db", str(db), "--npuperf-impl", "liger",
                                          *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--npuperf-impl liger: runs on cuda, not cpu*"])
    bad = pytester.runpytest_inprocess("--npuperf-db", str(db), "--npuperf-impl", "fastest",
                                       *FAST)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*npuperf_impl: 'fastest' is not one of auto, best, all, npu, "
                              "eager, compiled*"])


# -- one case per implementation -----------------------------------------------------------------
def test_all_makes_one_case_per_implementation_and_the_row_keeps_the_fastest(
        pytester, quick_compile):
    db = write_db(pytester.path / "db", {"SwiGlu": [SWIGLU], "MatMulV2": [MATMUL]})
    pytester.makepyfile(test_bench=BENCH)
    out = pytester.path / "out"
    result = pytester.runpytest_inprocess("--npuperf-db", str(db), "--npuperf-out", str(out),
                                          "--npuperf-impl", "all", "-v", *FAST)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_kernel?SwiGlu-4x64-BF16-*-eager? PASSED*",
                                 "*test_kernel?SwiGlu-4x64-BF16-*-compiled? PASSED*"])
    cases = {c["case_id"].rsplit("-", 1)[-1] + ":" + c["kernel_type"]: c
             for c in run_json(out)["cases"]}
    eager, compiled = cases["eager:SwiGlu"], cases["compiled:SwiGlu"]
    assert compiled["implementation"].startswith("compiled: torch.compile[aot_eager] of ")
    assert (eager["impl"], compiled["impl"]) == ("eager", "compiled")
    (table_path,) = out.glob("CPU_*/vllm_ascend/*/SwiGlu.csv")
    row = read_table(table_path).iloc[0]
    fastest = min((eager, compiled), key=lambda c: c["value"])
    assert row["MicroBench Implementation"] == fastest["implementation"]
    assert float(row["Average Duration(us)"]) == pytest.approx(fastest["value"], rel=1e-3)
    # -k selects an implementation.
    only = pytester.runpytest_inprocess("--npuperf-db", str(db), "--npuperf-out",
                                        str(pytester.path / "out2"), "--npuperf-impl", "all",
                                        "-k", "compiled", *FAST)
    only.assert_outcomes(passed=1, deselected=2)


# -- best of, verified ---------------------------------------------------------------------------
def _swiglu_reference(inputs):
    gate, up = inputs["x"].float().chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up).to(inputs["x"].dtype)


def wrong_swiglu(spec, inputs, case, backend):
    x = inputs["x"]
    return implemented("a wrong kernel", lambda: x[..., : x.shape[-1] // 2] * 3)


def precomputed_swiglu(spec, inputs, case, backend):
    """Right, and as fast as a kernel can be: its output computed once, before timing."""
    out = _swiglu_reference(inputs)
    return implemented("a precomputed output", lambda: out)


def not_this_row(spec, inputs, case, backend):
    raise Unsupported("rows of 4 tokens")


def _best(monkeypatch, *extra: Implementation, impl: str = "best"):
    with_vendors(monkeypatch, *extra)
    ref = CaseRef("SwiGlu-4x64", "SwiGlu", "SwiGlu.csv", 0, "sig", True)
    runner = CaseRunner(CpuBackend(), RunnerOptions(policy=POLICY, impl=impl))
    return runner.run(ref, SWIGLU, "n", "db/SwiGlu.csv"), runner


def _vendor(name: str, build: str) -> Implementation:
    return Implementation(name, name, ("cpu",), ("SwiGlu",), (), "",
                          f"{__name__}:{build}")


def test_best_keeps_the_fastest_implementation_that_passes_verification(monkeypatch,
                                                                        quick_compile):
    result, runner = _best(monkeypatch, _vendor("wrong", "wrong_swiglu"),
                           _vendor("precomputed", "precomputed_swiglu"),
                           _vendor("picky", "not_this_row"))
    assert result.status == STATUS_OK, result.error
    assert result.impl == "precomputed" and result.implementation == \
        "precomputed: a precomputed output"
    assert result.verified.startswith("verified: 1 output(s) within tolerance")
    assert "wrong left out of the best-of for SwiGlu: output 0" in result.note
    assert "picky: rows of 4 tokens" in result.note
    assert "best of eager " in result.note and ", precomputed " in result.note
    # A failed implementation stays out of the kernel type's later best-ofs.
    assert ("SwiGlu", "wrong") in runner.rejected


def test_a_named_implementation_that_cannot_run_a_row_leaves_it_to_the_default(monkeypatch):
    result, _ = _best(monkeypatch, _vendor("picky", "not_this_row"), impl="picky")
    assert result.status == STATUS_OK and result.impl == "eager"
    assert "picky: rows of 4 tokens" in result.note
    # One case per implementation: that implementation or a skip saying why.
    ref = CaseRef("SwiGlu-4x64-picky", "SwiGlu", "SwiGlu.csv", 0, "sig", True, impl="picky")
    runner = CaseRunner(CpuBackend(), RunnerOptions(policy=POLICY, impl="all"))
    skipped = runner.run(ref, SWIGLU, "n", "db/SwiGlu.csv")
    assert skipped.status == STATUS_SKIPPED and "rows of 4 tokens" in skipped.error


def test_a_compile_failure_falls_back_to_eager_with_a_note(monkeypatch):
    def broken(call):
        def fails():
            raise RuntimeError("InductorError: no C++ compiler\nmore lines")
        return fails
    monkeypatch.setattr("pytest_npuperf.kernels.spec.compile_call", broken)
    case, eager = prepare("SwiGlu", SWIGLU)
    from pytest_npuperf.kernels.registry import spec_for

    fallen = spec_for("SwiGlu").implement(eager, "compiled", case, CpuBackend())
    assert fallen.impl == "eager" and fallen.implementation.startswith("eager: ")
    assert fallen.note == ("torch.compile failed (RuntimeError: InductorError: no C++ "
                           "compiler): eager measured")
    fallen.call()  # the eager call runs


@pytest.mark.slow
def test_inductor_fuses_the_portable_path_before_any_sample(monkeypatch):
    """The real compiler, once (seconds): compiled at preparation, verified like any other
    implementation, and named so in the row."""
    from pytest_npuperf.measure.verify import Verifier

    calls = []
    real = implementation_options.compile_call

    def counted(call):
        compiled = real(call)

        def run():
            calls.append(1)
            return compiled()
        return run
    monkeypatch.setattr("pytest_npuperf.kernels.spec.compile_call", counted)
    case, eager = prepare("RmsNorm", RMSNORM)
    from pytest_npuperf.kernels.registry import spec_for

    spec = spec_for("RmsNorm")
    compiled = spec.implement(eager, "compiled", case, CpuBackend())
    assert compiled.impl == "compiled", compiled.note
    assert calls, "compiled at preparation, before any sample"
    assert compiled.implementation == ("compiled: torch.compile[inductor] of torch: float32 "
                                       "RMS norm times gamma")
    assert Verifier(0, lambda: None).check(spec, case, compiled).startswith("verified: 2 ")


# -- the history compares like with like ---------------------------------------------------------
def _base(impl: str | None) -> CaseRecord:
    extra = {"impl": impl} if impl else {}
    return CaseRecord(kind=KIND_KERNEL, key="k", kernel="SwiGlu", signature="s", status="ok",
                      method="events", samples=[10.0] * 20, median_us=10.0, extra=extra,
                      run_id="r1")


class _One:
    ref = "r1"

    def __init__(self, record):
        self.record = record

    def case(self, kind, key):
        return self.record


@pytest.mark.parametrize(("base", "new", "comparable"), [
    ("eager", "compiled", False), ("compiled", "compiled", True),
    (None, "eager", True),  # recorded before the axis existed: the device's default
    (None, "compiled", False)])
def test_a_baseline_measured_with_another_implementation_judges_nothing(base, new,
                                                                        comparable):
    verdict = judge_samples(KIND_KERNEL, "k", [10.0] * 20, _One(_base(base)), 0.05, impl=new)
    assert (verdict.verdict != "NEW") == comparable, verdict.reason
    if not comparable:
        assert "not comparable" in verdict.reason and new in verdict.reason
