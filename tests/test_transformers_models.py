"""Real transformers models (small configs, random weights, nothing downloaded), profiled on
this CPU: with npuperf's module ranges their RMS norms, rotary embeddings, gated MLPs and
attentions are each one row of the database's kernel type; a plain torch.profiler trace of
the same model maps to the same rows by the eager decompositions (issue 28, item 2)."""

from __future__ import annotations

from collections import Counter

import pytest

from pytest_npuperf.db.columns import INPUT_SHAPES, RAW_DURATION
from pytest_npuperf.ingest.trace_rows import trace_rows
from pytest_npuperf.kernels.torch_ops import TorchOperators
from pytest_npuperf.profiling.workload import profile_callable
from tests.model_traces import PIECES, plain_trace, range_sums

transformers = pytest.importorskip("transformers", reason="transformers is a test-only extra "
                                                          "(pip install -e .[test])")
pytestmark = pytest.mark.slow  # importing transformers alone takes seconds

LAYERS, TOKENS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2, 16, 64, 4, 2, 16
COMPOSITES = ("RmsNorm", "ApplyRotaryPosEmb", "SwiGlu", "FusedInferAttentionScore")


def _model(name: str):
    import torch

    common = dict(hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=128,
                  max_position_embeddings=64)
    if name == "llama":
        config, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    else:
        config, cls = transformers.Qwen3Config(head_dim=HEAD_DIM, **common), \
            transformers.Qwen3ForCausalLM
    torch.manual_seed(0)
    model = cls(config).eval()
    ids = torch.randint(0, 128, (1, TOKENS))

    def step():
        with torch.no_grad():
            return model(ids)
    return step


# Per forward: two norms a layer and the final one (Qwen3 also normalises q and k per head).
EXPECTED = {"llama": {"RmsNorm": 2 * LAYERS + 1, "ApplyRotaryPosEmb": LAYERS, "SwiGlu": LAYERS,
                      "FusedInferAttentionScore": LAYERS},
            "qwen3": {"RmsNorm": 4 * LAYERS + 1, "ApplyRotaryPosEmb": LAYERS, "SwiGlu": LAYERS,
                      "FusedInferAttentionScore": LAYERS}}


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_a_transformers_model_maps_its_modules_to_kernel_rows(tmp_path, name):
    step = _model(name)
    ranged = profile_callable(step, tmp_path / "ranged.json", kind="cpu", warmup=1,
                              steps=2).path
    rows, summary = trace_rows(ranged, TorchOperators())
    found = Counter(t for t in rows["Type"] if t in COMPOSITES)
    assert found == {k: 2 * n for k, n in EXPECTED[name].items()}
    assert not _pieces(summary)
    # The module ranges hold all the time of their calls (independent sum over the events).
    norms = sorted(rows.loc[rows["Type"] == "RmsNorm", RAW_DURATION])
    assert norms == pytest.approx(sorted(range_sums(ranged, "npuperf:rms_norm:")), abs=1e-3)
    # No piece of another module in the Add table: only the residual adds (and position ids).
    assert {s for s in rows.loc[rows["Type"] == "Add", INPUT_SHAPES]} <= {
        f"1,{TOKENS},{HIDDEN};1,{TOKENS},{HIDDEN}", f"{TOKENS};"}
    if name == "qwen3":  # q_norm / k_norm: per head
        assert f"1,{TOKENS},{HEADS},{HEAD_DIM};{HEAD_DIM}" in set(
            rows.loc[rows["Type"] == "RmsNorm", INPUT_SHAPES])
    plain = plain_trace(tmp_path / "plain.json", step)
    plain_rows, plain_summary = trace_rows(plain, TorchOperators())
    assert Counter(t for t in plain_rows["Type"] if t in COMPOSITES) == found
    for kernel_type in COMPOSITES:
        assert set(plain_rows.loc[plain_rows["Type"] == kernel_type, INPUT_SHAPES]) == \
            set(rows.loc[rows["Type"] == kernel_type, INPUT_SHAPES])
    assert not _pieces(plain_summary)


def _pieces(summary) -> set[str]:
    """Unmapped operators that are pieces of a kind (time shares are the benchmark's: on a
    busy host one preempted view can hold a tenth of a tiny model's time)."""
    return {k.split(" (", 1)[0] for k in summary.unmapped} & PIECES
