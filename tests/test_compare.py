"""The regression verdict: Mann-Whitney U against the exact permutation distribution, and the
rule that turns it (with the minimum effect) into SLOWER / FASTER / SAME / UNCERTAIN."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pytest_npuperf.history.compare import (
    FASTER,
    NEW,
    SAME,
    SLOWER,
    UNCERTAIN,
    Comparison,
    Probes,
    RunShift,
    compare_many,
    compare_samples,
    mann_whitney,
)
from pytest_npuperf.history.spread import FULL_RUNS, Spread, combine


def exact_two_sided_p(a: list[float], b: list[float]) -> float:
    """The permutation p-value of U: every split of the pooled values into |a| and |b|."""
    pooled = a + b
    observed = mann_whitney(a, b).u
    mean = len(a) * len(b) / 2
    extreme = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        picked = set(chosen)
        x = [pooled[i] for i in chosen]
        y = [pooled[i] for i in range(len(pooled)) if i not in picked]
        u = sum((xi > yi) + 0.5 * (xi == yi) for xi in x for yi in y)
        total += 1
        extreme += abs(u - mean) >= abs(observed - mean) - 1e-9
    return extreme / total


@pytest.mark.parametrize("shift", [0.0, 0.3, 0.8, 1.5])
def test_mann_whitney_matches_the_exact_test_on_small_samples(shift):
    rng = np.random.default_rng(7)
    a = list(np.round(rng.lognormal(0.0, 0.3, 6) + shift, 1))  # rounded: ties included
    b = list(np.round(rng.lognormal(0.0, 0.3, 7), 1))
    approx = mann_whitney(a, b).p_value
    exact = exact_two_sided_p(a, b)
    assert approx == pytest.approx(exact, abs=0.03 + 0.2 * exact)


def test_u_counts_pairs_and_ties_and_is_symmetric():
    test = mann_whitney([1, 2, 3], [2, 4])
    assert test.u == 1.5  # 3 > 2 (one), 2 = 2 (a half); 1, 2, 3 < 4
    other = mann_whitney([2, 4], [1, 2, 3])
    assert test.u + other.u == 6 and test.p_value == pytest.approx(other.p_value)
    assert mann_whitney([5.0] * 4, [5.0] * 6).p_value == 1.0  # all tied: no evidence


def samples(median: float, n: int = 60, spread: float = 0.01, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return median * (1 + spread * rng.standard_normal(n))


# A case whose recent good runs held within 1 %: its change is judged by the minimum effect.
QUIET = Spread(0.01, 5, own=0.01)


def test_a_real_slowdown_is_slower_and_a_speedup_faster():
    base = samples(10.0, seed=1)
    slow = compare_samples(base, samples(15.0, seed=2), spread=QUIET)
    assert slow.verdict == SLOWER and slow.ratio == pytest.approx(1.5, rel=0.02)
    assert slow.p_value < 1e-10 and "1.5" in slow.describe()
    assert "session-to-session spread 1 % over 5 good run(s)" in slow.describe()
    assert compare_samples(base, samples(8.0, seed=3), spread=QUIET).verdict == FASTER


def test_the_samples_of_one_session_alone_do_not_decide():
    """p = 1e-58 between two sessions of the same build: without the case's spread from
    night to night, a change is UNCERTAIN, never SLOWER."""
    base = samples(10.0, seed=1)
    unknown = compare_samples(base, samples(15.0, seed=2))
    assert unknown.verdict == UNCERTAIN and unknown.p_value < 1e-10
    assert "no session-to-session spread known" in unknown.reason
    assert "samples of one session alone do not decide" in unknown.reason
    assert compare_samples(base, samples(10.1, seed=2)).verdict == SAME  # within the effect


def test_a_significant_but_small_change_is_same():
    base, new = samples(10.0, 200, 0.005, 1), samples(10.2, 200, 0.005, 2)
    result = compare_samples(base, new, spread=QUIET)
    assert result.p_value < 1e-6 and result.verdict == SAME  # 2 % < the 5 % minimum effect


def test_uncertain_when_the_samples_cannot_tell():
    few = compare_samples([10.0, 10.1], [15.0, 15.2], spread=QUIET)
    assert few.verdict == UNCERTAIN and "fewer than" in few.reason
    wide = samples(10.0, 20, 0.4, 1)
    spread = compare_samples(wide, wide * 1.02, spread=QUIET)
    assert spread.verdict == UNCERTAIN and "wider than" in spread.reason
    flagged = compare_samples(samples(10.0), samples(15.0, seed=2), new_status="noisy",
                              spread=QUIET)
    assert flagged.verdict == UNCERTAIN and "this run noisy" in flagged.reason
    weak = compare_samples(samples(10.0, 12, 0.5, 1), samples(13.0, 12, 0.5, 2), spread=QUIET)
    assert weak.verdict == UNCERTAIN


def test_no_baseline_samples_is_new():
    assert compare_samples([], samples(10.0)).verdict == NEW


def test_the_minimum_effect_is_the_threshold_or_three_times_the_cases_spread():
    base, new = samples(10.0, seed=1), samples(11.0, seed=2)  # +10 %
    assert compare_samples(base, new, threshold=0.05, spread=QUIET).verdict == SLOWER
    assert compare_samples(base, new, threshold=0.2, spread=QUIET).verdict == SAME
    # The case moved 15 % between its own recent good runs: a 10 % change, or a 30 % one,
    # is no evidence either way (UNCERTAIN, with the reason); a 2 % one is SAME.
    moving = Spread(0.15, 5, own=0.15)
    for change in (11.0, 13.0):
        within = compare_samples(base, samples(change, seed=2), spread=moving)
        assert within.verdict == UNCERTAIN and within.threshold == pytest.approx(1.15 ** 3 - 1)
        assert "its 5 recent good runs spread 15.0 %" in within.reason
        assert "within 3x that" in within.reason
    assert compare_samples(base, samples(16.0, seed=2), spread=moving).verdict == SLOWER
    assert compare_samples(base, samples(10.2, seed=2), spread=moving).verdict == SAME
    with pytest.raises(ValueError):
        compare_samples(base, new, threshold=-0.1)


def test_a_few_runs_spread_at_least_as_the_hosts_cases_do():
    base, new = samples(10.0, seed=1), samples(11.5, seed=2)
    few = combine(0.005, 2, 0.06)  # two runs 0.5 % apart, the host's cases 6 % typically
    assert few.value == 0.06 and few.own == 0.005
    verdict = compare_samples(base, new, spread=few)
    assert verdict.verdict == UNCERTAIN and "taken as the host's typical 6.0 %" in verdict.reason
    assert combine(0.005, FULL_RUNS, 0.06).value == 0.005  # enough runs: the case's own
    assert combine(None, 1, 0.06) is None  # one good run: no spread of its own


def test_a_host_that_slowed_down_as_much_as_the_case_gives_no_verdict():
    base, new = samples(10.0, seed=1), samples(15.0, seed=2)
    busy = compare_samples(base, new, base_reference=40.0, new_reference=60.0, spread=QUIET)
    assert busy.verdict == UNCERTAIN and "reference loop ran 1.50x" in busy.reason
    # A change beyond what the host's own change explains stands, net of it; so does one
    # against it.
    beyond = compare_samples(base, samples(25.0, seed=2), base_reference=40.0,
                             new_reference=60.0, spread=QUIET)
    assert beyond.verdict == SLOWER and "net of it 1.66" in beyond.reason
    assert compare_samples(base, new, base_reference=60.0, new_reference=40.0,
                           spread=QUIET).verdict == SLOWER
    assert compare_samples(base, new, base_reference=40.0, new_reference=41.0,
                           spread=QUIET).verdict == SLOWER


def test_the_memory_probe_holds_a_memory_bound_case_uncertain_when_it_moved():
    """Small-M BF16 GEMMs stream their weights from memory: co-tenants' memory traffic slows
    them 1.4x while the compute loop does not move. The memory copy moved with them."""
    base, new = samples(10.0, seed=1), samples(14.0, seed=2)
    moved = Probes(base_loop=40.0, new_loop=40.5, base_memory=5000.0, new_memory=7000.0,
                   bound_by="memory")
    held = compare_samples(base, new, probes=moved, spread=QUIET)
    assert held.verdict == UNCERTAIN
    assert "the host's memory copy ran 1.40x as long as during the baseline, which accounts " \
           "for the change" in held.reason
    # A compute-bound case is judged against the loop, which did not move.
    compute = Probes(40.0, 40.5, 5000.0, 7000.0, bound_by="compute")
    assert compare_samples(base, new, probes=compute, spread=QUIET).verdict == SLOWER
    # Unknown bound: either probe's move counts; an unmoved host changes nothing.
    assert compare_samples(base, new, probes=Probes(40.0, 40.5, 5000.0, 7000.0),
                           spread=QUIET).verdict == UNCERTAIN
    still = Probes(40.0, 40.5, 5000.0, 5100.0, bound_by="memory")
    assert compare_samples(base, new, probes=still, spread=QUIET).verdict == SLOWER


def test_a_whole_run_that_moved_is_the_hosts_move_not_each_kernels():
    base = samples(10.0, seed=1)
    shifted = compare_samples(base, samples(13.2, seed=2), run_shift=(1.3, 40), spread=QUIET)
    assert shifted.verdict == UNCERTAIN and "the whole run moved: median ratio 1.300x over " \
        "the 40 case(s) of other kernel types judged before it" in shifted.reason
    # Beyond the run's move, a kernel's own change stands; too few cases say nothing.
    assert compare_samples(base, samples(20.0, seed=2), run_shift=(1.3, 40),
                           spread=QUIET).verdict == SLOWER
    assert compare_samples(base, samples(13.2, seed=2), run_shift=(1.3, 4),
                           spread=QUIET).verdict == SLOWER
    tracker = RunShift()
    for ratio in (1.3, 1.28, 1.31, 1.33, 1.29):
        assert tracker.now() is None
        tracker.add(Comparison(SAME, ratio=ratio))
    tracker.add(Comparison(UNCERTAIN, ratio=3.0, reason="measurement flagged (this run noisy)"))
    assert tracker.now() == (1.3, 5)


def test_a_kernel_type_that_moved_alone_is_not_the_runs_move():
    """A case is held against the move of the other kernel types: a slowed kernel type judged
    first (its every shape 1.3x) is not the host's move, and its cases stay SLOWER; the host's
    move is what the other types show."""
    tracker = RunShift()
    for ratio in (1.3, 1.28, 1.31, 1.33, 1.29, 1.3):
        tracker.add(Comparison(SLOWER, ratio=ratio), "MatMulV2")
    assert tracker.now("MatMulV2") is None
    assert tracker.now("MatMulV3") == (1.3, 6)
    base = samples(10.0, seed=1)
    assert compare_samples(base, samples(13.2, seed=2), run_shift=tracker.now("MatMulV2"),
                           spread=QUIET).verdict == SLOWER
    for ratio in (1.0, 1.01, 0.99, 1.0, 1.02):
        tracker.add(Comparison(SAME, ratio=ratio), "MatMulV3")
    assert tracker.now("MatMulV2") == (1.0, 5)
    assert tracker.now() == (1.28, 11)


def test_a_host_that_sped_up_as_much_as_a_slowdown_gives_no_verdict():
    # The case ran 9 % longer while the host ran its loop in 0.7x the time: net of the host a
    # 1.56x slowdown, which a SAME would hide (a CI flake: an injected 1.5x read as 1.09x).
    base, new = samples(10.0, seed=1), samples(10.9, seed=2)
    masked = compare_samples(base, new, threshold=0.15, base_reference=40.0, new_reference=28.0,
                             spread=QUIET)
    assert masked.verdict == UNCERTAIN
    assert "reference loop ran 0.70x" in masked.reason and "could hide a change of 1.56x" \
        in masked.reason
    # Within the tolerance, or net of the host still within the threshold: SAME.
    assert compare_samples(base, new, threshold=0.15, base_reference=40.0,
                           new_reference=37.0, spread=QUIET).verdict == SAME
    assert compare_samples(base, samples(10.2, seed=2), threshold=0.15, base_reference=40.0,
                           new_reference=36.0, spread=QUIET).verdict == SAME
    # A host that slowed down can hide a speed-up the same way.
    hidden = compare_samples(base, samples(9.5, seed=2), threshold=0.15, base_reference=40.0,
                             new_reference=60.0, spread=QUIET)
    assert hidden.verdict == UNCERTAIN and "could hide a change of 0.63x" in hidden.reason


def test_severity_orders_both_directions():
    slow = compare_samples(samples(10.0), samples(20.0, seed=2), spread=QUIET)
    fast = compare_samples(samples(10.0), samples(4.0, seed=2), spread=QUIET)
    assert fast.severity > slow.severity > 1
    assert math.isclose(compare_samples([], [1.0] * 10).severity, 1.0)


def _pairs(seed: int) -> list:
    """Sample pairs like a large run's: timer-rounded values (ties), sizes from none to 200,
    invalid samples (0, NaN, inf), every status and host-reference combination."""
    rng = np.random.default_rng(seed)
    pairs = []
    for index in range(600):
        sizes = rng.choice([0, 1, 2, 3, 4, 5, 8, 9, 40, 200], size=2)
        center = float(rng.choice([0.8, 10.0, 1e3]))
        shift = float(rng.choice([1.0, 1.02, 1.1, 1.5, 0.7]))
        step = float(rng.choice([0.0, 0.001, 0.125]))  # 0: continuous; else a timer's ticks
        def draw(n, scale, step=step):
            values = scale * (1 + rng.normal(0, 0.03, n))
            return (np.round(values / step) * step if step else values).tolist()
        base, new = draw(sizes[0], center), draw(sizes[1], center * shift)
        if index % 17 == 0 and base:
            base[0] = [0.0, math.nan, math.inf, -1.0][index % 4]
        options = {"threshold": float(rng.choice([0.0, 0.05, 0.2]))}
        if index % 2 == 0:  # most cases judged have a spread in the history
            options["spread"] = combine(float(rng.choice([0.005, 0.03, 0.3])),
                                        int(rng.choice([2, FULL_RUNS])), 0.04)
        if index % 5 == 0:
            options["base_status"], options["new_status"] = "ok", "noisy"
        if index % 7 == 0:
            options["base_reference"] = 10.0
            options["new_reference"] = float(rng.choice([10.0, 12.0, 8.0]))
        if index % 11 == 0:
            options["probes"] = Probes(10.0, 10.0, 100.0, float(rng.choice([100.0, 130.0])),
                                       str(rng.choice(["memory", "compute", ""])))
        if index % 13 == 0:
            options["run_shift"] = (float(rng.choice([1.0, 1.3, 0.8])), int(rng.choice([3, 40])))
        options["base_run"] = f"run{index % 4}"
        pairs.append((base, new, options))
    return pairs


@pytest.mark.parametrize("seed", [0, 1])
def test_verdicts_in_bulk_are_those_of_one_pair_at_a_time_to_the_last_bit(seed):
    pairs = _pairs(seed)
    one_by_one = [compare_samples(base, new, **options) for base, new, options in pairs]
    assert compare_many(pairs) == one_by_one
    assert {c.verdict for c in one_by_one} >= {NEW, UNCERTAIN, SAME, SLOWER, FASTER}


def test_a_host_that_moved_more_than_the_case_accounts_for_all_of_it():
    # The host's loop ran 1.40x as long, the case 1.31x: net of the host the case went the
    # other way (0.94x); the host's move accounts for the change, it is no SLOWER.
    base, new = samples(10.0, seed=1), samples(13.1, seed=2)
    moved = compare_samples(base, new, base_reference=40.0, new_reference=56.0, spread=QUIET)
    assert moved.verdict == UNCERTAIN and "accounts for the change (net of it 0.94x)" \
        in moved.reason


def test_a_case_that_ran_beside_a_co_tenant_is_no_change():
    """Other processes preempted 12 % of its samples: the kept ones ran beside the co-tenant
    too (its memory traffic is no preemption), so a 1.3x change is UNCERTAIN; 5 % preempted
    (a quiet host loses up to 7 %) leaves the verdict as it was."""
    from pytest_npuperf.history.baseline import co_tenant_share

    base, new = samples(10.0, seed=1), samples(13.0, seed=2)
    busy = compare_samples(base, new, spread=QUIET, co_tenant=co_tenant_share(12, 88))
    assert busy.verdict == UNCERTAIN and "preempted 12 % of its samples" in busy.reason
    assert compare_samples(base, new, spread=QUIET, co_tenant=0.05).verdict == SLOWER
    assert compare_samples(base, samples(10.02, seed=2), spread=QUIET,
                           co_tenant=0.5).verdict == SAME
    assert co_tenant_share(None, 0) == 0.0 and co_tenant_share(0, 10) == 0.0
