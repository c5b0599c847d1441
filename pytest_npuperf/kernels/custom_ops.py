"""vllm-ascend's custom operators (CONTRACT.md §10): the kernels whose catalog entry says
`custom_op` (AddRmsNormBias, DispatchFFNCombine, KvRmsNormRopeCache, RINGMLAPrefillBF16Kernel,
split_qkv_rmsnorm_rope_kernel).

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


def ascend_op(name: str):
    """`torch.ops._C_ascend.<name>`, after importing vllm-ascend's operator library (importing
    it registers the ops; vllm_ascend/utils.py loads it the same way)."""
    import torch

    importlib.import_module("vllm_ascend.vllm_ascend_C")
    return getattr(torch.ops._C_ascend, name)
