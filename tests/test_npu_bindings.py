"""Issue 22: every kernel type's NPU call binds on each supported stack, to operators generated
from the pinned upstream schemas (tests/data/npu_schemas, tests/npu_standin.py), and under
--npuperf-verify compares what each API really returns; `npuperf kernels --check --schemas`
says the same per kernel type."""

from __future__ import annotations

import shutil

import pytest
import torch

from pytest_npuperf.devices.npu import FRACTAL_NZ_FORMAT_ID
from pytest_npuperf.harness.options import DEFAULT_DB
from pytest_npuperf.kernels import catalog
from pytest_npuperf.kernels.registry import spec_for
from pytest_npuperf.kernels.schema import OpSchema
from pytest_npuperf.kernels.schema_sources import read_schema_dir
from pytest_npuperf.measure.verify import Verifier
from pytest_npuperf.replay.bindcheck import smallest_case
from tests.npu_standin import (
    DATA,
    EMBEDDED,
    NEWEST,
    STACKS,
    compute_like_the_api,
    npu_backend,
    only_call,
    schema_dir,
    schema_set,
)

KERNEL_TYPES = [t for e in catalog.entries() if e.replay for t in e.kernel_types]


def _api(npu_api: str) -> tuple[str, str] | None:
    """(namespace, operator) of a catalog entry's NPU API; None for a torch call."""
    name = npu_api.split("(")[0].split()[0]
    for prefix, namespace in (("torch_npu.atb.", "atb"), ("torch.ops._C_ascend.", "_C_ascend"),
                              ("torch.ops.vllm.", "vllm"), ("torch_npu._", "atb"),
                              ("torch_npu.", "npu")):
        if name.startswith(prefix):
            operator = name[len(prefix):]
            return namespace, ("_" + operator if prefix == "torch_npu._" else operator)
    return None


# -- the pinned sources ------------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_the_pinned_sources_say_where_they_come_from_and_hold_every_called_operator(stack):
    sources = (DATA / stack / "SOURCES.md").read_text()
    for repo in ("Ascend/op-plugin", "vllm-project/vllm-ascend", "Ascend/pytorch"):
        assert repo in sources
    found = schema_set(stack)
    for entry in catalog.entries():
        api = _api(entry.npu_api)
        if api is not None:
            assert found.overloads(*api), (stack, entry.npu_api)


def test_the_two_stacks_differ_where_issue_22_found_they_do():
    old, new = (schema_set(s) for s in STACKS)
    dfc = [OpSchema.parse(s.overloads("_C_ascend", "dispatch_ffn_combine")[0].text)
           for s in (old, new)]
    assert "bias1" not in {a.name for a in dfc[0].arguments}
    assert {"bias1", "bias2", "x_active_mask", "swiglu_limit"} <= {a.name for a in dfc[1].arguments}
    old_li = OpSchema.parse(old.overloads("_C_ascend", "npu_lightning_indexer")[0].text)
    assert old_li.returned == 1 and "return_value" not in {a.name for a in old_li.arguments}
    qkv = OpSchema.parse(old.overloads("vllm", "qkv_rmsnorm_rope")[0].text)
    assert [a.name for a in qkv.arguments][:3] == ["input", "cos_sin_cache", "positions"]
    assert qkv.returned == 3 and not qkv.arguments[-1].required  # k_bias: Tensor? = None


def test_cpp_definitions_are_read_as_the_compiler_joins_them(tmp_path):
    for part in ("op-plugin/atb", "vllm-ascend/triton"):
        (tmp_path / part).mkdir(parents=True)
    (tmp_path / "op-plugin" / "op_plugin_functions.yaml").write_text(
        "custom:\n  - func: npu_x(Tensor self) -> Tensor\n    op_api: all_version\n")
    (tmp_path / "op-plugin" / "atb" / "A.cpp").write_text(
        'TORCH_LIBRARY_FRAGMENT(atb, m)\n{\n    m.def("npu_y(Tensor a, '
        '\\\n        int b) -> ()");\n}\n')
    (tmp_path / "vllm-ascend" / "torch_binding.cpp").write_text(
        'TORCH_LIBRARY_EXPAND(CONCAT(_C, _ascend), ops)\n{\n  ops.def(\n    "z(Tensor x, "  // c\n'
        '    "str s=\\"a\\") -> Tensor");\n  ops.impl("z", k, &f);\n}\n')
    shutil.copy(schema_dir(NEWEST) / "vllm-ascend" / "triton" / "split_qkv_rmsnorm_rope.py",
                tmp_path / "vllm-ascend" / "triton")
    found = read_schema_dir(tmp_path)
    assert [(t.namespace, t.text) for t in found.texts][:3] == [
        # a backslash-newline inside a literal is dropped, the next line's indent kept
        ("npu", "npu_x(Tensor self) -> Tensor"), ("atb", "npu_y(Tensor a,         int b) -> ()"),
        ("_C_ascend", 'z(Tensor x, str s="a") -> Tensor')]


