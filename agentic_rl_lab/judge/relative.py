"""The relative (listwise) judge, in the spirit of ART's RULER: one call sees a whole group and scores each member.

Why relative: GRPO only uses how a trajectory compares with the rest of its group (its advantage is its reward
minus the group's mean, over the group's spread), and a judge that sees every member side by side compares them
on one scale in one context. A judge that scores each one alone (`AbsoluteJudge`) must hold its scale steady
across separate calls, and any drift between calls lands in the advantages as noise.

What it does better than RULER: scores are matched by anonymous id, never by position; ids and order are
shuffled (or, with `shuffle_ids=False`, the order only, the ids numbered as shown, as RULER does); answers are
validated and retried with feedback; `permutations=K` averages K orders and reports how consistent they were;
every call is recorded and cached.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from agentic_rl_lab.envs.base import Message
from agentic_rl_lab.judge.backends import JudgeBackend
from agentic_rl_lab.judge.base import JudgeCall, JudgeRecord, OnFailure, Shown
from agentic_rl_lab.judge.cache import JudgeCache
from agentic_rl_lab.judge.llm import LLMJudge
from agentic_rl_lab.judge.prompt import DEFAULT_RUBRIC, relative_prompt
from agentic_rl_lab.trajectory import TrajectoryGroup


class RelativeJudge(LLMJudge):
    """Score a group in one call per permutation: shared messages shown once, tools shown, trajectories as data.

    - `dedup_prefix`: show the messages every trajectory starts with (system prompt, goal) once, in `<context>`.
    - `permutations`: judge K shuffled orders and average; `group.metadata["judge"]["position_consistency"]` says
      how often the order changed a comparison.
    - `shuffle_ids`: False numbers the trajectories in the order shown (`t1` first), as RULER does. A position
      bias and an id bias are then one bias, which `permutations` still measures.
    - The rest (`rubric`, `cache`, retries, `on_failure`, `seed`) is `LLMJudge`'s.
    """

    name = "relative"

    def __init__(
        self,
        backend: JudgeBackend,
        *,
        rubric: str = DEFAULT_RUBRIC,
        dedup_prefix: bool = True,
        shuffle_ids: bool = True,
        permutations: int = 1,
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
            permutations=permutations,
            on_failure=on_failure,
            seed=seed,
        )
        self.dedup_prefix = dedup_prefix
        self.shuffle_ids = shuffle_ids

    def prompt(self, group: TrajectoryGroup, permutation: int = 0) -> list[Message]:
        """The exact messages the judge model gets for `group` in `permutation`, to read or to count."""
        return self._messages(group, self.arrange(group, permutation))

    def judge(self, group: TrajectoryGroup, shown: list[Shown], permutation: int, record: JudgeRecord) -> None:
        call = JudgeCall(permutation=permutation, members={s.id: s.member for s in shown}, order=[s.id for s in shown])
        record.calls.append(call)
        self.ask(call, self._messages(group, shown))

    def _messages(self, group: TrajectoryGroup, shown: list[Shown]) -> list[Message]:
        trajectories = [(s.id, group.trajectories[s.member].messages) for s in shown]
        return relative_prompt(trajectories, group_tools(group), self.rubric, self.dedup_prefix)


def group_tools(group: TrajectoryGroup) -> list[dict[str, Any]]:
    """The tools the group's agents had: each distinct tool schema once (normally all members share one list)."""
    tools = {json.dumps(tool, sort_keys=True): tool for t in group.trajectories for tool in t.tools}
    return list(tools.values())
