"""Attention outputs of a library kernel, laid out as FusedInferAttentionScore lays out its
own (kernels/attention.py's AttentionPlan): views where the values are what is compared."""

from __future__ import annotations

import torch

from ..attention import AttentionPlan


def out_layout(plan: AttentionPlan, out: torch.Tensor) -> torch.Tensor:
    """flash-attn's (tokens, heads, dim) or (batch, seq, heads, dim) as the kernel lays out
    its output (views: the values are what is compared)."""
    layout = plan.out_layout
    if out.dim() == 4:  # (B, S, N, D)
        if layout == "BSND":
            return out
        if layout == "BNSD":
            return out.transpose(1, 2)
        if layout == "NBSD":
            return out.permute(2, 0, 1, 3)
        if layout == "BSH":
            return out.reshape(out.shape[0], out.shape[1], -1)
        out = out.reshape(-1, *out.shape[2:])  # TND / NTD from a uniform batch
    return out.transpose(0, 1) if layout == "NTD" else out


def lse_layout(plan: AttentionPlan, lse: torch.Tensor) -> torch.Tensor:
    """flash-attn's LSE, (heads, tokens) or (batch, heads, seq), in the kernel's layout."""
    if lse.dim() == 3:  # (B, N, S)
        if plan.lse == "BNS1":
            return lse.unsqueeze(-1)
        lse = lse.transpose(0, 1).reshape(lse.shape[1], -1)  # (N, T) of a uniform batch
    if plan.lse == "NT":
        return lse
    return lse.transpose(0, 1).unsqueeze(-1)  # TN1
