"""Small decoder blocks written in plain torch the way transformers writes Llama's (its RMS
norm, rotate-half rotary embedding and gated MLP as eager Python, attention through
scaled_dot_product_attention), and traces of them taken on this CPU: with npuperf's module
ranges (the classes and the function named in `KINDS_YAML`, a user's extension of the
table), and plainly with torch.profiler (record_shapes only, no ranges)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, TOKENS, LAYERS = 64, 4, 2, 16, 96, 12, 2
# The operators the kinds decompose into: none of them may stay unmapped (shares of time are
# the benchmark's to measure: on a busy host one preempted view holds any share).
PIECES = {"aten::pow", "aten::mean", "aten::rsqrt", "aten::silu", "aten::neg", "aten::add",
          "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu"}

KINDS_YAML = """
rms_norm:
  modules: [BlockRMSNorm]
rotary:
  functions: [tests.model_traces.apply_rotary_pos_emb]
gated_activation:
  modules: [BlockMLP]
"""


class BlockRMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class BlockMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.down_proj = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = BlockRMSNorm(HIDDEN), BlockRMSNorm(HIDDEN)
        self.q = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.mlp = BlockMLP()

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(h).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v(h).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, HEADS * HEAD_DIM))
        return x + self.mlp(self.norm2(x))


def block_step():
    """One forward of LAYERS blocks and a final torch.nn.RMSNorm, over TOKENS tokens."""
    torch.manual_seed(0)
    blocks = [Block().eval() for _ in range(LAYERS)]
    final = nn.RMSNorm(HIDDEN, eps=1e-6)
    x0 = torch.randn(1, TOKENS, HIDDEN)
    angles = torch.arange(TOKENS).float()[:, None] * torch.rand(HEAD_DIM // 2)[None]
    emb = torch.cat((angles, angles), dim=-1)[None]
    cos, sin = emb.cos(), emb.sin()

    def step():
        with torch.no_grad():
            x = x0
            for block in blocks:
                x = block(x, cos, sin)
            return final(x)
    return step


def plain_trace(path: Path, step, steps: int = 2) -> Path:
    """A user's trace: torch.profiler with record_shapes, after a warm-up step."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            step()
    prof.export_chrome_trace(str(path))
    return path


def range_sums(path: Path, prefix: str) -> list[float]:
    """Independently of the parser: per range whose name starts with `prefix`, the CPU time
    of the operators inside it (each outermost operator's duration), from the raw events."""
    events = json.loads(path.read_text())["traceEvents"]
    ops = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            ops[(e["pid"], e["tid"])].append((float(e["ts"]), float(e["dur"])))
    sums = []
    for e in events:
        if e.get("cat") != "user_annotation" or not str(e.get("name", "")).startswith(prefix):
            continue
        begin, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        total, covered = 0.0, float("-inf")
        for ts, dur in sorted(ops[(e["pid"], e["tid"])], key=lambda o: (o[0], -o[1])):
            if begin - 1e-3 <= ts and ts + dur <= end + 1e-3 and ts >= covered - 1e-3:
                total += dur
                covered = ts + dur
        sums.append(total)
    return sums
