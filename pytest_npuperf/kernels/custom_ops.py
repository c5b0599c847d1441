"""vllm-ascend's custom operators (CONTRACT.md §10): the kernels whose catalog entry says
`custom_op` (AddRmsNormBias, DispatchFFNCombine, RINGMLAPrefillBF16Kernel,
split_qkv_rmsnorm_rope_kernel). KvRmsNormRopeCache, which CONTRACT.md §10 lists with them, is
torch_npu's own operator (op-plugin's op_plugin_functions.yaml defines npu_kv_rmsnorm_rope_cache;
vllm-ascend's attention/mla_v1.py calls torch_npu.npu_kv_rmsnorm_rope_cache), so it needs none
of this.

They load only when CANN is told where vllm-ascend installed them; without that the failure
deep inside CANN names nothing useful, so the replay checks first and says what to set.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

# vllm-ascend's compiled custom operators live here inside the installed package.
CUSTOM_OPP_SUBDIR = Path("_cann_ops_custom") / "vendors" / "vllm-ascend"


def custom_op_environment(env: dict[str, str] | None = None) -> list[str]:
    """What is missing for vllm-ascend's custom operators, as `VAR: set it to ...` lines."""
    env = dict(os.environ) if env is None else env
    spec = importlib.util.find_spec("vllm_ascend")
    if spec is None or not spec.submodule_search_locations:
        return ["vllm_ascend is not installed: pip install vllm-ascend (its custom operators "
                "provide this kernel)"]
    package = Path(next(iter(spec.submodule_search_locations)))
    vendor = package / CUSTOM_OPP_SUBDIR
    missing = []
    if str(vendor) not in env.get("ASCEND_CUSTOM_OPP_PATH", "").split(":"):
        missing.append(f"ASCEND_CUSTOM_OPP_PATH: set it to {vendor} "
                       f"(export ASCEND_CUSTOM_OPP_PATH={vendor}:$ASCEND_CUSTOM_OPP_PATH)")
    libdir = vendor / "op_api" / "lib"
    if str(libdir) not in env.get("LD_LIBRARY_PATH", "").split(":"):
        missing.append(f"LD_LIBRARY_PATH: add {libdir} "
                       f"(export LD_LIBRARY_PATH={libdir}:$LD_LIBRARY_PATH)")
    return missing


# The import that registers a namespace's operators with torch.ops (vllm-ascend's
# vllm_ascend/utils.py enable_custom_op imports vllm_ascend.vllm_ascend_C for _C_ascend).
REGISTERING_MODULES = {"_C_ascend": "vllm_ascend.vllm_ascend_C"}


def custom_operator(namespace: str, name: str, module: str | None = None):
    """`torch.ops.<namespace>.<name>`, once the module that registers it is imported."""
    import torch

    module = module or REGISTERING_MODULES.get(namespace)
    if module:
        try:
            importlib.import_module(module)
        except Exception as exc:  # an extension module fails in many ways without CANN
            raise RuntimeError(f"torch.ops.{namespace}.{name}: importing {module} failed "
                               f"({type(exc).__name__}: {exc})") from exc
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError) as exc:
        raise RuntimeError(f"torch.ops.{namespace}.{name} is not registered"
                           f"{f' by {module}' if module else ''}") from exc
