"""Nominal peaks of accelerators: the roofline's ceilings and the physical bound.

Figures are dense (no sparsity) matrix throughput and memory bandwidth from vendor data
sheets. They serve two purposes: MFU/MBU (achieved / peak) and the bound below which a
measurement is flagged `suspect`. Where a figure is not published (cache bandwidths) the table
takes a generous estimate and says so: the bound must stay a *lower* bound on the time, so an
estimate errs high on bandwidth, never low.

Sources:
- A100: NVIDIA A100 Tensor Core GPU data sheet (312 TFLOPS BF16 dense; 2,039 GB/s for the 80 GB
  SXM, 1,555 GB/s for 40 GB; 40 MB L2) and the NVIDIA A100 architecture whitepaper (L2 read
  bandwidth 5,120 bytes/clock, about 7.2 TB/s at 1,410 MHz).
- H100: NVIDIA H100 Tensor Core GPU data sheet (SXM 989 TFLOPS BF16 dense, 1,979 FP8, 3.35 TB/s;
  PCIe 756 / 1,513, 2 TB/s; 50 MB L2). No L2 bandwidth is published: microbenchmarks (Chips
  and Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023) measured 5.5-7 TB/s; the
  table takes 12 TB/s.
- H200: NVIDIA H200 data sheet (989 TFLOPS BF16 dense, 1,979 FP8, 4.8 TB/s HBM3e, 141 GB).
- B200: NVIDIA HGX B200 / DGX B200 data sheets (per GPU 2.25 PFLOPS FP16/BF16 dense, 4.5 FP8,
  8 TB/s HBM3e, 192 GB). L2 bandwidth unpublished: 2x the H100 estimate.
- L40S: NVIDIA L40S data sheet (362 TFLOPS BF16 dense, 864 GB/s, 96 MB L2); L2 bandwidth
  unpublished: 5 TB/s taken.
Estimated figures are marked `estimated`: a bound drawn from them never flags a measurement.
- Ascend: the database device names carry the chip's FP16 TFLOPS and HBM size
  (`ATLAS_800_A2_376T_64G`: Atlas 800T A2 with Ascend 910B, 376 TFLOPS FP16, 64 GB). Atlas
  A2 and A3 data sheets give 2x for INT8. HBM bandwidth 1.6 TB/s per 910B (HBM2e, Atlas 800T
  A2 product documentation); an A3 chip (910C) is two such dies at 3.2 TB/s, and a `_DIE`
  device name (`ATLAS_800_A3_752T_128G_DIE`) gives the chip's figures while torch_npu shows
  each die as one device: a die gets half of them. L2 192 MB per 910B die (the CANN Ascend C
  documentation's hardware description); its bandwidth is not published: taken as 4x HBM
  (the ratio of the A100's L2 to its HBM, rounded up).
"""

from __future__ import annotations

import re

from .base import MemoryLevel, Peak

TB = 1e12
MB = 1 << 20

_L2_H100 = MemoryLevel("L2", 50 * MB, 12 * TB, estimated=True)

# Matched against torch.cuda.get_device_name() in this order (the first key found wins).
# L2 capacity here is a fallback: the device properties give the real one.
CUDA_PEAKS: tuple[tuple[str, Peak], ...] = (
    ("H200", Peak(989 * TB, 4.8 * TB, (_L2_H100,), 1979 * TB,
                  source="NVIDIA H200 data sheet")),
    ("H100 PCIe", Peak(756 * TB, 2.0 * TB, (_L2_H100,), 1513 * TB,
                       source="NVIDIA H100 data sheet (PCIe)")),
    ("H100", Peak(989 * TB, 3.35 * TB, (_L2_H100,), 1979 * TB,
                  source="NVIDIA H100 data sheet (SXM)")),
    ("B200", Peak(2250 * TB, 8.0 * TB, (MemoryLevel("L2", 126 * MB, 24 * TB, True),), 4500 * TB,
                  source="NVIDIA HGX B200 data sheet")),
    ("A100-SXM4-40GB", Peak(312 * TB, 1.555 * TB, (MemoryLevel("L2", 40 * MB, 7.2 * TB),),
                            624 * TB, source="NVIDIA A100 data sheet (40 GB)")),
    ("A100", Peak(312 * TB, 2.039 * TB, (MemoryLevel("L2", 40 * MB, 7.2 * TB),), 624 * TB,
                  source="NVIDIA A100 data sheet (80 GB)")),
    ("L40S", Peak(362 * TB, 0.864 * TB, (MemoryLevel("L2", 96 * MB, 5 * TB, True),), 733 * TB,
                  source="NVIDIA L40S data sheet")),
)

ASCEND_HBM_PER_DIE = 1.6 * TB
ASCEND_L2_PER_DIE = 192 * MB
_ASCEND_NAME = re.compile(r"^ATLAS_\d+_(A2|A3)_(\d+)T_(\d+)G(?:_[A-Z]+)*$")


def cuda_peak(device_name: str, l2_bytes: int | None = None) -> Peak | None:
    for key, peak in CUDA_PEAKS:
        if key in device_name:
            if l2_bytes and peak.levels:
                level = peak.levels[0]
                return _with_levels(peak, (MemoryLevel(level.name, l2_bytes, level.bytes_per_s,
                                                         level.estimated),))
            return peak
    return None


def ascend_peak(device_dir: str) -> Peak | None:
    """Peaks of one torch_npu device from an Atlas database device name."""
    match = _ASCEND_NAME.match(device_dir)
    if not match:
        return None
    tflops = float(match.group(2)) * TB
    dies = 2 if device_dir.endswith("_DIE") else 1
    per_device = tflops / dies
    hbm = ASCEND_HBM_PER_DIE  # one 910B, or one die of an A3 chip
    return Peak(per_device, hbm, (MemoryLevel("L2", ASCEND_L2_PER_DIE, 4 * hbm, True),),
                2 * per_device, source=f"{device_dir}: {per_device / TB:g} TFLOPS FP16 per "
                                       f"device, HBM {hbm / TB:g} TB/s (Atlas data sheets)")


def _with_levels(peak: Peak, levels: tuple[MemoryLevel, ...]) -> Peak:
    return Peak(peak.flops, peak.bytes_per_s, levels, peak.flops_8bit, peak.memory,
                peak.measured, peak.source)
