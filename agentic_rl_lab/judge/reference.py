"""The reference judge: scores from the environment's hidden ground truth, NOT from a language model.

Every environment knows how well an episode went (`trajectory.outcome.score`, computed from the hidden state).
Scoring with it is what a perfect judge would do, so this judge lets the whole loop (rollout, judge, GRPO) run
offline with no API key, and is the yardstick that LLM judges are measured against.

Its knobs make it an *imperfect* judge on purpose, with the failure modes LLM judges are known for, so a learner
can see how each one shows up in the diagnostics and in learning:

    score = clip( truth + noise·ε + position_bias·(1 - 2p/(n-1)) + length_bias·(2ℓ - 1) + offset_call , 0, 1 )

- `noise`: the standard deviation of ε ~ N(0, 1), drawn per trajectory and permutation: judge randomness.
- `position_bias`: a primacy bias. The first of the n trajectories shown in a call (p = 0) gains `position_bias`,
  the last loses it, linearly in between. Averaging `permutations` shuffled orders cancels it out.
- `length_bias`: a verbosity bias. ℓ in [0, 1] is the trajectory's length rank within its group (0 shortest,
  1 longest, by `transcript_length`), so the longest gains `length_bias` and the shortest loses it.
- `call_offset`: the standard deviation of an offset drawn once per call and shared by everything in it: an LLM's
  absolute scale drifting from call to call. With `listwise=True` (one call per group, like `RelativeJudge`)
  every member shares the offset and the advantages do not see it; with `listwise=False` (one call per
  trajectory, like `AbsoluteJudge`) each trajectory gets its own.
"""

from __future__ import annotations

import random

from agentic_rl_lab.judge.base import GroupJudge, JudgeCall, JudgeError, JudgeRecord, OnFailure, Shown
from agentic_rl_lab.judge.diagnostics import ranks
from agentic_rl_lab.judge.prompt import transcript_length
from agentic_rl_lab.trajectory import TrajectoryGroup

GROUND_TRUTH = "ground truth (outcome.score)"


class ReferenceJudge(GroupJudge):
    """Ground truth plus optional, seeded imperfections (see the module doc). Labelled everywhere as the ground
    truth: its records say `judge="reference"` and `model="ground truth (outcome.score)"`."""

    name = "reference"

    def __init__(
        self,
        *,
        noise: float = 0.0,
        position_bias: float = 0.0,
        length_bias: float = 0.0,
        call_offset: float = 0.0,
        listwise: bool = True,
        permutations: int = 1,
        on_failure: OnFailure = "raise",
        seed: int = 0,
    ) -> None:
        super().__init__(permutations=permutations, on_failure=on_failure, seed=seed)
        for knob, value in (("noise", noise), ("call_offset", call_offset)):
            if value < 0:
                raise ValueError(f"{knob} is a standard deviation and must be >= 0, got {value}")
        self.noise = noise
        self.position_bias = position_bias
        self.length_bias = length_bias
        self.call_offset = call_offset
        self.listwise = listwise

    @property
    def model_name(self) -> str:
        return GROUND_TRUTH

    def judge(self, group: TrajectoryGroup, shown: list[Shown], permutation: int, record: JudgeRecord) -> None:
        rng = random.Random(f"reference/{self.seed}/{group.env}/{group.seed}/{permutation}")
        length_rank = _length_ranks(group)
        for batch in [shown] if self.listwise else [[s] for s in shown]:
            members = {s.id: s.member for s in batch}
            call = JudgeCall(permutation=permutation, members=members, order=list(members))
            record.calls.append(call)
            offset = rng.gauss(0.0, self.call_offset) if self.call_offset else 0.0
            for position, s in enumerate(batch):
                outcome = group.trajectories[s.member].outcome
                if outcome is None:
                    raise JudgeError(f"trajectory {s.member} has no ground-truth outcome for the reference judge")
                noise = rng.gauss(0.0, self.noise) if self.noise else 0.0
                primacy = self.position_bias * (1 - 2 * position / (len(batch) - 1)) if len(batch) > 1 else 0.0
                verbosity = self.length_bias * (2 * length_rank[s.member] - 1) if len(shown) > 1 else 0.0
                call.scores[s.id] = min(1.0, max(0.0, outcome.score + noise + primacy + verbosity + offset))
                call.explanations[s.id] = (
                    f"GROUND TRUTH {outcome.score:.3f} (success={outcome.success}, {outcome.num_steps} steps); "
                    f"noise {noise:+.3f}, position {primacy:+.3f}, length {verbosity:+.3f}, call offset {offset:+.3f}"
                )


def _length_ranks(group: TrajectoryGroup) -> list[float]:
    """Each trajectory's transcript-length rank in its group, scaled to [0, 1] (ties share their mean rank)."""
    lengths = [transcript_length(t.messages) for t in group.trajectories]
    if len(lengths) < 2:
        return [0.5] * len(lengths)
    return [(rank - 1) / (len(lengths) - 1) for rank in ranks(lengths)]
