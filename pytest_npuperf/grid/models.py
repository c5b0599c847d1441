"""Model dimensions the grid derives shapes from (docs/format.md §9).

Four models are built in; any other is described by a small YAML file (`--model-file`):

```yaml
models:                      # or a single mapping with the same keys
  - name: my-model           # required; also: hf_id, aliases
    hidden: 4096             # required: hidden, intermediate, heads, kv_heads, head_dim, tp
    intermediate: 14336
    heads: 32
    kv_heads: 8
    head_dim: 128
    tp: [1, 2, 4, 8]
    # MLA attention (all four or none): q_lora, kv_lora, nope, rope
    # MoE (all three or none): experts, expert_intermediate, top_k; ep: [1, 2, 4, 8]
```

GEMM (N, K) pairs per TP size t (hidden h): dense attention `(h/t, h)`, `(h, h/t)` (the
reference grid) plus the fused QKV and output projections vLLM runs,
`((heads/t + 2 kv/t) head_dim, h)` and `(h, heads/t head_dim)` (kv/t at least 1: KV heads are
replicated when TP exceeds them); MLA `(q_lora, h)`, `(heads head_dim/t, q_lora)`,
`(kv_lora + rope, h)`, `(heads head_dim/t, kv_lora)`; FFN `(inter/t, h)`, `(h, inter/t)`;
MoE the shared expert `(expert_inter/t, h)`, `(h, expert_inter/t)` and the router `(experts, h)`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..db.errors import clip
from .errors import ConfigError, UnknownModelError
from .yamlio import Marks, load_yaml


@dataclass(frozen=True)
class Model:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    tp: tuple[int, ...]
    hf_id: str = ""
    aliases: tuple[str, ...] = ()
    q_lora: int | None = None
    kv_lora: int | None = None
    nope: int | None = None
    rope: int | None = None
    experts: int | None = None
    expert_intermediate: int | None = None
    top_k: int | None = None
    ep: tuple[int, ...] = (1,)
    source: str = field(default="built-in", compare=False)

    @property
    def mla(self) -> bool:
        return self.kv_lora is not None

    @property
    def moe(self) -> bool:
        return self.experts is not None

    def heads_per_rank(self, tp: int) -> int:
        return self.heads // tp

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads on one rank; replicated (at least one) when TP exceeds them."""
        return max(1, self.kv_heads // tp)

    def gemm_nk(self, tp: int) -> list[tuple[int, int]]:
        h, t = self.hidden, tp
        pairs: list[tuple[int, int]] = []
        if self.mla:
            assert self.q_lora and self.kv_lora and self.rope is not None
            qh = self.heads * self.head_dim // t
            pairs += [(self.q_lora, h), (qh, self.q_lora), (self.kv_lora + self.rope, h),
                      (qh, self.kv_lora)]
        else:
            qkv = (self.heads_per_rank(t) + 2 * self.kv_heads_per_rank(t)) * self.head_dim
            pairs += [(h // t, h), (h, h // t), (qkv, h),
                      (h, self.heads_per_rank(t) * self.head_dim)]
        pairs += [(self.intermediate // t, h), (h, self.intermediate // t)]
        if self.moe:
            assert self.expert_intermediate and self.experts
            pairs += [(self.expert_intermediate // t, h), (h, self.expert_intermediate // t),
                      (self.experts, h)]
        return pairs

    def describe(self) -> str:
        return f"{self.name} ({self.hf_id})" if self.hf_id else self.name


BUILTIN_MODELS: tuple[Model, ...] = (
    Model("deepseek-v3", 7168, 18432, 128, 1, 128, (1, 2, 4, 8, 16),
          hf_id="deepseek-ai/DeepSeek-V3", aliases=("dsv3", "deepseekv3", "ds-v3"),
          q_lora=1536, kv_lora=512, nope=128, rope=64, experts=256, expert_intermediate=2048,
          top_k=8, ep=(1, 2, 4, 8)),
    Model("qwen3-32b", 5120, 25600, 64, 8, 128, (1, 2, 4, 8, 16), hf_id="Qwen/Qwen3-32B",
          aliases=("qwen332b", "qwen3_32b")),
    Model("llama-3-70b", 8192, 28672, 64, 8, 128, (1, 4, 8, 16),
          hf_id="meta-llama/Meta-Llama-3-70B", aliases=("llama70b", "llama3-70b")),
    # TP and EP sizes of GLM-5.1 are not in the contract; those of DeepSeek-V3 are assumed.
    Model("glm-5.1", 6144, 12288, 64, 64, 256, (1, 2, 4, 8, 16), hf_id="zai-org/GLM-5.1",
          aliases=("glm51", "glm-5"), q_lora=2048, kv_lora=512, nope=192, rope=64,
          experts=256, expert_intermediate=2048, top_k=8, ep=(1, 2, 4, 8)),
)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def _names_of(model: Model) -> set[str]:
    names = {model.name, *model.aliases}
    if model.hf_id:
        names |= {model.hf_id, model.hf_id.rsplit("/", 1)[-1]}
    return {_key(n) for n in names}


class ModelRegistry:
    """Known models by any of their names (case and punctuation ignored)."""

    def __init__(self, models: Iterable[Model] = BUILTIN_MODELS) -> None:
        self.models: list[Model] = []
        self._by_name: dict[str, Model] = {}
        for model in models:
            self.add(model)

    def add(self, model: Model) -> None:
        for key in _names_of(model):
            previous = self._by_name.get(key)
            if previous is not None and previous.name != model.name:
                raise ConfigError(f"{model.source}: model name {key!r} of {model.name!r} is "
                                  f"already used by {previous.name!r}")
        self.models = [m for m in self.models if m.name != model.name] + [model]
        self._by_name = {k: v for k, v in self._by_name.items() if v.name != model.name}
        for key in _names_of(model):
            self._by_name[key] = model

    def known(self) -> str:
        return ", ".join(m.describe() for m in self.models)

    def get(self, name: str) -> Model:
        model = self._by_name.get(_key(name))
        if model is None:
            raise UnknownModelError(f"unknown model {name!r}; known models: {self.known()} "
                                    f"(describe others with --model-file)")
        return model

    def resolve(self, names: Iterable[str]) -> list[Model]:
        out: list[Model] = []
        for name in names:
            model = self.get(name)
            if model not in out:
                out.append(model)
        return out


_REQUIRED = ("name", "hidden", "intermediate", "heads", "kv_heads", "head_dim", "tp")
_MLA = ("q_lora", "kv_lora", "nope", "rope")
_MOE = ("experts", "expert_intermediate", "top_k")
_ALLOWED = set(_REQUIRED) | set(_MLA) | set(_MOE) | {"hf_id", "aliases", "ep"}


MAX_DIMENSION = 2 ** 40
"""No model dimension comes near this; a larger one is a typo (or a hostile file)."""


def _positive_int(value: object, path, marks: Marks) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise marks.error(path, f"expected a positive integer, got {clip(value)}")
    if value > MAX_DIMENSION:
        raise marks.error(path, f"{clip(value)} is larger than any model dimension "
                                f"(at most {MAX_DIMENSION:,})")
    return value


def _int_list(value: object, path, marks: Marks) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise marks.error(path, f"expected a list of positive integers, got {value!r}")
    return tuple(_positive_int(v, (*path, i), marks) for i, v in enumerate(value))


def model_from_mapping(data: object, path, marks: Marks) -> Model:
    if not isinstance(data, dict):
        raise marks.error(path, f"a model is a mapping of dimensions, got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - _ALLOWED)
    if unknown:
        raise marks.error((*path, unknown[0]), f"unknown model key {unknown[0]!r} (allowed: "
                                               f"{', '.join(sorted(_ALLOWED))})")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise marks.error(path, f"model is missing {', '.join(missing)}")
    for group in (_MLA, _MOE):
        given = [k for k in group if k in data]
        if given and len(given) != len(group):
            raise marks.error(path, f"give all of {', '.join(group)} or none of them")
    name = data["name"]
    if not isinstance(name, str) or not name.strip():
        raise marks.error((*path, "name"), f"expected a model name, got {name!r}")
    ints = {k: _positive_int(data[k], (*path, k), marks)
            for k in ("hidden", "intermediate", "heads", "kv_heads", "head_dim", *_MLA, *_MOE)
            if k in data}
    tp = _int_list(data["tp"], (*path, "tp"), marks)
    ep = _int_list(data.get("ep", [1]), (*path, "ep"), marks)
    aliases = data.get("aliases", [])
    if isinstance(aliases, str):
        aliases = [aliases]
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise marks.error((*path, "aliases"), "expected a list of names")
    hf_id = data.get("hf_id", "")
    if not isinstance(hf_id, str):
        raise marks.error((*path, "hf_id"), f"expected a text id, got {hf_id!r}")
    model = Model(name=name.strip(), tp=tp, ep=ep, hf_id=hf_id, aliases=tuple(aliases),
                  source=marks.where(path), **ints)
    problem = check_model(model)
    if problem:
        raise marks.error(path, problem)
    return model


def check_model(model: Model) -> str | None:
    """Why the dimensions cannot be sharded as given, or None."""
    if model.heads % model.kv_heads:
        return f"heads ({model.heads}) must be a multiple of kv_heads ({model.kv_heads})"
    for t in model.tp:
        for label, value in (("hidden", model.hidden), ("intermediate", model.intermediate),
                             ("heads", model.heads),
                             ("expert_intermediate", model.expert_intermediate)):
            if value is not None and value % t:
                return f"{label} ({value}) is not divisible by TP size {t}"
        if model.mla and (model.heads * model.head_dim) % t:
            return f"heads * head_dim is not divisible by TP size {t}"
    if model.moe:
        assert model.experts is not None
        for e in model.ep:
            if model.experts % e:
                return f"experts ({model.experts}) are not divisible by EP size {e}"
    return None


def load_model_file(path: str | Path) -> list[Model]:
    data, marks = load_yaml(path)
    if isinstance(data, dict) and "models" in data:
        if set(data) != {"models"}:
            extra = sorted(set(map(str, data)) - {"models"})
            raise marks.error((extra[0],), "a model file has either one model mapping or a "
                                           "'models' list, nothing beside it")
        items = data["models"]
        if not isinstance(items, list) or not items:
            raise marks.error(("models",), "expected a non-empty list of models")
        return [model_from_mapping(item, ("models", i), marks) for i, item in enumerate(items)]
    if data is None:
        raise ConfigError(f"{path}: empty model file")
    return [model_from_mapping(data, (), marks)]


# ---------------------------------------------------------------------------------------------
# Named grids derived from the target models, for templates (`"N, K": model_gemm_nk`).

def _unique_sorted(values: Iterable) -> tuple:
    return tuple(sorted(set(values)))


def _dense(models: list[Model]) -> list[Model]:
    return [m for m in models if not m.mla]


def _mla(models: list[Model]) -> list[Model]:
    return [m for m in models if m.mla]


MODEL_GRIDS: dict[str, tuple[str, Callable[[list[Model]], tuple]]] = {
    "model_gemm_nk": ("(N, K) pairs of the models' projection GEMMs across TP sizes",
                      lambda ms: _unique_sorted(p for m in ms for t in m.tp for p in m.gemm_nk(t))),
    "model_hidden": ("hidden sizes", lambda ms: _unique_sorted(m.hidden for m in ms)),
    "model_hidden_tp": ("hidden / TP", lambda ms: _unique_sorted(
        m.hidden // t for m in ms for t in m.tp)),
    "model_ffn_tp": ("FFN intermediate / TP (dense FFN and MoE shared expert)",
                     lambda ms: _unique_sorted(
                         [m.intermediate // t for m in ms for t in m.tp]
                         + [m.expert_intermediate // t for m in ms if m.moe for t in m.tp])),
    "model_heads_tp": ("attention heads / TP", lambda ms: _unique_sorted(
        m.heads_per_rank(t) for m in ms for t in m.tp)),
    "model_norm_dims": ("dims RmsNorm runs on: hidden, q_lora, kv_lora, head_dim",
                        lambda ms: _unique_sorted(
                            [m.hidden for m in ms] + [m.head_dim for m in _dense(ms)]
                            + [d for m in _mla(ms) for d in (m.q_lora, m.kv_lora)])),
    "model_attention_tp": ("(heads/TP, kv_heads/TP, head_dim) of dense (non-MLA) models",
                           lambda ms: _unique_sorted(
                               (m.heads_per_rank(t), m.kv_heads_per_rank(t), m.head_dim)
                               for m in _dense(ms) for t in m.tp)),
    "model_kv_cache_tp": ("(kv_heads/TP, head_dim) of dense models",
                          lambda ms: _unique_sorted((m.kv_heads_per_rank(t), m.head_dim)
                                                    for m in _dense(ms) for t in m.tp)),
    "model_mla_bmm": ("(batch=heads/TP, K, N) of MLA's absorbed BMMs: (nope -> kv_lora) and "
                      "(kv_lora -> nope)",
                      lambda ms: _unique_sorted(
                          b for m in _mla(ms) for t in m.tp
                          for b in ((m.heads_per_rank(t), m.nope, m.kv_lora),
                                    (m.heads_per_rank(t), m.kv_lora, m.nope)))),
    "model_mla_heads_tp": ("(heads/TP, nope, rope) of MLA models", lambda ms: _unique_sorted(
        (m.heads_per_rank(t), m.nope, m.rope) for m in _mla(ms) for t in m.tp)),
    "model_mla_cache": ("(kv_lora, rope) of MLA models", lambda ms: _unique_sorted(
        (m.kv_lora, m.rope) for m in _mla(ms))),
    "model_experts": ("routed experts of MoE models", lambda ms: _unique_sorted(
        m.experts for m in ms if m.moe)),
    "model_moe": ("(hidden, experts, top_k) of MoE models", lambda ms: _unique_sorted(
        (m.hidden, m.experts, m.top_k) for m in ms if m.moe)),
}


def model_grids(models: list[Model]) -> dict[str, tuple]:
    return {name: build(models) for name, (_, build) in MODEL_GRIDS.items()}
