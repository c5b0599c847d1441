"""A call of a module kind (module_kinds.py) as the cells of its kernel row.

A call brings the tensors its range recorded (the module's inputs and own parameters, or the
function's tensor arguments) and the operators it ran (name, input dims, types, strides,
concrete scalar values), in order: each converter reads what it needs, the shapes the
simulator queries for that kernel type:

- rms_norm -> RmsNorm: x and gamma (its last dim) -> y, rstd;
- rotary -> ApplyRotaryPosEmb: q, k, cos, sin (cos/sin broadcast over the heads, as the
  function unsqueezes them) -> q, k; a single rotated tensor leaves k empty;
- gated_activation -> SwiGlu: act(gate) * up over (..., I) is SwiGlu of x (..., 2I) -> y;
- attention -> FusedInferAttentionScore: query, key, value in BNSD, the mask slot (the
  2048 x 2048 causal mask of sparse mode 3 when the call was causal, else the model's
  mask) -> attention_out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .catalog import FIA_INPUT_SLOTS, FIA_KEY, FIA_MASK, FIA_QUERY, FIA_VALUE
from .module_kinds import ModuleKind
from .torch_ops import Slots, Tensor, plain, rms_norm_slots, row_cells, tensor_of

CAUSAL_MASK = (2048, 2048)  # the optimised causal mask of FIA's sparse mode 3


@dataclass
class Part:
    """One operator a composite call ran."""

    name: str
    dims: list = field(default_factory=list)
    types: list = field(default_factory=list)
    strides: list = field(default_factory=list)
    concrete: list = field(default_factory=list)

    def tensors(self) -> list[Tensor | None]:
        strides = list(self.strides) + [None] * (len(self.dims) - len(self.strides))
        return [tensor_of(d, t, s) for d, t, s in zip(self.dims, self.types, strides)]

    def concrete_value(self, index: int) -> str:
        return str(self.concrete[index]) if index < len(self.concrete) else ""


def _present(tensors: list[Tensor | None]) -> list[Tensor]:
    return [t for t in tensors if t is not None and t[0] != ()]


def _rms_norm(tensors: list[Tensor | None], parts: list[Part]) -> Slots | None:
    for candidate in [tensors, *(p.tensors() for p in parts if "rms_norm" in p.name)]:
        slots = rms_norm_slots(_present(candidate))
        if slots is not None:
            return slots  # the module's (x, weight), or the rms_norm operator's inputs
    # A decomposition: x is what the first operator read, gamma the 1-D factor of a mul.
    first = next((p for p in parts if _present(p.tensors())), None)
    if first is None:
        return None
    x = _present(first.tensors())[0]
    gammas = [t for p in parts if p.name == "aten::mul" for t in _present(p.tensors())
              if t[0] == x[0][-1:]]
    return rms_norm_slots([x, gammas[-1]]) if gammas else None


def _unsqueezed(table: Tensor, like: Tensor) -> Tensor:
    """cos/sin of (B, S, D) as the rotation broadcasts them over the heads: (B, 1, S, D)."""
    dims = table[0]
    if len(dims) == len(like[0]) - 1:
        dims = (*dims[:1], 1, *dims[1:])
    return dims, table[1], False, None


def _rotary(tensors: list[Tensor | None], parts: list[Part]) -> Slots | None:
    present = _present(tensors)
    if len(present) < 3:
        present = _rotary_from_parts(parts)
        if present is None:
            return None
    q, k, cos, sin = (present + [None])[:4] if len(present) >= 4 else (
        present[0], None, present[1], present[2])
    if cos is None or sin is None or q is None:
        return None
    cos, sin = _unsqueezed(cos, q), _unsqueezed(sin, q)
    if cos[0][-1] != q[0][-1]:
        return None
    return [q, k, cos, sin], [plain(q), plain(k) if k is not None else None]


def _rotary_from_parts(parts: list[Part]) -> list[Tensor] | None:
    """q, k, cos, sin from `x * cos + rotate_half(x) * sin`, done for q then k: each
    rotation's first mul reads (x, cos), the mul after its cat reads (., sin)."""
    rotated, tables = [], []
    for i, part in enumerate(parts):
        if part.name != "aten::mul" or i + 1 >= len(parts):
            continue
        if not any(p.name == "aten::cat" for p in parts[i + 1:i + 5]):
            continue
        ins = _present(part.tensors())
        if len(ins) == 2:
            rotated.append(ins[0])
            tables.append(ins[1])
    sin = next((_present(p.tensors())[1] for j, p in enumerate(parts)
                if p.name == "aten::mul" and j > 0 and parts[j - 1].name == "aten::cat"
                and len(_present(p.tensors())) == 2), None)
    if not rotated or sin is None:
        return None
    return [rotated[0], rotated[1] if len(rotated) > 1 else None, tables[0], sin]  # type: ignore[list-item]


