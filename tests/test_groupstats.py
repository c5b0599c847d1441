"""Vectorised per-case statistics equal the single-case functions the other methods use."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_npuperf.db.upsert import format_number, format_numbers
from pytest_npuperf.measure.groupstats import (
    group_means,
    group_precision,
    group_stats,
    noise_reasons,
)
from pytest_npuperf.measure.noise import noise_reason
from pytest_npuperf.measure.stats import StdConvention, relative_precision, summarize

samples = st.lists(st.floats(0.5, 5000, allow_nan=False), min_size=1, max_size=40)


@given(st.lists(samples, min_size=1, max_size=8), st.sampled_from(["median", "mean"]))
def test_each_group_matches_summarize_precision_and_noise(groups, statistic):
    group = np.concatenate([np.full(len(g), i) for i, g in enumerate(groups)])
    values = np.concatenate([np.asarray(g) for g in groups])
    shuffle = np.random.default_rng(0).permutation(len(values))  # input order must not matter
    group, values = group[shuffle], values[shuffle]
    stats = group_stats(group, values, len(groups) + 1)  # one empty group at the end
    precision = group_precision(group, values, len(groups) + 1, stats, statistic)
    # Other arrays than the statistics were made of: sorted again, the same figures.
    again = group_precision(group.copy(), values.copy(), len(groups) + 1, stats, statistic)
    np.testing.assert_array_equal(again, precision)
    reasons = noise_reasons(stats)
    for i, g in enumerate(groups):
        got, want = stats.sample_stats(i).to_dict(), summarize(g).to_dict()
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
        expected = relative_precision(g, statistic)
        assert precision[i] == pytest.approx(expected, rel=1e-9) if math.isfinite(expected) \
            else math.isinf(precision[i])
        assert reasons.get(i) == noise_reason(g)
    assert stats.sample_stats(len(groups)) is None


@given(st.lists(st.floats(0.5, 5000, allow_nan=False), min_size=2, max_size=40))
def test_the_record_holds_the_std_it_names(values):
    group = np.zeros(len(values), np.int64)
    for convention, expected in ((StdConvention.POPULATION, statistics.pstdev),
                                 (StdConvention.SAMPLE, statistics.stdev)):
        stats = group_stats(group, values, 1, std=convention)
        assert stats.std_convention is convention
        assert stats.std[0] == pytest.approx(expected(values), rel=1e-9, abs=1e-9)
    assert group_stats(group, values, 1).std_convention is StdConvention.SAMPLE


def test_a_population_std_is_never_read_as_a_sample_std():
    group, values = np.zeros(3, np.int64), np.array([1.0, 2.0, 4.0])
    stats = group_stats(group, values, 1, std=StdConvention.POPULATION)
    with pytest.raises(ValueError, match="sample std"):
        stats.sample_stats(0)
    with pytest.raises(ValueError, match="sample std"):
        group_precision(group, values, 1, stats, "mean")
    # The median's interval comes from order statistics: no std in it.
    assert group_precision(group, values, 1, stats, "median")[0] == \
        pytest.approx(relative_precision(values, "median"))


def test_counter_means_skip_missing_values_per_column():
    matrix = np.array([[1.0, np.nan], [3.0, np.nan], [5.0, 2.0]])
    means = group_means(np.array([0, 0, 1]), matrix, 3)
    assert means[0].tolist()[0] == 2.0 and math.isnan(means[0][1])
    assert means[1].tolist() == [5.0, 2.0]
    assert np.isnan(means[2]).all()
    # The same over chosen rows of a larger, column-major matrix (the kernel table's).
    table = np.asfortranarray(np.vstack([[9.0, 9.0], matrix, [7.0, 7.0]]))
    picked = group_means(np.array([0, 0, 1]), table, 3, rows=np.array([1, 2, 3]))
    np.testing.assert_array_equal(picked, means)


@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                          st.integers(-10**12, 10**12)), max_size=30))
def test_bulk_number_formatting_equals_the_single_formatter(values):
    assert format_numbers(values) == [format_number(v) for v in values]