# -- binding and returned arity, per stack -----------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_every_npu_call_binds_and_verification_compares_what_the_api_returns(kernel_type,
                                                                          stack):
    """The smallest row of the embedded database, on the stand-in NPU of `stack`: its
    operator returns the portable path's outputs where the real API computes them and an
    empty placeholder where it returns one; --npuperf-verify must find them equal to the
    float64 reference, output by output."""
    spec = spec_for(kernel_type)
    case = smallest_case(spec, kernel_type, DEFAULT_DB)
    assert not isinstance(case, str), case
    calls: list = []
    backend = npu_backend(calls, stack, group="hccl_check")
    prepared = spec.prepare(case, backend)
    api = _api(spec.npu_api)
    if api is not None:
        compute_like_the_api(backend.operators, *api, lambda: spec.results(
            spec.portable_call(prepared.tensors, case)(), prepared.tensors, case))
    verified = Verifier(0, lambda: None).check(spec, case, prepared)
    assert verified.startswith("verified: "), verified
    if api is not None:
        assert any(name.endswith("::" + api[1]) for name, _ in calls), calls


def _variant_rows() -> list[tuple[str, str, dict]]:
    """Rows whose API leaves outputs empty or computes extra ones (the embedded database's
    smallest rows record every output): (id, kernel type, cells)."""
    from tests.kernel_rows import row
    from tests.test_kernels_attention import INDEXER, RING, SPARSE, fia_row
    from tests.test_kernels_kv_cache import KV_DECODE, KV_PREFILL

    f32, i32, i64 = "DT_FLOAT", "DT_INT32", "DT_INT64"
    mask = ((2048, 2048), "DT_INT8")
    no_lse = fia_row({0: ((11, 4, 16), f32), 1: ((11, 2, 16), f32), 2: ((11, 2, 16), f32),
                      4: mask, 5: ((2,), i64), 6: ((2,), i64)}, [((11, 4, 16), f32), None],
                     input_layout="TND", num_heads="4", num_key_value_heads="2",
                     sparse_mode="3", actual_seq_lengths_values="4,11",
                     actual_seq_lengths_kv_values="4,11")
    ring_no_lse = dict(RING, **{"Output Shapes": "8,2,16;", "Output Data Types": f"{f32};"})
    values = row([((6, 4, 16), f32), ((5, 4, 1, 16), f32), ((6, 4), f32), ((2,), i32),
                  ((2,), i32), ((2, 3), i32)], [((6, 1, 8), i32), ((6, 1, 8), f32)],
                 actual_seq_lengths_kv_values="7,10")
    return [("FIA without LSE", "FusedInferAttentionScore", no_lse),
            ("ring MLA without LSE", "RINGMLAPrefillBF16Kernel", ring_no_lse),
            ("indexer with values", "LightningIndexer", values),
            ("indexer without", "LightningIndexer", INDEXER),
            ("SFA with softmax stats", "SparseFlashAttention", SPARSE),
            ("KV cache write with k_rope, c_kv", "KvRmsNormRopeCache", KV_PREFILL),
            ("KV cache write alone", "KvRmsNormRopeCache", KV_DECODE)]


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("what", [r[0] for r in _variant_rows()])
def test_outputs_an_api_leaves_empty_are_never_compared(what, stack):
    """FIA and ring MLA without an LSE output (the NPU's LSE is an empty placeholder), the
    indexer with and without values, SFA with its softmax statistics, the MLA cache write with
    and without its k_rope / c_kv outputs."""
    from pytest_npuperf.kernels.case import case_from_row

    _, kernel_type, cells = next(r for r in _variant_rows() if r[0] == what)
    spec = spec_for(kernel_type)
    case = case_from_row(kernel_type, cells, file=f"db/{kernel_type}.csv", row_number=2)
    backend = npu_backend([], stack)
    prepared = spec.prepare(case, backend)
    compute_like_the_api(backend.operators, *_api(spec.npu_api), lambda: spec.results(
        spec.portable_call(prepared.tensors, case)(), prepared.tensors, case))
    assert Verifier(0, lambda: None).check(spec, case, prepared).startswith("verified: ")


