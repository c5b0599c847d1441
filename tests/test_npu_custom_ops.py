"""Issue 22 item 3: the custom-op environment check follows each vllm-ascend version's layout
and applies only to the `torch.ops._C_ascend` operators; the operators load as the installed
vllm-ascend loads them.

An installed vllm-ascend stands in as a package on disk with each version's layout, read from
its sources: v0.18.0 keeps its custom OPP in `_cann_ops_custom/vendors/vllm-ascend` and leaves
ASCEND_CUSTOM_OPP_PATH to vLLM's platform (vllm_ascend/platform.py:573-579), v0.25.1rc1 in
`vendors/custom_transformer` with `utils.enable_custom_op()` setting the path itself
(vllm_ascend/utils.py:303-320, 401-441). Their `vllm_ascend_C` and Triton modules register the
stack's operators (from the pinned schemas) under the real namespaces when imported.
"""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
import torch

from pytest_npuperf.kernels import custom_ops, overview
from pytest_npuperf.kernels.schema_ops import SchemaOperators
from pytest_npuperf.replay.preflight import custom_op_problems
from tests.kernel_rows import prepare
from tests.npu_standin import EMBEDDED, NEWEST, STACKS, npu_backend, schema_set
from tests.test_kernels_moe import DISPATCH

VENDOR = {EMBEDDED: "vllm-ascend", NEWEST: "custom_transformer"}
REGISTER = '''
from tests.test_npu_custom_ops import register
register({namespace!r}, {stack!r})
'''
ENABLE_CUSTOM_OP = '''
import os

_VENDOR = os.path.join(os.path.dirname(__file__), "_cann_ops_custom", "vendors",
                       "custom_transformer")
calls = []


def enable_custom_op():
    calls.append("enable_custom_op")
    os.environ["ASCEND_CUSTOM_OPP_PATH"] = _VENDOR + ":" + os.environ.get(
        "ASCEND_CUSTOM_OPP_PATH", "")
    import vllm_ascend.vllm_ascend_C  # noqa: F401
    return True
'''
TRITON_UTILS = '''
initialised = []


def init_device_properties_triton():
    initialised.append(True)
'''

_registered: list[SchemaOperators] = []


def register(namespace: str, stack: str) -> None:
    """What importing the stack's extension module does: its operators exist in torch.ops."""
    operators = SchemaOperators(schema_set(stack), prefix="")
    for text in schema_set(stack).texts:
        if text.namespace == namespace:
            operators.op(namespace, text.name.split(".")[0])
    _registered.append(operators)


