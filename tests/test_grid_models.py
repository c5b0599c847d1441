"""Model configs: the built-in models, aliases, model files, GEMM (N, K) pairs."""

from __future__ import annotations

import textwrap

import pytest

from pytest_npuperf.db.signature import signature
from pytest_npuperf.grid import BUILTIN_MODELS, ModelRegistry, generate_rows, load_model_file
from pytest_npuperf.grid.errors import ConfigError, UnknownModelError
from pytest_npuperf.grid.models import model_grids


@pytest.mark.parametrize("name, canonical", [
    ("deepseek-v3", "deepseek-v3"), ("dsv3", "deepseek-v3"), ("DeepSeek-V3", "deepseek-v3"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-v3"), ("qwen3-32b", "qwen3-32b"),
    ("Qwen/Qwen3-32B", "qwen3-32b"), ("qwen332b", "qwen3-32b"), ("QWEN3_32B", "qwen3-32b"),
    ("meta-llama/Meta-Llama-3-70B", "llama-3-70b"), ("llama70b", "llama-3-70b"),
    ("zai-org/GLM-5.1", "glm-5.1"), ("glm-5.1", "glm-5.1"),
])
def test_aliases(name, canonical):
    assert ModelRegistry().get(name).name == canonical


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(UnknownModelError) as info:
        ModelRegistry().get("gpt-9")
    message = str(info.value)
    for model in BUILTIN_MODELS:
        assert model.name in message and model.hf_id in message
    assert "--model-file" in message


def test_contract_dimensions():
    dsv3, qwen, llama, glm = (ModelRegistry().get(n) for n in ("dsv3", "qwen3-32b",
                                                               "llama70b", "glm-5.1"))
    assert (dsv3.hidden, dsv3.intermediate, dsv3.heads, dsv3.kv_heads, dsv3.head_dim) == \
        (7168, 18432, 128, 1, 128)
    assert (dsv3.q_lora, dsv3.kv_lora, dsv3.nope, dsv3.rope) == (1536, 512, 128, 64)
    assert (dsv3.experts, dsv3.expert_intermediate, dsv3.top_k) == (256, 2048, 8)
    assert dsv3.tp == (1, 2, 4, 8, 16) and dsv3.ep == (1, 2, 4, 8)
    assert (qwen.hidden, qwen.intermediate, qwen.heads, qwen.kv_heads, qwen.head_dim) == \
        (5120, 25600, 64, 8, 128) and not qwen.mla and not qwen.moe
    assert llama.tp == (1, 4, 8, 16) and llama.hidden == 8192
    assert (glm.hidden, glm.q_lora, glm.nope, glm.experts) == (6144, 2048, 192, 256)


def test_gemm_pairs_follow_the_contract_formulas():
    dsv3 = ModelRegistry().get("dsv3")
    pairs = set(dsv3.gemm_nk(8))
    h = 7168
    assert {(1536, h), (128 * 128 // 8, 1536), (512 + 64, h), (128 * 128 // 8, 512),
            (18432 // 8, h), (h, 18432 // 8)} <= pairs
    assert {(2048 // 8, h), (h, 2048 // 8), (256, h)} <= pairs  # MoE shared expert, router
    qwen = ModelRegistry().get("qwen3-32b")
    pairs = set(qwen.gemm_nk(4))
    h = 5120
    assert {(h // 4, h), (h, h // 4), (25600 // 4, h), (h, 25600 // 4)} <= pairs
    # Fused QKV (64/4 query heads, 8/4 KV heads, 128 each) and the output projection.
    assert {((16 + 2 * 2) * 128, h), (h, 16 * 128)} <= pairs
    # KV heads are replicated once TP exceeds them.
    assert ((4 + 2 * 1) * 128, h) in set(qwen.gemm_nk(16))


def test_target_models_restrict_the_gemm_pairs():
    registry = ModelRegistry()
    qwen = registry.get("qwen3-32b")
    allowed = {p for t in qwen.tp for p in qwen.gemm_nk(t)}
    rows = generate_rows(["MatMulV2"], target_models="Qwen/Qwen3-32B", rows=200)["MatMulV2"]
    assert len(rows) == 200
    for row in rows:
        _, (_m, k, n), *_ = signature("MatMulV2", row["Input Shapes"], row["Input Data Types"],
                                     row["Input Formats"], row["Output Shapes"],
                                     row["Output Data Types"])
        assert (n, k) in allowed
    assert model_grids([qwen])["model_gemm_nk"] == tuple(sorted(allowed))


def test_unknown_target_model_is_an_error():
    with pytest.raises(UnknownModelError, match="unknown model 'nope'.*known models"):
        generate_rows(["MatMulV2"], target_models="qwen3-32b,nope", rows=1)


MODEL_FILE = """\
models:
  - name: tiny-moe
    aliases: [tiny]
    hf_id: example/Tiny-MoE
    hidden: 1024
    intermediate: 4096
    heads: 16
    kv_heads: 4
    head_dim: 64
    tp: [1, 2]
    experts: 16
    expert_intermediate: 512
    top_k: 2
    ep: [1, 2, 4]
"""


def test_model_file_adds_models_and_becomes_the_target(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(MODEL_FILE)
    (model,) = load_model_file(path)
    assert model.name == "tiny-moe" and model.moe and model.ep == (1, 2, 4)
    rows = generate_rows(["MatMulV2"], model_file=path, rows=0)["MatMulV2"]
    ks = {r["Input Shapes"].split(";")[0].split(",")[1] for r in rows}
    assert ks <= {"1024", "512", "256", "4096", "2048"}
    assert len(rows) > 0
    # --target-models may name it by alias, alongside built-in models.
    both = generate_rows(["MatMulV2"], model_file=path, target_models="tiny,qwen3-32b", rows=0)
    assert len(both["MatMulV2"]) > len(rows)
    gmm = generate_rows(["GroupedMatmul"], model_file=path, rows=0)["GroupedMatmul"]
    assert {r["Input Shapes"].split(";")[1].split(",")[0] for r in gmm} == {"16", "8", "4"}


@pytest.mark.parametrize("text, message", [
    ("name: x\nhidden: 10\n", "missing intermediate, heads, kv_heads, head_dim, tp"),
    ("name: x\nhidden: 1000\nintermediate: 4096\nheads: 16\nkv_heads: 4\nhead_dim: 64\n"
     "tp: [1, 3]\n", "hidden (1000) is not divisible by TP size 3"),
    ("name: x\nhidden: 1024\nintermediate: 4096\nheads: 16\nkv_heads: 5\nhead_dim: 64\ntp: [1]\n",
     "multiple of kv_heads"),
    ("name: x\nhidden: 1024\nintermediate: 4096\nheads: 16\nkv_heads: 4\nhead_dim: 64\ntp: [1]\n"
     "experts: 10\nexpert_intermediate: 512\ntop_k: 2\nep: [4]\n", "not divisible by EP size 4"),
    ("name: x\nhidden: 1024\nintermediate: 4096\nheads: 16\nkv_heads: 4\nhead_dim: 64\ntp: [1]\n"
     "experts: 10\n", "give all of experts, expert_intermediate, top_k"),
    ("name: x\nhidden: -1\nintermediate: 4096\nheads: 16\nkv_heads: 4\nhead_dim: 64\ntp: [1]\n",
     "expected a positive integer"),
    ("name: x\nhiden: 1\n", "unknown model key 'hiden'"),
    ("models: [\n", "invalid YAML"),
    ("name: qwen3-32b\nhf_id: other/Qwen\nhidden: 1024\nintermediate: 4096\nheads: 16\n"
     "kv_heads: 4\nhead_dim: 64\ntp: [1]\n", None),
])
def test_model_file_errors(tmp_path, text, message):
    path = tmp_path / "models.yaml"
    path.write_text(textwrap.dedent(text))
    if message is None:  # redefining a model by its name replaces it
        (model,) = load_model_file(path)
        registry = ModelRegistry()
        registry.add(model)
        assert registry.get("qwen3-32b").hidden == 1024
        return
    with pytest.raises(ConfigError) as info:
        load_model_file(path)
    assert str(info.value).startswith(f"{path}:")
    assert message in str(info.value)