@pytest.mark.parametrize("stack", STACKS)
def test_npu_format_cast_binds_as_the_backend_calls_it(stack):
    calls: list = []
    backend = npu_backend(calls, stack)
    backend.to_format(torch.ones(32, 64, dtype=torch.int8), "FRACTAL_NZ")
    assert only_call(calls, "npu_format_cast")["acl_format"] == FRACTAL_NZ_FORMAT_ID


CALLS = [  # (namespace, operator, args, kwargs) that bind on both stacks
    ("npu", "npu_quantize", (torch.ones(2), torch.ones(2), None, torch.qint8, -1, False), {}),
    ("npu", "npu_rms_norm", (torch.ones(2, 4), torch.ones(4)), {"epsilon": 1e-6}),
    ("npu", "npu_slice", (torch.ones(4, 4), [0, 1], [2, 2]), {}),
]
BROKEN = [  # what each perturbation does to a call that binds
    ("an unknown keyword", lambda a, k: (a, {**k, "bias1": []})),
    ("a missing required argument", lambda a, k: (a[:1], k)),
    ("a keyword-only argument given by position", lambda a, k: ((*a, *k.values()), {})),
    ("a tensor where a list is declared", lambda a, k: ((a[0], a[0], a[0]) + a[3:], k)),
]


@pytest.mark.parametrize("stack", STACKS)
def test_the_binder_agrees_with_torchs_dispatcher(stack):
    operators = npu_backend([], stack).operators
    for namespace, name, args, kwargs in CALLS:
        op = operators.op(namespace, name)
        schema = OpSchema.of(op.default._schema)
        assert schema.problem(args, kwargs) == ""
        op(*args, **kwargs)
        for what, broken in BROKEN:
            b_args, b_kwargs = broken(args, kwargs)
            if not b_kwargs and not kwargs and len(b_args) == len(args):
                continue  # no keyword-only argument to move: the same call
            ours = schema.problem(b_args, b_kwargs)
            try:
                op(*b_args, **b_kwargs)
            except (RuntimeError, TypeError):
                torch_binds = False
            else:
                torch_binds = True
            assert (ours == "") == torch_binds, (name, what, ours)


# -- npuperf kernels --check --------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_check_binds_every_kernel_type_against_each_stacks_sources(npuperf, stack):
    code, out, err = npuperf("kernels", "--check", "--schemas", schema_dir(stack), "--db",
                             DEFAULT_DB)
    assert code == 0, out + err
    lines = out.splitlines()
    assert len(lines) == len(KERNEL_TYPES) + 1
    by_type = {line.split()[0]: line for line in lines[:-1]}
    assert set(by_type) == set(KERNEL_TYPES)
    assert all("  binds: " in line for line in by_type.values())
    variant = "v0.18.0 schema" if stack == EMBEDDED else ">= v0.20.2rc1 schema"
    assert variant in by_type["DispatchFFNCombine"] and "(2 output(s))" in \
        by_type["DispatchFFNCombine"]
    assert lines[-1].startswith(f"{len(KERNEL_TYPES)} of {len(KERNEL_TYPES)} kernel types bind")


def test_check_says_which_call_does_not_bind_and_exits_1(npuperf, tmp_path):
    """A vllm-ascend whose dispatch_ffn_combine takes neither schema (v0.13.0's: no
    expert_token_nums) and whose indexer returns nothing."""
    shutil.copytree(schema_dir(EMBEDDED), tmp_path / "s")
    binding = tmp_path / "s" / "vllm-ascend" / "torch_binding.cpp"
    text = binding.read_text()
    text = text.replace("int max_output_size, Tensor! out, Tensor! expert_token_nums) -> "
                        "(Tensor out, Tensor expert_token_nums)",
                        "int max_output_size, Tensor! out) -> Tensor")
    binding.write_text(text)
    code, out, _ = npuperf("kernels", "--check", "--schemas", tmp_path / "s", "--db", DEFAULT_DB)
    assert code == 1
    (line,) = [x for x in out.splitlines() if x.startswith("DispatchFFNCombine")]
    assert "does not bind: torch.ops._C_ascend.dispatch_ffn_combine does not bind" in line
    assert "no parameter 'expert_token_nums'" in line
    assert out.splitlines()[-1].startswith(f"{len(KERNEL_TYPES) - 1} of {len(KERNEL_TYPES)}")


def test_check_usage_errors_are_one_line(npuperf, tmp_path):
    code, _, err = npuperf("kernels", "--check", "--schemas", tmp_path)
    assert code == 2 and "missing op-plugin/op_plugin_functions.yaml" in err
    code, _, err = npuperf("kernels", "--schemas", tmp_path)
    assert code == 2 and "--schemas goes with --check" in err
    code, _, err = npuperf("kernels", "--check")  # no NPU here
    assert code == 2 and "pass --schemas DIR" in err and len(err.strip().splitlines()) == 1


