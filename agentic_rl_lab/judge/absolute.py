"""The absolute (pointwise) judge: one call per trajectory, each judged on its own with the same rubric.

It is here to compare with `RelativeJudge` on the same groups: N calls per group instead of one, each paying for
the shared context again, and each call free to put its own scale on its trajectory. Its strength is the other
side of that coin: a trajectory's score cannot depend on which others it was shown with or in what order.
"""

from __future__ import annotations

from typing import Literal

from agentic_rl_lab.judge.backends import JudgeBackend
from agentic_rl_lab.judge.base import JudgeCall, JudgeRecord, OnFailure, Shown
from agentic_rl_lab.judge.cache import JudgeCache
from agentic_rl_lab.judge.llm import LLMJudge
from agentic_rl_lab.judge.prompt import DEFAULT_RUBRIC, absolute_prompt
from agentic_rl_lab.trajectory import TrajectoryGroup


class AbsoluteJudge(LLMJudge):
    """Score each trajectory of a group in its own call. If any call fails for good, the whole group fails
    (`on_failure`), because a group with some rewards missing cannot be compared fairly.

    The arguments are `LLMJudge`'s; there are no permutations, since a trajectory shown alone has no position.
    """

    name = "absolute"

    def __init__(
        self,
        backend: JudgeBackend,
        *,
        rubric: str = DEFAULT_RUBRIC,
        cache: JudgeCache | Literal["default"] | None = "default",
        max_retries: int = 3,
        backoff_base: float = 1.0,
        max_backoff: float = 60.0,
        on_failure: OnFailure = "raise",
        seed: int = 0,
    ) -> None:
        super().__init__(
            backend,
            rubric=rubric,
            cache=cache,
            max_retries=max_retries,
            backoff_base=backoff_base,
            max_backoff=max_backoff,
            on_failure=on_failure,
            seed=seed,
        )

    def judge(self, group: TrajectoryGroup, shown: list[Shown], permutation: int, record: JudgeRecord) -> None:
        for s in shown:
            trajectory = group.trajectories[s.member]
            call = JudgeCall(permutation=permutation, members={s.id: s.member}, order=[s.id])
            record.calls.append(call)
            self.ask(call, absolute_prompt(s.id, trajectory.messages, trajectory.tools, self.rubric))
