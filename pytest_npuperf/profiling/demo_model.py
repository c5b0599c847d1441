"""The demo model: a small transformer block written here (random weights, nothing to download)
whose GEMMs are rows of the embedded default database, so that a replay of that database can
be compared with the same kernels inside a model on any device.

Two layers of a DeepSeek-V3 MoE tail at 32 tokens, tensor-parallel 16, in bf16: an RMS norm,
the router (7168 -> 256 experts) and its softmax, the shared expert (gate and up 7168 -> 128,
SiLU, down 128 -> 7168: 2048 / 16 = 128) and the residual add. Each layer has its own weights,
as in a model: a weight is read from memory once per step, not kept hot by the call before.
The GEMMs are the embedded database's MatMulV3 rows 32x7168x256, 32x7168x128 and 32x128x7168.
"""

from __future__ import annotations

from collections.abc import Callable

TOKENS, HIDDEN, EXPERTS, SHARED, LAYERS = 32, 7168, 256, 128, 2
NAME = "demo_model"  # the demo's trace is kept as <device database>/profiles/demo_model.json
DESCRIPTION = (f"{LAYERS} layers of a DeepSeek-V3 MoE tail at {TOKENS} tokens, TP 16, bf16: "
               f"RMS norm, router {HIDDEN}->{EXPERTS} + softmax, shared expert "
               f"{HIDDEN}->{SHARED}->{HIDDEN}, residual")


def demo_step(device, tokens: int = TOKENS) -> Callable[[], object]:
    """One forward step of the demo model on `device` (a torch.device), over `tokens` tokens
    (the embedded database's rows are those of 32; a prefill profile takes more)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    dtype = torch.bfloat16

    def weight(*shape: int):
        return (torch.randn(*shape, generator=generator) * shape[-1] ** -0.5).to(device, dtype)

    layers = [{"norm": torch.ones(HIDDEN, device=device, dtype=dtype),
               "router": weight(EXPERTS, HIDDEN), "gate": weight(SHARED, HIDDEN),
               "up": weight(SHARED, HIDDEN), "down": weight(HIDDEN, SHARED)}
              for _ in range(LAYERS)]
    hidden = torch.randn(tokens, HIDDEN, generator=generator).to(device, dtype)

    def step():
        x = hidden
        with torch.no_grad():
            for w in layers:
                h = torch.nn.functional.rms_norm(x, (HIDDEN,), w["norm"], 1e-6)
                scores = torch.softmax(h @ w["router"].t(), dim=-1)
                shared = torch.nn.functional.silu(h @ w["gate"].t()) * (h @ w["up"].t())
                x = x + shared @ w["down"].t()
        return x, scores
    return step
