"""mstx markers: the text a case's range carries, and CANN's own mstx C API.

Torch-free, so that reading profiler output (ingest, `npuperf backfill`) can cut a case id the
way the marker was cut without importing torch.

Which API emits the ranges depends on who collects them (read in Ascend/pytorch):
- inside a `torch_npu.profiler.profile` session with `msprof_tx=True`, `torch_npu.npu.mstx`
  (torch_npu/npu/mstx.py) records them; its C++ side (torch_npu/csrc/profiler/mstx_mgr.cpp,
  `MstxMgr::isMstxEnable`) emits only while that profiler (or an mspti subscriber) is on;
- under the `msprof` command line (`--msproftx=on`), torch_npu's mstx therefore stays silent,
  and a process calls CANN's mstx C API directly: `mstxRangeStartA(const char*, aclrtStream)`
  returning a `uint64_t` range id and `mstxRangeEnd(uint64_t)`, exported by
  `$ASCEND_HOME_PATH/lib64/libms_tools_ext.so` (declarations: Ascend/pytorch
  third_party/mstx/ms_tools_ext.h; the library path: torch_npu's
  csrc/framework/interface/MstxInterface.cpp). That the C API called through ctypes is
  collected like a C caller's is inferred from CANN's mstx documentation (any process calling
  the API under `msprof --msproftx=on`), not checked on hardware here.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

# msprof stores a marker's message in a 156-byte field (struct format `...156s` of msprof's
# analysis/msparser/data_struct_size_constant.py, MSPROFTX_FMT): longer text is cut.
MSTX_MESSAGE_LIMIT = 156
MSTX_LIBRARY = "libms_tools_ext.so"


def mstx_message(case_id: str) -> str:
    """The marker text for a case, cut to what msprof keeps (UTF-8 bytes, whole characters)."""
    data = case_id.encode()[:MSTX_MESSAGE_LIMIT]
    return data.decode(errors="ignore")


class MstxUnavailable(RuntimeError):
    pass


class CannMstx:
    """Host-side ranges through CANN's mstx C API (the msprof command line collects them).

    The stream argument is left NULL: a device-side marker would have to be ordered with the
    kernels torch_npu queues on its own task-queue thread, which a direct call cannot do. The
    runner synchronises the device before a range opens and before it closes, so a host range
    holds exactly the kernels its case launched.
    """

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        home = env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")
        if not home:
            raise MstxUnavailable("ASCEND_HOME_PATH is not set: source CANN's set_env.sh (e.g. "
                                  "source /usr/local/Ascend/ascend-toolkit/set_env.sh)")
        path = Path(home) / "lib64" / MSTX_LIBRARY
        try:
            library = ctypes.CDLL(str(path))
        except OSError as exc:
            raise MstxUnavailable(f"cannot load {path} ({exc}): the CANN toolkit that "
                                  f"ASCEND_HOME_PATH names has no mstx library") from None
        self._start = library.mstxRangeStartA
        self._start.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        self._start.restype = ctypes.c_uint64
        self._end = library.mstxRangeEnd
        self._end.argtypes = [ctypes.c_uint64]
        self._end.restype = None

    def range_start(self, message: str) -> int:
        return int(self._start(mstx_message(message).encode(), None))

    def range_end(self, range_id: int) -> None:
        self._end(range_id)
