"""The simulator's interpolation and its leave-one-out error, against scipy's griddata.

The simulator interpolates 2-D and 3-D with scipy's LinearNDInterpolator (what
`griddata(..., method="linear")` does); npuperf's own Delaunay-linear interpolation (no scipy
at run time) must give the same values on the same points, nothing outside the hull, and 0
error on data linear in the axes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_npuperf.coverage.axes import Family, Policies, Query, family_of
from pytest_npuperf.coverage.delaunay import linear_nd
from pytest_npuperf.coverage.interpolate import ALTERNATE, PREFERRED, Interpolator, Point
from pytest_npuperf.coverage.loo import leave_one_out
from pytest_npuperf.coverage.points import read_points

from .coverage_data import attention_row, database, gemm_row

scipy_interpolate = pytest.importorskip("scipy.interpolate")


def _griddata(points, values, target) -> float | None:
    value = float(scipy_interpolate.griddata(np.asarray(points, float), np.asarray(values, float),
                                             np.asarray([target], float), method="linear")[0])
    return None if math.isnan(value) else value


@pytest.mark.parametrize("dim", [2, 3])
def test_delaunay_linear_equals_griddata(dim):
    rng = np.random.default_rng(dim)
    for _ in range(25):
        n = int(rng.integers(dim + 1, 30))
        scale = rng.choice([1.0, 1000.0, 32768.0])
        points = rng.random((n, dim)) * scale
        values = rng.random(n) * 100 + 1
        target = rng.random(dim) * points.max(axis=0)
        ours, theirs = linear_nd(points, values, target), _griddata(points, values, target)
        assert (ours is None) == (theirs is None), (points, target)
        if ours is not None:
            assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-9)


def test_degenerate_and_outside_give_nothing():
    line = [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert linear_nd(line, [1, 2, 3, 4], (1.5, 1.5)) is None  # all on a line: rank 1
    square = [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert linear_nd(square, [1, 2, 3, 4], (2, 2)) is None  # outside the hull
    assert linear_nd(square, [1, 2, 3, 4], (0.5, 0.5)) == pytest.approx(2.5)


def _family(name_axes: tuple[str, ...], max_dim=None, sqrt=()) -> Family:
    from itertools import combinations

    from pytest_npuperf.coverage.axes import AxisSpec

    axes = tuple(AxisSpec(a, sqrt=a in sqrt) for a in name_axes)
    groups = tuple(g for d in range(1, len(name_axes) + 1) for g in combinations(name_axes, d))
    return Family("test", axes, groups, max_dim)


def _points(coords, values, axes, *, kind=PREFERRED) -> list[Point]:
    return [Point(Query("K", ("bucket",), dict(zip(axes, c))), float(v), kind, i, "K")
            for i, (c, v) in enumerate(zip(coords, values))]


@pytest.mark.parametrize("dim", [2, 3])
def test_leave_one_out_equals_griddata_on_the_rest(dim):
    """Points in general position (no two share a coordinate: no 1-D line to interpolate on),
    so every prediction is the 2-D/3-D one; each equals griddata on the other points."""
    rng = np.random.default_rng(10 + dim)
    axes = ("a", "b", "c")[:dim]
    coords = rng.random((40, dim)) * 1000
    values = 5 + rng.random(40) * 50
    interpolator = Interpolator(_family(axes), _points(coords, values, axes))
    compared = 0
    for i, point in enumerate(interpolator.points):
        ours = interpolator.estimate(point.query, exclude=point)
        rest = np.delete(coords, i, axis=0)
        theirs = _griddata(rest, np.delete(values, i), coords[i])
        assert (ours is None) == (theirs is None)
        if ours is not None:
            assert ours.method == "griddata_linear" and ours.axes == axes
            assert ours.value == pytest.approx(theirs, rel=1e-9)
            compared += 1
    assert compared >= 20


def test_zero_error_for_linear_data_inside_the_hull(tmp_path):
    """A GEMM table on a lattice of M, K, N, latency linear in all three: every row the others
    bracket is predicted exactly (1-D along M first, else K, else N); the lattice's corners
    (every axis at an end) are not predicted: no extrapolation."""
    ms, ks, ns = (1, 2, 4, 8, 16, 32), (128, 512, 2048), (256, 1024, 4096)

    def latency(m, k, n):
        return 3.0 + 0.5 * m + 0.01 * k + 0.002 * n

    rows = [gemm_row(m, n, k, latency(m, k, n)) for m in ms for k in ks for n in ns]
    kernel = read_points(database(tmp_path, {"MatMulV2": rows})).kernels["MatMulV2"]
    result = leave_one_out(kernel)
    assert result.stats.max == pytest.approx(0.0, abs=1e-12)
    assert result.unpredictable == 2 * 2 * 2
    assert {h.axes_label for h in result.holdouts} == {"M", "K", "N"}
    assert sum(h.axes_label == "M" for h in result.holdouts) == 4 * 3 * 3  # interior Ms


def test_no_extrapolation_and_exact_duplicates():
    coords, values = [(1,), (2,), (4,), (8,)], [1.0, 2.0, 3.0, 10.0]
    interpolator = Interpolator(_family(("m",)), _points(coords, values, ("m",)))
    first, last = interpolator.points[0], interpolator.points[-1]
    assert interpolator.estimate(first.query, exclude=first) is None
    assert interpolator.estimate(last.query, exclude=last) is None
    middle = interpolator.points[2]  # 4 between 2 and 8
    estimate = interpolator.estimate(middle.query, exclude=middle)
    assert estimate.value == pytest.approx(2.0 + (4 - 2) / (8 - 2) * 8.0)
    twins = Interpolator(_family(("m",)), _points([(2,), (2,), (2,)], [3.0, 5.0, 9.0], ("m",)))
    held = twins.points[0]  # the other two at its very coordinate: their median
    assert twins.estimate(held.query, exclude=held).value == 7.0


def test_latency_sources_are_never_mixed():
    """A row measured by a replay and one whose latency came from a profiling column do not
    bracket a target together (the simulator interpolates within one source)."""
    points = (_points([(1,)], [1.0], ("m",)) + _points([(4,)], [4.0], ("m",), kind=ALTERNATE))
    interpolator = Interpolator(_family(("m",)), points)
    assert interpolator.estimate(Query("K", ("bucket",), {"m": 2.0})) is None
    same = Interpolator(_family(("m",)), _points([(1,), (4,)], [1.0, 4.0], ("m",)))
    assert same.estimate(Query("K", ("bucket",), {"m": 2.0})).value == pytest.approx(2.0)


def test_max_interpolation_dim_from_the_databases_policy():
    coords = [(0, 0), (10, 0), (0, 10), (10, 10)]
    points = _points(coords, [1, 2, 3, 4], ("a", "b"))
    target = Query("K", ("bucket",), {"a": 5.0, "b": 5.0})
    assert Interpolator(_family(("a", "b")), points).estimate(target).value == pytest.approx(2.5)
    assert Interpolator(_family(("a", "b"), max_dim=1), points).estimate(target) is None


def test_attention_sequence_on_its_square_root(tmp_path):
    """FusedInferAttentionScore under `axis_transform: sqrt_seq` (what npuperf's generated
    op_mapping.yaml and the reference one say): latency linear in sqrt(seq) is predicted
    exactly, and the 2-D step (seq, batch) equals griddata on (sqrt(seq), batch)."""
    seqs, batches = (64, 256, 576, 1024, 4096), (1, 4, 16)
    rows = [attention_row(16, 8, 128, s, b, 2.0 + 3.0 * math.sqrt(s) + 0.5 * b)
            for s in seqs for b in batches]
    directory = database(tmp_path, {"FusedInferAttentionScore": rows})
    plain = read_points(directory).kernels["FusedInferAttentionScore"]
    linear = leave_one_out(plain)
    assert linear.stats.max > 0.01  # linear in seq, the square root is not
    (directory / "op_mapping.yaml").write_text(
        "interpolation_policy:\n  kernel_overrides:\n    FusedInferAttentionScore:\n"
        "      axis_transform: sqrt_seq\n")
    kernel = read_points(directory).kernels["FusedInferAttentionScore"]
    assert kernel.family.axis("seq").sqrt
    result = leave_one_out(kernel)
    assert result.stats.max == pytest.approx(0.0, abs=1e-12)
    by_axes = result.by_axes()
    assert by_axes["seq"].count == 3 * 3  # interior sequence lengths, per batch
    # a held-out row whose line along seq and along batch are both gone: the 2-D step
    points = [p for p in kernel.points if not (p.query.axes["seq"] == 1024
                                              or p.query.axes["batch"] == 4)]
    target = next(p for p in kernel.points
                  if p.query.axes["seq"] == 1024 and p.query.axes["batch"] == 4)
    estimate = Interpolator(kernel.family, points).estimate(target.query)
    assert estimate.method == "griddata_linear" and estimate.axes == ("seq", "batch")
    coords = [(math.sqrt(p.query.axes["seq"]), p.query.axes["batch"]) for p in points]
    expected = _griddata(coords, [p.latency for p in points], (32.0, 4.0))
    assert estimate.value == pytest.approx(expected, rel=1e-9)


def test_rows_whose_removal_costs_most_and_per_axis_figures(tmp_path):
    ms = (1, 2, 4, 8, 16, 32, 64, 128)
    curve = {m: 10.0 + m for m in ms}
    curve[16] = 60.0  # a bump: the held-out 16 and its neighbours are mispredicted
    rows = [gemm_row(m, 512, 7168, curve[m]) for m in ms]
    result = leave_one_out(read_points(database(tmp_path, {"MatMulV2": rows}))
                           .kernels["MatMulV2"])
    expected = {}  # each interior M from its neighbours, with numpy
    for i in range(1, len(ms) - 1):
        rest = [m for m in ms if m != ms[i]]
        predicted = np.interp(ms[i], rest, [curve[m] for m in rest])
        expected[ms[i]] = abs(predicted - curve[ms[i]]) / curve[ms[i]]
    worst = result.worst(3)
    assert [h.point.query.axes["M"] for h in worst] == sorted(expected, key=expected.get,
                                                              reverse=True)[:3]
    assert {h.point.query.axes["M"]: h.error for h in result.holdouts} == pytest.approx(expected)
    assert {h.point.query.axes["M"] for h in worst[:2]} == {8, 16}  # either side of the bump
    assert worst[1].neighbours("M") == (8, 32)
    stats = result.stats
    assert stats.count == len(ms) - 2 and result.unpredictable == 2
    assert stats.over_50 == sum(h.error > 0.5 for h in result.holdouts)
    assert stats.p90 == pytest.approx(np.percentile([h.error for h in result.holdouts], 90))
    assert list(result.by_axes()) == ["M"]


def test_families_read_from_the_op_mapping():
    doc = {"operator_mappings": {"aten.add.Tensor": {"kernel_type": "Add",
                                                     "query_mode": "elementwise"},
                                 "profiling.Add": {"kernel_type": "Add"}},
           "interpolation_policy": {"kernel_overrides": {
               "MatMulV2": {"max_interpolation_dim": 1},
               "GatherV2": {"generic_compute": {"axis": "output_numel"}}}}}
    policies = Policies.from_op_mapping(doc)
    assert family_of("Add", policies.of("Add")).name == "elementwise"
    assert family_of("MatMulV2", policies.of("MatMulV2")).max_dim == 1
    assert family_of("GatherV2", policies.of("GatherV2")).axes[0].name == "output_numel"
    assert family_of("RmsNorm", policies.of("RmsNorm")).axes[0].name == "axis_0"
    assert family_of("SparseFlashAttention", policies.of("X")).name == "runtime_attention"