def _gated(tensors: list[Tensor | None], parts: list[Part]) -> Slots | None:
    act = next((p for p in parts if p.name in ("aten::silu", "aten::silu_")), None)
    if act is None:
        return None  # another activation (gelu: GeGlu) is not a SwiGlu
    ins = _present(act.tensors())
    if not ins:
        return None
    gate = ins[0]
    x = ((*gate[0][:-1], 2 * gate[0][-1]), gate[1], False, None)
    return [x], [plain(gate)]


def _attention(tensors: list[Tensor | None], parts: list[Part]) -> Slots | None:
    """From the range's (query, key, value, mask) when it recorded them, else from the
    scaled_dot_product_attention operator's inputs."""
    sdpa = next((p for p in parts if "scaled_dot_product" in p.name
                 or "flash_attention_forward" in p.name or "efficient_attention_forward"
                 in p.name or p.name.endswith("_flash_attn_forward")), None)
    causal = False
    if sdpa is not None:
        ops = sdpa.tensors()
        causal = any(sdpa.concrete_value(i).lower() == "true" for i in range(4, 7)) if \
            "scaled_dot_product" in sdpa.name else False
    present = [t for t in tensors if t is not None]
    source = present if len(present) >= 3 else (ops if sdpa is not None else [])
    qkv = [t for t in source[:3] if t is not None]
    if len(qkv) < 3 or any(len(t[0]) != 4 for t in qkv):
        return None
    q, k, v = qkv
    mask = source[3] if len(source) > 3 and source[3] is not None and source[3][0] else None
    inputs: list[Tensor | None] = [None] * FIA_INPUT_SLOTS
    inputs[FIA_QUERY], inputs[FIA_KEY], inputs[FIA_VALUE] = q, k, v
    if mask is not None:
        inputs[FIA_MASK] = mask
    elif causal and q[0][2] > 1:
        inputs[FIA_MASK] = (CAUSAL_MASK, "INT8", False, None)
    while inputs and inputs[-1] is None:
        inputs.pop()
    out = ((q[0][0], q[0][1], q[0][2], v[0][3]), q[1], False, None)
    return inputs, [out]


_CONVERT: dict[str, Callable[[list[Tensor | None], list[Part]], Slots | None]] = {
    "rms_norm": _rms_norm, "rotary": _rotary, "gated_activation": _gated,
    "attention": _attention,
}


def composite_row(kind: ModuleKind, tensors: list[Tensor | None], parts: list[Part]
                  ) -> dict[str, str] | None:
    """The row cells of one call of `kind` (None: what it recorded is not a call of it)."""
    slots = _CONVERT[kind.converter](tensors, parts)
    return None if slots is None else row_cells(kind.kernel_type, *slots)


def traced_tensors(recorded: list) -> list[Tensor | None]:
    """A range's recorded (dims, strides, type) as slots."""
    return [None if r is None else tensor_of(list(r[0]), r[2], list(r[1])) for r in recorded]
