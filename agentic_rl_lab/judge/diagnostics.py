"""Is the judge any good? Agreement with ground truth, position bias, length bias, and agreement between judges.

Every comparison is made *within* groups, because that is all GRPO uses: a trajectory's advantage depends on how
its reward compares with its group's. A judge that ranks every group perfectly is perfect for GRPO even if its
scores run 0.2 above the truth.

- **Spearman's rho**: the correlation of the two rankings, corr(rank(x), rank(y)).
- **Kendall's tau-b**: (C - D) / sqrt((C + D + Tx)(C + D + Ty)) over all pairs: concordant minus discordant
  pairs, corrected for ties (Tx: pairs tied in x only, Ty: in y only).
- **Pairwise accuracy**: of the pairs whose ground truth differs, the fraction the judge orders the same way (a
  tie from the judge counts one half). 0.5 is a coin; 1.0 is perfect.

The correlations are written out here in a few lines, ties handled, rather than taken from scipy (which the lab
does not otherwise need). An undefined correlation (a group whose truth or scores are all equal) is NaN and left
out of the averages; the `groups` and `pairs` counts say how many went in.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from agentic_rl_lab.judge.base import JudgeRecord
from agentic_rl_lab.judge.prompt import transcript_length
from agentic_rl_lab.trajectory import TrajectoryGroup

NAN = float("nan")


# ----- correlations on two lists -----------------------------------------------------------------------------------
def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks; tied values share the mean of the ranks they span (`[10, 20, 20] -> [1, 2.5, 2.5]`)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            result[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return result


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's correlation; NaN when either side is constant or there are fewer than two points."""
    if len(x) != len(y):
        raise ValueError(f"need two sequences of one length, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return NAN
    mean_x, mean_y = statistics.fmean(x), statistics.fmean(y)
    dx = [a - mean_x for a in x]
    dy = [b - mean_y for b in y]
    norm = math.sqrt(sum(a * a for a in dx) * sum(b * b for b in dy))
    return NAN if norm == 0 else sum(a * b for a, b in zip(dx, dy)) / norm


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ: Pearson's correlation of the ranks (ties get mean ranks)."""
    return pearson(ranks(x), ranks(y))


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's τ_b over all pairs, with the tie correction; NaN when either side is constant."""
    if len(x) != len(y):
        raise ValueError(f"need two sequences of one length, got {len(x)} and {len(y)}")
    concordant = discordant = tied_x_only = tied_y_only = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        sx, sy = _sign(x[i] - x[j]), _sign(y[i] - y[j])
        if sx == 0 and sy == 0:
            continue
        if sx == 0:
            tied_x_only += 1
        elif sy == 0:
            tied_y_only += 1
        elif sx == sy:
            concordant += 1
        else:
            discordant += 1
    norm = math.sqrt((concordant + discordant + tied_x_only) * (concordant + discordant + tied_y_only))
    return NAN if norm == 0 else (concordant - discordant) / norm


def pairwise_accuracy(scores: Sequence[float], truth: Sequence[float]) -> float:
    """Of the pairs whose truth differs, the fraction `scores` orders the same way (a tied score counts 1/2)."""
    correct, pairs = _pairwise_counts(scores, truth)
    return correct / pairs if pairs else NAN


def _pairwise_counts(scores: Sequence[float], truth: Sequence[float]) -> tuple[float, int]:
    correct, pairs = 0.0, 0
    for i, j in itertools.combinations(range(len(truth)), 2):
        true_order = _sign(truth[i] - truth[j])
        if true_order == 0:
            continue
        pairs += 1
        judged = _sign(scores[i] - scores[j])
        correct += 1.0 if judged == true_order else 0.5 if judged == 0 else 0.0
    return correct, pairs


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _mean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.fmean(kept) if kept else NAN


# ----- a judge against ground truth, over groups ---------------------------------------------------------------------
def _scored(group: TrajectoryGroup) -> tuple[list[float], list[float], list[int]]:
    """(rewards, ground-truth scores, indices) of the trajectories that have both."""
    rewards, truth, members = [], [], []
    for index, trajectory in enumerate(group.trajectories):
        if trajectory.reward is not None and trajectory.outcome is not None:
            rewards.append(trajectory.reward)
            truth.append(trajectory.outcome.score)
            members.append(index)
    return rewards, truth, members


def agreement(groups: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """How well the rewards on `groups` agree with the ground truth (`outcome.score`), within each group.

    `spearman` and `kendall_tau` are means over the groups where they are defined; `pairwise_accuracy` is pooled
    over every within-group pair whose truth differs.
    """
    rhos, taus, correct, pairs, used = [], [], 0.0, 0, 0
    for group in groups:
        rewards, truth, _ = _scored(group)
        if len(rewards) < 2:
            continue
        used += 1
        rhos.append(spearman(rewards, truth))
        taus.append(kendall_tau(rewards, truth))
        group_correct, group_pairs = _pairwise_counts(rewards, truth)
        correct, pairs = correct + group_correct, pairs + group_pairs
    return {
        "spearman": _mean(rhos),
        "kendall_tau": _mean(taus),
        "pairwise_accuracy": correct / pairs if pairs else NAN,
        "groups": used,
        "pairs": pairs,
    }


def position_bias(groups: Sequence[TrajectoryGroup]) -> dict[str, Any]:
    """Does the score depend on where a trajectory was shown? Read from the judge records on `groups`.

    In every call that showed two or more trajectories, each score is centred on that call's mean score. Positions
    are shuffled, so for an unbiased judge the centred score averages to 0 at every position.

    - `by_position`: mean centred score at each position (0 = shown first).
    - `first_minus_last`: mean of (centred score of the first shown - that of the last shown), per call.
    - `spearman`: pooled correlation of position (as a fraction of the way down the list) with centred score.
    """
    by_position: dict[int, list[float]] = defaultdict(list)
    fractions, centred_all, first_minus_last = [], [], []
    for group in groups:
        record = JudgeRecord.of(group)
        if record is None or record.skipped is not None:
            continue
        for call in record.calls:
            if len(call.order) < 2 or len(call.scores) != len(call.order):
                continue
            mean = statistics.fmean(call.scores.values())
            centred = [call.scores[id_] - mean for id_ in call.order]
            for position, value in enumerate(centred):
                by_position[position].append(value)
                fractions.append(position / (len(centred) - 1))
                centred_all.append(value)
            first_minus_last.append(centred[0] - centred[-1])
    return {
        "first_minus_last": _mean(first_minus_last),
        "spearman": spearman(fractions, centred_all) if fractions else NAN,
        "by_position": {position: statistics.fmean(values) for position, values in sorted(by_position.items())},
        "calls": len(first_minus_last),
    }


def length_bias(groups: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """Does the judge reward length beyond what quality explains? Means of within-group Spearman correlations.

    Length can go with quality either way (in `guess_number` a longer episode is a worse one), so what matters is
    `vs_error`: length against the judge's error, reward - truth. Positive: longer trajectories are over-rewarded.
    `vs_reward` and `vs_truth` give the raw correlations for context. Length is `transcript_length` (characters).
    """
    vs_error, vs_reward, vs_truth, used = [], [], [], 0
    for group in groups:
        rewards, truth, members = _scored(group)
        if len(rewards) < 2:
            continue
        used += 1
        lengths = [transcript_length(group.trajectories[m].messages) for m in members]
        vs_error.append(spearman(lengths, [r - t for r, t in zip(rewards, truth)]))
        vs_reward.append(spearman(lengths, rewards))
        vs_truth.append(spearman(lengths, truth))
    return {"vs_error": _mean(vs_error), "vs_reward": _mean(vs_reward), "vs_truth": _mean(vs_truth), "groups": used}


def consistency(groups_a: Sequence[TrajectoryGroup], groups_b: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """How well two judges agree on the same groups (e.g. relative against absolute), within each group.

    `groups_a` and `groups_b` must be copies of the same groups, each scored by one judge. `pairwise_agreement`
    is the fraction of within-group pairs that both judges order the same way (ties included).
    """
    if len(groups_a) != len(groups_b):
        raise ValueError(f"need the same groups judged twice, got {len(groups_a)} and {len(groups_b)} groups")
    rhos, taus, same, pairs, used = [], [], 0, 0, 0
    for index, (a, b) in enumerate(zip(groups_a, groups_b)):
        if [t.messages for t in a.trajectories] != [t.messages for t in b.trajectories]:
            raise ValueError(f"group {index} differs between the two lists; judge copies of the same groups")
        pairs_of_rewards = [(x.reward, y.reward) for x, y in zip(a.trajectories, b.trajectories)]
        both = [(x, y) for x, y in pairs_of_rewards if x is not None and y is not None]
        if len(both) < 2:
            continue
        used += 1
        first, second = [x for x, _ in both], [y for _, y in both]
        rhos.append(spearman(first, second))
        taus.append(kendall_tau(first, second))
        for i, j in itertools.combinations(range(len(both)), 2):
            pairs += 1
            same += _sign(first[i] - first[j]) == _sign(second[i] - second[j])
    return {
        "spearman": _mean(rhos),
        "kendall_tau": _mean(taus),
        "pairwise_agreement": same / pairs if pairs else NAN,
        "groups": used,
        "pairs": pairs,
    }


def report(groups: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """One row for a table of judges: agreement with ground truth, position bias, length bias."""
    agree = agreement(groups)
    position = position_bias(groups)
    length = length_bias(groups)
    return {
        "spearman": agree["spearman"],
        "kendall_tau": agree["kendall_tau"],
        "pairwise_accuracy": agree["pairwise_accuracy"],
        "position_first_minus_last": position["first_minus_last"],
        "length_vs_error": length["vs_error"],
        "groups": agree["groups"],
    }
