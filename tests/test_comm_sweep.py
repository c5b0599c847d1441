"""Collective sweep points, groups and topology tiers, bandwidths, the analytic model, ranks."""

from __future__ import annotations

import math

import pytest

from pytest_npuperf.comm.guard import Guard
from pytest_npuperf.comm.launch import rank_env, strip_nproc, torchrun_command
from pytest_npuperf.comm.model import FAIL, PASS, WARN, predict_us, verdict
from pytest_npuperf.comm.ops import OPS, dtype_named, op_named, parse_size, size_label
from pytest_npuperf.comm.sweep import (
    SweepSpec,
    build_points,
    coords,
    default_grid,
    group_at_tier,
    power_sizes,
    tier_of,
)

A3 = (48, 8, 2)


def test_case_ids_read_as_the_issue_writes_them():
    spec = SweepSpec(("all_reduce",), ("DT_BF16",), (16 << 20,), (8,), (), (1, 8))
    points, notes = build_points(spec, world=8)
    assert [p.case_id for p in points] == ["all_reduce-16MiB-8r-BF16-tier1"]
    assert notes == []
    assert points[0].elements == 8 << 20 and points[0].key == (16 << 20, 8, "DT_BF16", 1)


@pytest.mark.parametrize("text, value", [("1024", 1024), ("1K", 1024), ("1KiB", 1024),
                                         ("16MiB", 16 << 20), ("2g", 2 << 30), ("64 KB", 65536)])
