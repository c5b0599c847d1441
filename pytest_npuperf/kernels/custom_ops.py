"""vllm-ascend's operators: the custom OPP behind `torch.ops._C_ascend.*`, and its Triton ops.

Only the `torch.ops._C_ascend.*` operators (AddRmsNormBias, DispatchFFNCombine, and the
DeepSeek-V3.2 sparse-attention fallbacks) load from vllm-ascend's custom operator package
(docs/format.md §10). `npu_ring_mla` is a torch_npu ATB operator (it needs NNAL, not this),
`qkv_rmsnorm_rope` a Triton operator and `npu_kv_rmsnorm_rope_cache` an op-plugin one.

Where the package lives depends on the vllm-ascend version, read from its sources:
- up to v0.20 the vendor directory is `_cann_ops_custom/vendors/vllm-ascend`, put on
  ASCEND_CUSTOM_OPP_PATH by `NPUPlatform.import_kernels()` when vLLM starts its platform
  (v0.18.0 vllm_ascend/platform.py:573-579), and its op_api/lib is found through the
  extension's rpath (v0.18.0 CMakeLists.txt:152), so LD_LIBRARY_PATH needs nothing. A replay
  outside vLLM has no platform start: the check says what to set.
- from v0.20.2rc1 it is `_cann_ops_custom/vendors/custom_transformer`, and vllm-ascend sets the
  paths itself in `enable_custom_op()` (`bootstrap_custom_op_env`, v0.25.1rc1
  vllm_ascend/utils.py:311-320, 401-441); importing `vllm_ascend.vllm_ascend_C` directly
  bypasses that, so the replay lets `enable_custom_op()` load the operators.
Without this the failure deep inside CANN names nothing useful, so the replay checks first.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

VENDORS = Path("_cann_ops_custom") / "vendors"
OLD_VENDOR = "vllm-ascend"  # vllm-ascend <= v0.20
NEW_VENDOR = "custom_transformer"  # vllm-ascend >= v0.20.2rc1


@dataclass(frozen=True)
class CustomOpLayout:
    """Where an installed vllm-ascend keeps its custom OPP, and who sets its paths."""

    package: Path
    vendor: Path | None  # None: no compiled custom operators in the package
    self_setup: bool  # vllm-ascend's enable_custom_op() sets ASCEND_CUSTOM_OPP_PATH itself

    def describe(self) -> str:
        if self.vendor is None:
            return f"vllm-ascend at {self.package} without compiled custom operators"
        who = ("set up by vllm-ascend's enable_custom_op()" if self.self_setup
               else "ASCEND_CUSTOM_OPP_PATH set by the user (or vLLM's platform)")
        return f"custom OPP {self.vendor} ({who})"


def installed_package() -> Path | None:
    try:
        spec = importlib.util.find_spec("vllm_ascend")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def custom_op_layout(package: Path | None = None) -> CustomOpLayout | None:
    """The layout of the installed vllm-ascend (or of `package`); None when not installed."""
    package = package or installed_package()
    if package is None:
        return None
    for vendor, self_setup in ((NEW_VENDOR, True), (OLD_VENDOR, False)):
        path = package / VENDORS / vendor
        if path.is_dir():
            return CustomOpLayout(package, path, self_setup)
    return CustomOpLayout(package, None, False)


def custom_op_environment(env: dict[str, str] | None = None, package: Path | None = None
                          ) -> list[str]:
    """What is missing for vllm-ascend's custom operators, as one line each ("VAR: set it to
    ..."); empty when they can load."""
    env = dict(os.environ) if env is None else env
    layout = custom_op_layout(package)
    if layout is None:
        return ["vllm_ascend is not installed: pip install vllm-ascend (its custom operators "
                "provide this kernel)"]
    if layout.vendor is None:
        return [f"vllm_ascend at {layout.package} has no compiled custom operators "
                f"(no {VENDORS / NEW_VENDOR} or {VENDORS / OLD_VENDOR}): install a build of "
                f"vllm-ascend with its custom ops"]
    if layout.self_setup:
        return []
    if str(layout.vendor) not in env.get("ASCEND_CUSTOM_OPP_PATH", "").split(":"):
        return [f"ASCEND_CUSTOM_OPP_PATH: set it to {layout.vendor} "
                f"(export ASCEND_CUSTOM_OPP_PATH={layout.vendor}:$ASCEND_CUSTOM_OPP_PATH)"]
    return []


def _register_custom_ops() -> None:
    """Register `torch.ops._C_ascend.*` the way the installed vllm-ascend does."""
    layout = custom_op_layout()
    if layout is not None and layout.self_setup:
        utils = importlib.import_module("vllm_ascend.utils")
        if not utils.enable_custom_op():
            raise RuntimeError("vllm_ascend.utils.enable_custom_op() could not load vllm-ascend's "
                               "custom operators (its log says why)")
        return
    importlib.import_module("vllm_ascend.vllm_ascend_C")


# How a namespace's operators get registered with torch.ops: vllm-ascend's custom OPP, or the
# module defining a Triton op (direct_register_custom_op runs when it is imported).
TRITON_MODULES = {"qkv_rmsnorm_rope": "vllm_ascend.ops.triton.linearnorm.split_qkv_rmsnorm_rope"}
# vllm-ascend's Triton kernels size their grid from the device's core counts, which stay unset
# until this runs (its worker does at start, v0.18.0 vllm_ascend/worker/worker.py:299;
# get_vectorcore_num() asserts otherwise, vllm_ascend/ops/triton/triton_utils.py:63-66).
TRITON_SETUP = ("vllm_ascend.ops.triton.triton_utils", "init_device_properties_triton")


def _register(namespace: str, name: str) -> str:
    """Make `torch.ops.<namespace>.<name>` exist; the module that registered it."""
    if namespace == "_C_ascend":
        _register_custom_ops()
        return "vllm-ascend's custom operators"
    module = TRITON_MODULES.get(name)
    if module is None:
        return ""
    importlib.import_module(module)
    setup_module, setup = TRITON_SETUP
    init = getattr(importlib.import_module(setup_module), setup, None)
    if init is not None:
        init()
    return module


def custom_operator(namespace: str, name: str):
    """`torch.ops.<namespace>.<name>` of vllm-ascend, once registered."""
    import torch

    try:
        source = _register(namespace, name)
    except Exception as exc:  # an extension module fails in many ways without CANN
        raise RuntimeError(f"torch.ops.{namespace}.{name}: loading it failed "
                           f"({type(exc).__name__}: {exc})") from exc
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError) as exc:
        raise RuntimeError(f"torch.ops.{namespace}.{name} is not registered"
                           f"{f' by {source}' if source else ''}") from exc


def operator(backend, namespace: str, name: str):
    """The operator a replay calls: from the backend when it brings its own (the offline
    schema check's), else the installed one."""
    own = getattr(backend, "custom_operator", None)
    return own(namespace, name) if own is not None else custom_operator(namespace, name)