# -- where the installed schema comes from -----------------------------------------------------
def test_a_python_function_binds_by_its_signature():
    from pytest_npuperf.kernels.binding import BindError, Variant, bound_call

    def npu_interleave_rope(x, cos, sin):
        return x

    x = torch.ones(2)
    assert bound_call(npu_interleave_rope, "torch_npu.npu_interleave_rope",
                      Variant("", (x, x, x)))() is x
    with pytest.raises(BindError, match="required parameter 'sin' is missing"):
        bound_call(npu_interleave_rope, "torch_npu.npu_interleave_rope", Variant("", (x, x)))


def test_a_lazy_wrapper_binds_by_the_operator_it_forwards_to(monkeypatch):
    """torch_npu's ATB functions are `*args, **kwargs` wrappers until their first call
    (op-plugin op_plugin/python/atb/_atb_ops.py): their schema is torch.ops.atb's."""
    from pytest_npuperf.kernels.binding import BindError, Variant, bound_call, installed_schemas

    operators = npu_backend([], EMBEDDED).operators
    real = operators.op("atb", "_npu_reshape_and_cache")

    def _npu_reshape_and_cache(*args, **kwargs):
        return real(*args, **kwargs)

    assert installed_schemas(_npu_reshape_and_cache) is None
    fake_ops = type("Ops", (), {"atb": type("Atb", (), {"_npu_reshape_and_cache": real})})
    monkeypatch.setattr(torch, "ops", fake_ops)
    (schema,) = installed_schemas(_npu_reshape_and_cache, namespace="atb")
    assert schema.returned == 0 and [a.written for a in schema.arguments][2:4] == [True, True]
    with pytest.raises(BindError, match="no parameter 'slot_mapping'"):
        bound_call(_npu_reshape_and_cache, "torch_npu._npu_reshape_and_cache",
                   Variant("", kwargs={"slot_mapping": 1}), namespace="atb")
    monkeypatch.undo()
    call = bound_call(_npu_reshape_and_cache, "torch_npu._npu_reshape_and_cache",
                      Variant("", (1,)), namespace="no_such_namespace")
    assert call.implementation == "torch_npu._npu_reshape_and_cache [schema not checked]"


def test_check_counts_the_portable_outputs_on_inputs_of_its_own(tmp_path):
    """A W8A8 GroupedMatmul with an INT64 scale: the NPU call's scale is what
    npu_trans_quant_param returned (an operator that only binds: empty), the portable path's
    count is taken on host inputs."""
    from pytest_npuperf.replay.bindcheck import check_bindings
    from tests.replay_project import write_db
    from tests.test_kernels_moe import gmm_row

    cells = gmm_row(((12, 32), "DT_INT8"), ((2, 32, 64), "DT_INT8"), ((12, 64), "DT_BF16"),
                    group_list=((2,), "DT_INT64"), scale=((2, 64), "DT_INT64"))
    db = write_db(tmp_path, {"GroupedMatmul": [cells]})
    lines = {line.kernel_type: line for line in check_bindings(db, schema_dir(NEWEST))}
    assert lines["GroupedMatmul"].binds, lines["GroupedMatmul"].text
    assert not lines["MatMulV2"].binds and "no row" in lines["MatMulV2"].text


def test_on_an_npu_host_a_missing_custom_op_environment_is_said(monkeypatch):
    from pytest_npuperf.replay import bindcheck

    monkeypatch.setattr(bindcheck, "custom_op_environment",
                        lambda: ["ASCEND_CUSTOM_OPP_PATH: set it to /v"])
    backend = npu_backend([], EMBEDDED)
    del backend.custom_operator  # the installed vllm-ascend's operators
    monkeypatch.setattr(backend, "activate", lambda: None)
    lines = {line.kernel_type: line for line in bindcheck.check_bindings(DEFAULT_DB,
                                                                          backend=backend)}
    for kernel_type in ("AddRmsNormBias", "DispatchFFNCombine"):
        assert not lines[kernel_type].binds
        assert lines[kernel_type].text == ("custom-op environment: ASCEND_CUSTOM_OPP_PATH: "
                                           "set it to /v")
    assert lines["RINGMLAPrefillBF16Kernel"].binds  # ATB: no custom OPP
    assert lines["FusedInferAttentionScore"].text == "torch_npu.npu_fused_infer_attention_score"
    # the Triton op needs no custom OPP, but vllm-ascend installed
    assert "No module named 'vllm_ascend'" in lines["split_qkv_rmsnorm_rope_kernel"].text
    assert sum(not line.binds for line in lines.values()) == 3  # the rest bound, none run