def _write(path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture(params=STACKS)
def vllm_ascend(request, tmp_path, monkeypatch):
    """(stack, package directory): an installed vllm-ascend of that stack's layout."""
    stack = request.param
    package = tmp_path / "vllm_ascend"
    _write(package / "__init__.py")
    (package / "_cann_ops_custom" / "vendors" / VENDOR[stack] / "op_api" / "lib").mkdir(
        parents=True)
    _write(package / "vllm_ascend_C.py", REGISTER.format(namespace="_C_ascend", stack=stack))
    linearnorm = package / "ops" / "triton" / "linearnorm"
    for init in (package / "ops", package / "ops" / "triton", linearnorm):
        _write(init / "__init__.py")
    _write(linearnorm / "split_qkv_rmsnorm_rope.py", REGISTER.format(namespace="vllm",
                                                                     stack=stack))
    _write(package / "ops" / "triton" / "triton_utils.py", TRITON_UTILS)
    if stack == NEWEST:
        _write(package / "utils.py", ENABLE_CUSTOM_OP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ASCEND_CUSTOM_OPP_PATH", raising=False)
    yield stack, package
    for name in [m for m in sys.modules if m == "vllm_ascend" or m.startswith("vllm_ascend.")]:
        del sys.modules[name]
    while _registered:
        _registered.pop().close()


def test_each_version_is_checked_by_its_own_layout(vllm_ascend):
    stack, package = vllm_ascend
    missing = custom_ops.custom_op_environment()
    if stack == EMBEDDED:  # the user (or vLLM's platform) sets the path; rpath finds op_api/lib
        vendor = package / "_cann_ops_custom" / "vendors" / "vllm-ascend"
        assert missing == [f"ASCEND_CUSTOM_OPP_PATH: set it to {vendor} (export "
                           f"ASCEND_CUSTOM_OPP_PATH={vendor}:$ASCEND_CUSTOM_OPP_PATH)"]
        assert custom_ops.custom_op_environment({"ASCEND_CUSTOM_OPP_PATH": f"/x:{vendor}"}) == []
    else:  # vllm-ascend sets it up itself in enable_custom_op()
        assert missing == []
        assert custom_ops.custom_op_layout().self_setup


def test_a_vllm_ascend_without_compiled_operators_or_none_at_all_says_so(tmp_path, monkeypatch):
    _write(tmp_path / "vllm_ascend" / "__init__.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    (line,) = custom_ops.custom_op_environment({})
    assert "has no compiled custom operators" in line and "custom_transformer" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert custom_ops.custom_op_layout(empty).vendor is None
    monkeypatch.setattr(custom_ops, "installed_package", lambda: None)
    assert custom_ops.custom_op_environment({})[0].startswith("vllm_ascend is not installed")


def test_the_operators_load_as_each_version_loads_them(vllm_ascend):
    stack, package = vllm_ascend
    op = custom_ops.custom_operator("_C_ascend", "dispatch_ffn_combine")
    names = {a.name for a in op.default._schema.arguments}
    assert ("bias1" in names) == (stack == NEWEST)
    if stack == NEWEST:
        utils = sys.modules["vllm_ascend.utils"]
        assert utils.calls == ["enable_custom_op"]
        assert str(package / "_cann_ops_custom" / "vendors" / "custom_transformer") in \
            os.environ["ASCEND_CUSTOM_OPP_PATH"]
    qkv = custom_ops.custom_operator("vllm", "qkv_rmsnorm_rope")
    assert qkv.default._schema.arguments[1].name == "cos_sin_cache"
    # the Triton kernels' core counts, set before the first launch
    assert sys.modules["vllm_ascend.ops.triton.triton_utils"].initialised == [True]


def test_dispatch_ffn_combine_runs_on_each_installed_version(vllm_ascend, monkeypatch):
    """The replay's own path: the custom-op check, loading, binding, the call."""
    stack, package = vllm_ascend
    if stack == EMBEDDED:
        monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH",
                           str(package / "_cann_ops_custom" / "vendors" / "vllm-ascend"))
    backend = npu_backend([], stack, group="hccl_world_4")
    del backend.custom_operator  # the installed vllm-ascend's operators, not the stand-in's
    _, prepared = prepare("DispatchFFNCombine", DISPATCH, backend)
    out, counts = prepared.call()
    assert isinstance(out, torch.Tensor) and isinstance(counts, torch.Tensor)
    label = "v0.18.0 schema" if stack == EMBEDDED else ">= v0.20.2rc1 schema"
    assert label in prepared.implementation


def test_only_the_c_ascend_kernels_wait_for_the_custom_opp(monkeypatch):
    missing = ["ASCEND_CUSTOM_OPP_PATH: set it to /v"]
    monkeypatch.setattr("pytest_npuperf.replay.preflight.custom_op_environment",
                        lambda env=None: missing)
    problems = custom_op_problems(["AddRmsNormBias", "DispatchFFNCombine", "KvRmsNormRopeCache",
                                   "RINGMLAPrefillBF16Kernel", "split_qkv_rmsnorm_rope_kernel"])
    assert problems == ["AddRmsNormBias, DispatchFFNCombine: ASCEND_CUSTOM_OPP_PATH: set it to /v"]
    infos = {i.kernel_type: i for i in overview.describe("npu", custom_env=lambda: missing)}
    assert not infos["DispatchFFNCombine"].replayable_here
    assert infos["RINGMLAPrefillBF16Kernel"].replayable_here
    assert infos["split_qkv_rmsnorm_rope_kernel"].replayable_here
