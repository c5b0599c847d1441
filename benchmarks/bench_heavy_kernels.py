"""The attention, MoE and quantisation replays on a GPU: which implementation each case runs
there, its time, and its output against the same case on the CPU (the same inputs, built once
on the CPU and copied over).

    python benchmarks/bench_heavy_kernels.py [--device cuda] [--calls 20] [--only TYPE,TYPE]

Prints one line per case: kernel type, case, implementation, median microseconds per call,
the largest difference to the CPU output relative to its largest magnitude, and ok/MISMATCH
(tolerance 3e-2 for 16-bit outputs, 1e-3 otherwise; int8 outputs may differ by one step).
Exits 1 on a mismatch. On a machine without a GPU it compares the CPU with itself.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from pytest_npuperf.devices import CpuBackend, select_backend  # noqa: E402
from pytest_npuperf.kernels import catalog  # noqa: E402
from pytest_npuperf.kernels.registry import spec_for  # noqa: E402
from tests.kernel_rows import prepare, row, slots  # noqa: E402

F32, BF16, I8, I32, I64 = "DT_FLOAT", "DT_BF16", "DT_INT8", "DT_INT32", "DT_INT64"
NZ = "FRACTAL_NZ"


def fia(filled, outputs, **runtime):
    return row(slots(catalog.FIA_INPUT_SLOTS, filled), outputs, **runtime)


CASES = [
    ("FusedInferAttentionScore", "GQA prefill 2x512, 32/8 heads", fia(
        {0: ((1024, 32, 128), BF16), 1: ((1024, 8, 128), BF16), 2: ((1024, 8, 128), BF16),
         4: ((2048, 2048), I8), 5: ((2,), I64), 6: ((2,), I64)},
        [((1024, 32, 128), BF16), ((1024, 32, 1), F32)], input_layout="TND", num_heads="32",
        num_key_value_heads="8", sparse_mode="3", actual_seq_lengths_values="512,1024",
        actual_seq_lengths_kv_values="512,1024")),
    ("FusedInferAttentionScore", "GQA paged decode 16 x 2048", fia(
        {0: ((16, 32, 128), BF16), 1: ((272, 128, 1024), BF16), 2: ((272, 128, 1024), BF16),
         4: ((2048, 2048), I8), 5: ((16,), I64), 6: ((16,), I64), 14: ((16, 16), I32)},
        [((16, 32, 128), BF16), ((16, 32, 1), F32)], input_layout="TND", num_heads="32",
        num_key_value_heads="8", sparse_mode="3", block_size="128",
        actual_seq_lengths_kv_values=",".join(["2048"] * 16))),
    ("FusedInferAttentionScore", "MLA paged decode 8 x 2048", fia(
        {0: ((8, 16, 1, 512), BF16), 1: ((128, 1, 128, 512), BF16),
         2: ((128, 1, 128, 512), BF16), 5: ((8,), I64), 6: ((8,), I64), 14: ((8, 16), I32),
         24: ((8, 16, 1, 64), BF16), 25: ((128, 1, 128, 64), BF16)},
        [((8, 16, 1, 512), BF16), ((8, 16, 1, 1), F32)], input_layout="BNSD_NBSD",
        num_heads="16", num_key_value_heads="1", sparse_mode="0", block_size="128",
        actual_seq_lengths_kv_values=",".join(["2048"] * 8))),
    ("RINGMLAPrefillBF16Kernel", "MLA prefill 2x256, 16 heads", row(
        [((512, 16, 128), BF16), ((512, 16, 64), BF16), ((512, 16, 128), BF16),
         ((512, 16, 64), BF16), ((512, 16, 128), BF16), ((512, 512), BF16), ((2,), I32)],
        [((512, 16, 128), BF16), ((16, 512), F32)])),
    ("LightningIndexer", "decode 8 x 2048, top 512", row(
        [((8, 64, 128), BF16), ((128, 128, 1, 128), BF16), ((8, 64), BF16), ((8,), I32),
         ((8,), I32), ((8, 16), I32)], [((8, 1, 512), I32), None])),
    ("SparseFlashAttention", "decode 8, top 512, MLA", row(
        [((8, 16, 512), BF16), ((128, 128, 1, 512), BF16), ((128, 128, 1, 512), BF16),
         ((8, 1, 512), I32), ((8, 16), I32), ((8,), I32), ((8,), I32), ((8, 16, 64), BF16),
         ((128, 128, 1, 64), BF16)], [((8, 16, 512), BF16), None, None])),
    ("GroupedMatmul", "8 experts, 1024 tokens, 2048 -> 1024", row(
        [((1024, 2048), BF16), ((8, 2048, 1024), BF16), None, None, None, None, None,
         ((8,), I64)], [((1024, 1024), BF16)])),
    ("GroupedMatmulSwigluQuant", "8 experts, 512 tokens, 2048 -> 1024", row(
        [((512, 2048), I8), ((8, 32, 128, 16, 32), I8, NZ), ((8, 1024), F32), ((512,), F32),
         None, ((8,), I64)], [((512, 512), I8), ((512,), F32)])),
    ("QuantBatchMatmulV3", "512 x 4096 x 4096 W8A8", row(
        [((512, 4096), I8), ((128, 256, 16, 32), I8, NZ), ((4096,), F32), None, None,
         ((512,), F32)], [((512, 4096), BF16)])),
    ("TransposeBatchMatMul", "MLA up-projection 256 x 16 heads", row(
        [((256, 16, 512), BF16), ((16, 512, 128), BF16)], [((256, 16, 128), BF16)])),
    ("MoeTokenPermute", "1024 tokens, top 8", row(
        [((1024, 2048), BF16), ((1024, 8), I32)], [((8192, 2048), BF16), ((8192,), I32)])),
    ("MoeTokenUnpermute", "1024 tokens, top 8", row(
        [((8192, 2048), BF16), ((8192,), I32), ((1024, 8), BF16)], [((1024, 2048), BF16)])),
    ("DispatchFFNCombine", "32 tokens, EP 16, 4 experts", row(
        [((32, 2048), BF16), ((4, 2048, 1024), I8), ((4, 512, 2048), I8), ((32, 8), I32),
         ((4096,), I64), ((8192,), I64), ((32, 8), F32)], [((32, 2048), BF16), ((4,), I32)],
        **{"EP Size": "16"})),
    ("AscendQuantV2", "4096 x 7168", row([((4096, 7168), BF16), ((7168,), BF16),
                                          ((7168,), BF16)], [((4096, 7168), I8)])),
    ("DynamicQuant", "4096 x 7168", row([((4096, 7168), BF16)],
                                        [((4096, 7168), I8), ((4096,), F32)])),
]


def flat(output) -> list[torch.Tensor]:
    items = output if isinstance(output, (tuple, list)) else (output,)
    return [t for t in items if isinstance(t, torch.Tensor)]


def difference(got: list[torch.Tensor], want: list[torch.Tensor]) -> tuple[float, bool]:
    worst, ok = 0.0, True
    for g, w in zip(got, want):
        g, w = g.detach().cpu(), w.detach()
        if g.dtype == torch.int8:
            step = (g.int() - w.int()).abs().max().item() if g.numel() else 0
            ok &= step <= 1
            continue
        if not g.dtype.is_floating_point:
            ok &= torch.equal(g, w)
            continue
        scale = max(w.float().abs().max().item(), 1e-12)
        rel = (g.float() - w.float()).abs().max().item() / scale
        worst = max(worst, rel)
        ok &= rel <= (3e-2 if g.element_size() == 2 else 1e-3)
    return worst, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--only", default="", help="comma-separated kernel types")
    args = parser.parse_args()
    backend = select_backend(args.device)
    backend.activate()
    only = {t for t in args.only.split(",") if t}
    print(f"device: {backend.describe()['name']} ({backend.kind}), torch {torch.__version__}")
    failures = 0
    for kernel_type, label, cells in CASES:
        if only and kernel_type not in only:
            continue
        case, on_cpu = prepare(kernel_type, cells, CpuBackend())
        want = flat(on_cpu.call())
        tensors = {k: v.to(backend.device) for k, v in on_cpu.tensors.items()}
        spec = spec_for(kernel_type)
        call = spec.portable_call(tensors, case)
        implementation = getattr(call, "implementation", None) or spec.portable
        got = flat(call())
        samples = backend.timer().time_calls(call, args.calls)
        worst, ok = difference(got, want)
        failures += not ok
        print(f"{kernel_type:26s} {label:40s} {implementation:60s} "
              f"{statistics.median(samples):10.1f} us  rel diff {worst:.2e}  "
              f"{'ok' if ok else 'MISMATCH'}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
