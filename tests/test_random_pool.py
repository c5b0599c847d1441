"""Inputs on a CPU are copies of pools of random values (kernels/random_pool.py): valid data
of the distribution the kernels expect, the same for a case on every run, never
uninitialised memory, however large the tensor."""

from __future__ import annotations

import pytest
import torch

from pytest_npuperf.kernels import random_pool
from pytest_npuperf.kernels.tensors import random_tensor

CPU = torch.device("cpu")


def _draw(shape, dtype, seed=7, **kwargs):
    return random_tensor(shape, dtype, CPU, torch.Generator().manual_seed(seed), **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_floats_are_standard_normal_and_repeatable(dtype):
    x = _draw((512, 256), dtype)
    assert x.dtype == dtype and x.shape == (512, 256)
    assert torch.equal(x, _draw((512, 256), dtype))  # same case, same data
    assert not torch.equal(x, _draw((512, 256), dtype, seed=8))  # another case, other data
    values = x.float()
    assert abs(values.mean().item()) < 0.05 and abs(values.std().item() - 1) < 0.05


def test_two_inputs_of_one_case_differ():
    generator = torch.Generator().manual_seed(3)
    a = random_tensor((64, 64), torch.float32, CPU, generator)
    b = random_tensor((64, 64), torch.float32, CPU, generator)
    assert not torch.equal(a, b)


def test_integers_stay_in_their_range_and_scaled_floats_are_scaled():
    ids = _draw((1000,), torch.int64, low=3, high=9)
    assert ids.min().item() >= 3 and ids.max().item() < 9 and len(ids.unique()) == 6
    small = _draw((4096,), torch.bfloat16, scale=0.02)
    assert small.dtype == torch.bfloat16
    assert 0.015 < small.float().std().item() < 0.025


def test_a_tensor_larger_than_the_pool_is_filled_everywhere(monkeypatch):
    monkeypatch.setattr(random_pool, "POOL_ELEMENTS", 1 << 12)
    monkeypatch.setattr(random_pool, "_pools", {})
    x = _draw((5, 3000), torch.float32)  # 15,000 values from a 4,096-value pool
    assert torch.isfinite(x).all()
    # Each stretch of the output is a run of pool values: the whole pool is drawn from.
    assert abs(x.std().item() - 1) < 0.1 and len(x.unique()) > 2000
    ints = _draw((3, 4000), torch.int8, low=-5, high=5)
    assert ints.min().item() >= -5 and ints.max().item() < 5


def test_bools_and_devices_other_than_the_cpu_draw_as_before():
    assert not random_pool.poolable(torch.bool, CPU)
    assert not random_pool.poolable(torch.complex64, CPU)
    assert not random_pool.poolable(torch.float32, torch.device("meta"))
    flags = _draw((100,), torch.bool)
    assert flags.dtype == torch.bool and flags.any() and not flags.all()
