"""Diagnostics: rank correlations with ties done right, and bias measures that find the bias they measure."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentic_rl_lab.judge import ReferenceJudge
from agentic_rl_lab.judge import diagnostics as d
from agentic_rl_lab.judge.base import position_consistency


def test_ranks_share_ties() -> None:
    assert d.ranks([10, 20, 20, 5]) == [2, 3.5, 3.5, 1]


def test_spearman_matches_the_textbook_formula_without_ties_and_handles_ties() -> None:
    x, y = [1, 2, 3, 4, 5], [2, 1, 4, 3, 5]
    squared = sum((a - b) ** 2 for a, b in zip(d.ranks(x), d.ranks(y)))
    assert d.spearman(x, y) == pytest.approx(1 - 6 * squared / (5 * (5**2 - 1)))  # 0.8
    assert d.spearman([1, 2, 3], [10, 20, 30]) == d.spearman([1, 2, 3], [1, 8, 27]) == pytest.approx(1.0)
    assert d.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # ties: Pearson on mean ranks [1, 2.5, 2.5, 4] against [1, 2, 3, 4]
    assert d.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert math.isnan(d.spearman([1, 1, 1], [1, 2, 3])), "undefined when one side is constant"


def test_kendall_tau_b_counts_pairs_and_corrects_for_ties() -> None:
    assert d.kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)  # 5 concordant, 1 discordant
    assert d.kendall_tau([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8)  # 4 / sqrt(5 * 5)
    assert d.kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(d.kendall_tau([2, 2], [1, 2]))


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=12))
def test_correlations_are_bounded_and_symmetric(pairs) -> None:
    x, y = [a for a, _ in pairs], [b for _, b in pairs]
    for measure in (d.spearman, d.kendall_tau):
        value = measure(x, y)
        assert math.isnan(value) or (-1 - 1e-9 <= value <= 1 + 1e-9)
        assert (math.isnan(value) and math.isnan(measure(y, x))) or value == pytest.approx(measure(y, x))


def test_pairwise_accuracy_skips_tied_truth_and_half_counts_judge_ties() -> None:
    truth = [0.0, 0.5, 1.0, 1.0]
    assert d.pairwise_accuracy([0.1, 0.2, 0.9, 0.3], truth) == 1.0  # the tied truth pair is not counted
    assert d.pairwise_accuracy([0.3, 0.2, 0.9, 0.9], truth) == pytest.approx(4 / 5)
    assert d.pairwise_accuracy([0.5, 0.5, 0.5, 0.5], truth) == 0.5, "a judge that always ties is a coin"
    assert math.isnan(d.pairwise_accuracy([1, 2], [0, 0]))


def test_a_perfect_judge_agrees_perfectly_and_a_reversed_one_perfectly_disagrees(groups) -> None:
    perfect = ReferenceJudge().score_groups([g.model_copy(deep=True) for g in groups], progress=False)
    agreement = d.agreement(perfect)
    assert (agreement["spearman"], agreement["kendall_tau"], agreement["pairwise_accuracy"]) == (1.0, 1.0, 1.0)
    assert agreement["groups"] == 4 and agreement["pairs"] > 30
    for group in groups:
        for t in group.trajectories:
            t.reward = 1 - t.outcome.score
    reversed_ = d.agreement(groups)
    assert reversed_["spearman"] == pytest.approx(-1) and reversed_["pairwise_accuracy"] == 0.0


def test_position_and_length_diagnostics_find_the_biases_the_reference_judge_was_given(groups) -> None:
    def judged(**knobs):
        return ReferenceJudge(**knobs).score_groups([g.model_copy(deep=True) for g in groups * 5], progress=False)

    fair, primacy, verbose = judged(noise=0.05), judged(noise=0.05, position_bias=0.2), judged(length_bias=0.2)
    assert abs(d.position_bias(fair)["first_minus_last"]) < 0.1
    assert d.position_bias(primacy)["first_minus_last"] > 0.25 and d.position_bias(primacy)["spearman"] < -0.3
    assert d.position_bias(primacy)["by_position"][0] > 0 > d.position_bias(primacy)["by_position"][4]
    assert d.length_bias(verbose)["vs_error"] > 0.8
    assert abs(d.length_bias(fair)["vs_error"]) < 0.3
    assert set(d.report(fair)) >= {"spearman", "kendall_tau", "pairwise_accuracy", "position_first_minus_last"}


def test_consistency_compares_two_judges_on_the_same_groups(groups) -> None:
    a = ReferenceJudge().score_groups([g.model_copy(deep=True) for g in groups], progress=False)
    b = ReferenceJudge(noise=0.01, seed=5).score_groups([g.model_copy(deep=True) for g in groups], progress=False)
    same = d.consistency(a, a)
    assert same["spearman"] == 1.0 and same["pairwise_agreement"] == 1.0
    assert 0.5 < d.consistency(a, b)["spearman"] <= 1.0
    with pytest.raises(ValueError, match="judge copies of the same groups"):
        d.consistency(a, list(reversed(b)))


def test_position_consistency_counts_pairs_ordered_alike_in_every_permutation() -> None:
    assert position_consistency([[0.9, 0.8], [0.1, 0.2], [0.5, 0.5]]) == 1.0
    assert position_consistency([[0.9, 0.1], [0.1, 0.9], [0.5, 0.5]]) == pytest.approx(0.0)
    assert position_consistency([[0.9, 0.9], [0.1, 0.1]]) == 1.0
    assert position_consistency([[0.5], [0.4]]) is None, "one permutation: nothing to compare"