def test_sizes_use_binary_units(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["", "1.5K", "K", "-1", "0", "12 apples"])
def test_a_size_that_is_not_one_is_refused(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_size_labels_use_the_largest_exact_unit():
    assert [size_label(n) for n in (1024, 1536, 3 << 20, 512 << 20, 100)] == [
        "1KiB", "1536B", "3MiB", "512MiB", "100B"]


def test_the_default_sweep_is_1kib_to_512mib_in_powers_of_two():
    sizes = power_sizes(parse_size("1KiB"), parse_size("512MiB"), 2)
    assert sizes[0] == 1024 and sizes[-1] == 512 << 20 and len(sizes) == 20


def test_dtype_and_op_spellings():
    assert [dtype_named(t) for t in ("bf16", "BF16", "fp16", "float32", "int8",
                                     "torch.bfloat16")] == [
        "DT_BF16", "DT_BF16", "DT_FLOAT16", "DT_FLOAT", "DT_INT8", "DT_BF16"]
    with pytest.raises(ValueError, match="unsupported collective dtype"):
        dtype_named("complex64")
    assert op_named("allreduce").name == "all_reduce" and op_named("alltoallv").name == "all_to_all"
    with pytest.raises(ValueError, match="unknown collective"):
        op_named("reduce")


def test_tiers_follow_the_outermost_differing_grid_dimension():
    assert coords(17, A3) == (1, 0, 1)
    assert tier_of(range(16), A3) == 1  # one pod: its 8 nodes x 2 dies (TP=16)
    assert tier_of((0, 1), A3) == 2  # two dies of one node
    assert tier_of((0, 16), A3) == 0  # two pods
    assert tier_of((5,), A3) == 2  # all equal: the last dimension
    assert tier_of(range(8), (128, 8)) == 1 and tier_of((0, 8), (128, 8)) == 0


def test_groups_at_a_tier_spread_over_its_dimension():
    assert group_at_tier(2, 0, (2, 8)) == (0, 8)
    assert group_at_tier(4, 0, (2, 8)) == (0, 1, 8, 9)
    assert group_at_tier(16, 1, A3) == tuple(range(16))
    assert group_at_tier(2, 1, A3) == (0, 2)
    assert group_at_tier(16, 1, (2, 8)) is None  # 16 ranks never fit in one node
    assert group_at_tier(3, 0, (2, 8)) is None


def test_default_grid_is_nodes_by_local_ranks():
    assert default_grid(16, 8) == (2, 8)
    assert default_grid(2, 2) == (1, 2)


def test_points_that_no_group_or_split_can_hold_are_left_out_and_said():
    spec = SweepSpec(("all_to_all", "all_reduce"), ("DT_FLOAT",), (1024, 1000), (3, 4, 8),
                     (), (1, 4))
    points, notes = build_points(spec, world=4)
    ids = [p.case_id for p in points]
    assert "all_to_all-1KiB-4r-FLOAT-tier1" in ids
    assert not any(i.startswith("all_to_all-1KiB-3r") for i in ids)  # 1024 B / 3 ranks
    assert "all_reduce-1000B-3r-FLOAT-tier1" in ids
    assert any("groups of 8 ranks left out" in n for n in notes)
    assert any("multiples of 12 bytes" in n for n in notes)
    tiered, notes = build_points(SweepSpec(("all_reduce",), ("DT_BF16",), (1024,), (2,), (0, 1),
                                           (2, 2)), world=4)
    assert [(p.topology_tier, p.ranks) for p in tiered] == [(0, (0, 2)), (1, (0, 1))]


@pytest.mark.parametrize("op, factor", [("all_reduce", 2 * 7 / 8), ("all_gather", 7.0),
                                        ("reduce_scatter", 7.0), ("all_to_all", 7 / 8),
                                        ("broadcast", 1.0)])
def test_bus_bandwidth_factors_are_nccl_tests_on_the_contract_message(op, factor):
    """nccl-tests: busbw = S/t x 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter,
    alltoall), 1 (broadcast), S being n x message_bytes for all_gather and reduce_scatter."""
    assert OPS[op].busbw_factor(8) == pytest.approx(factor)


def test_the_analytic_model_matches_the_contract_formulas():
    a, b = 0.5e-6, 196e9 * 0.7  # tier 1
    n, m = 8, 1 << 20
    ring = 2 * (n - 1) * a + 2 * (n - 1) * m / (n * b)
    tree = 2 * math.log2(n) * a + 2 * m / b
    assert predict_us("all_reduce", m, n, 1) == pytest.approx(min(ring, tree) * 1e6)
    assert predict_us("all_gather", m, n, 1) == pytest.approx((math.log2(n) * a + (n - 1) * m / b)
                                                              * 1e6)
    # reduce_scatter: the model's M is the scattered input, n x the per-rank message.
    assert predict_us("reduce_scatter", m, n, 1) == pytest.approx(
        (math.log2(n) * a + (n - 1) * (n * m) / (n * b)) * 1e6)
    assert predict_us("all_to_all", m, 2, 2) == pytest.approx((0.2e-6 + m / (224e9 * 0.7)) * 1e6)
    for bad in (("broadcast", m, n, 1), ("all_reduce", m, 1, 1), ("all_reduce", m, n, 5)):
        with pytest.raises(ValueError):
            predict_us(*bad)


@pytest.mark.parametrize("ratio, expected", [(1.0, PASS), (2.0, PASS), (0.5, PASS), (2.01, WARN),
                                             (4.0, WARN), (0.25, WARN), (4.01, FAIL), (0.2, FAIL),
                                             (math.inf, FAIL), (math.nan, FAIL)])
def test_pass_warn_fail_bands(ratio, expected):
    assert verdict(ratio, 2.0) == expected


def test_rank_variables_of_torchrun():
    assert rank_env({}).launched is False
    env = rank_env({"RANK": "3", "WORLD_SIZE": "16", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8"})
    assert (env.rank, env.world, env.local_rank, env.local_world, env.launched) == (3, 16, 3, 8,
                                                                                   True)
    with pytest.raises(ValueError):
        rank_env({"RANK": "4", "WORLD_SIZE": "2"})


def test_the_relaunch_is_the_same_invocation_under_torchrun():
    args = ["bench", "-k", "all_reduce", "--npuperf-nproc", "2", "--npuperf-nproc=4", "-q"]
    assert strip_nproc(args) == ["bench", "-k", "all_reduce", "-q"]
    command = torchrun_command(2, args, python="py")
    assert command == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                       "2", "-m", "pytest", "bench", "-k", "all_reduce", "-q"]


def test_the_watchdog_names_a_stuck_case():
    guard = Guard(rank=1)  # no thread, no signal: only the decision
    assert guard._stuck_reason(0.0) is None
    guard.arm("all_reduce-1KiB-2r-BF16-tier1", -1.0)
    assert "no progress" in guard._stuck_reason(__import__("time").monotonic())
    guard.disarm()
    guard._flag_term()
    later = __import__("time").monotonic() + 60
    assert "terminated by the launcher" in guard._stuck_reason(later)
