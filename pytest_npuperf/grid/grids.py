"""Built-in named value grids (docs/format.md §9 and the reference design's shape grids).

A config refers to them by name (`M: M_GRID`) and may define its own under `grids:`.
"""

from __future__ import annotations

M_GRID: tuple[int, ...] = (
    1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 36, 40, 48, 56, 64, 80, 96, 112,
    128, 160, 192, 256, 384, 512, 768, 1024, 2048, 4096, 8192, 16384, 32768,
)
NK_GRID: tuple[int, ...] = (
    128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1728, 1792, 2048, 2304,
    2560, 3072, 3456, 3584, 4096, 4608, 5120, 6144, 6912, 7168, 8192, 10240, 12288, 13824,
    14336, 16384, 18432, 27648, 28672, 55296,
)
ELEM_TOKENS_GRID: tuple[int, ...] = (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                     16384, 32768)
HEADS_GRID: tuple[int, ...] = (1, 2, 3, 4, 5, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 128)
HEAD_DIM_GRID: tuple[int, ...] = (64, 128, 256)
KV_HEADS_GRID: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
# 1-64 by ratio 4, then by ratio 2 (msmodeling's density standard v1 and its shape_grids.py).
ATTN_SEQ_GRID: tuple[int, ...] = (1, 4, 16) + tuple(2 ** i for i in range(6, 18))
ATTN_BATCH_GRID: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 48, 64, 128)
MOE_TOKENS_GRID: tuple[int, ...] = tuple(2 ** i for i in range(17))
# Token counts that are not multiples of 8 (padding kernels only run on those), with every
# required value of msmodeling's density standard v1 (2^n +- 1 and 1-7).
PAD_TOKENS_GRID: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 9, 15, 17, 31, 33, 63, 65, 127, 129,
                                    255, 257, 511, 513, 1023, 1025, 2047, 2049, 4095, 4097,
                                    8191, 8193)

BUILTIN_GRIDS: dict[str, tuple[int, ...]] = {
    "M_GRID": M_GRID, "NK_GRID": NK_GRID, "ELEM_TOKENS_GRID": ELEM_TOKENS_GRID,
    "ELEM_HIDDEN_GRID": NK_GRID, "HEADS_GRID": HEADS_GRID, "HEAD_DIM_GRID": HEAD_DIM_GRID,
    "KV_HEADS_GRID": KV_HEADS_GRID, "ATTN_SEQ_GRID": ATTN_SEQ_GRID,
    "ATTN_BATCH_GRID": ATTN_BATCH_GRID, "MOE_TOKENS_GRID": MOE_TOKENS_GRID,
    "PAD_TOKENS_GRID": PAD_TOKENS_GRID,
}
