"""The judge interface: `score(group)` turns a group of trajectories into rewards, and keeps a record of how.

Every judge (relative, absolute, reference) works the same way:

1. **Arrange.** Give each trajectory an anonymous id (`t1`, `t2`, ...) and a display position, both shuffled
   with a seeded random generator, so neither the id nor the position says which member of the group it is.
   With `shuffle_ids=False` the ids follow the display order (`t1` shown first), as RULER numbers them: easier
   for a small judge, which must find the block an id names (the tiny judge is trained that way).
2. **Judge.** Score the arranged trajectories (`judge`, written by each kind of judge), once per permutation.
   Every call is appended to a `JudgeRecord`: the ids and their order, every attempt with its request, raw
   answer, token usage and error, and the scores *by id*.
3. **Write.** Map each id back to its trajectory through the record, average over permutations, and write
   `trajectory.reward` (in [0, 1]) and `trajectory.metadata["judge"]` (scores, positions, explanations).

The record goes in `group.metadata["judge"]`, whether the judge succeeded or not: nothing of a judge call is lost.
When a judge cannot score a group, `on_failure` decides: `"raise"` a `JudgeError` (the record is on the group
and on the error), or `"skip"` the group (the reason is in the record, and `score` returns None).
"""

from __future__ import annotations

import itertools
import random
import statistics
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, computed_field
from tqdm.auto import tqdm

from agentic_rl_lab.judge.backends import TokenUsage
from agentic_rl_lab.trajectory import TrajectoryGroup

OnFailure = Literal["raise", "skip"]


class JudgeError(RuntimeError):
    """A judge could not score a group. `record` holds every attempt, so the cause can be inspected."""

    def __init__(self, message: str, record: JudgeRecord | None = None) -> None:
        super().__init__(message)
        self.record = record


# ----- the record of a judgment ------------------------------------------------------------------------------------
class JudgeAttempt(BaseModel):
    """One request to a judge model and what came back, or why nothing usable did."""

    request: dict[str, Any] = Field(default_factory=dict)
    """The request as sent (model, messages, settings); never the API key, which travels in an HTTP header."""
    response: str | None = None
    """The answer text, valid or not."""
    raw_response: dict[str, Any] = Field(default_factory=dict)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    cached: bool = False
    """Served from the disk cache: no request was made and no tokens were spent."""
    error: str | None = None
    """Why this attempt was not accepted: an HTTP error, a timeout, or what was wrong with the answer."""
    seconds: float = 0.0


class JudgeCall(BaseModel):
    """Some trajectories of a group, shown to the judge in one order, and its verdicts on them by id."""

    permutation: int
    members: dict[str, int]
    """Anonymous id -> index of the trajectory in `group.trajectories`. The only way a score finds its trajectory."""
    order: list[str]
    """The ids in the order the judge saw them (position 0 first)."""
    attempts: list[JudgeAttempt] = Field(default_factory=list)
    scores: dict[str, float] = Field(default_factory=dict)
    """Score by id, filled once an answer was valid."""
    explanations: dict[str, str] = Field(default_factory=dict)


class JudgeRecord(BaseModel):
    """Everything one judge did to one group; stored as `group.metadata["judge"]`."""

    judge: str
    model: str
    permutations: int = 1
    calls: list[JudgeCall] = Field(default_factory=list)
    skipped: str | None = None
    """Why the group could not be scored, or None if it was."""
    position_consistency: float | None = None
    """With 2+ permutations: the fraction of trajectory pairs whose order was the same in every permutation."""
    seconds: float = 0.0

    @computed_field
    @property
    def requests(self) -> int:
        """Requests actually sent to the model (cached answers are not requests)."""
        return sum(not a.cached for call in self.calls for a in call.attempts)

    @computed_field
    @property
    def cached(self) -> int:
        return sum(a.cached for call in self.calls for a in call.attempts)

    @computed_field
    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens spent (cached answers cost none; an attempt whose usage was not reported counts 0)."""
        return sum(a.usage.prompt_tokens or 0 for call in self.calls for a in call.attempts if not a.cached)

    @computed_field
    @property
    def completion_tokens(self) -> int:
        return sum(a.usage.completion_tokens or 0 for call in self.calls for a in call.attempts if not a.cached)

    @computed_field
    @property
    def failed_attempts(self) -> int:
        return sum(a.error is not None for call in self.calls for a in call.attempts)

    @classmethod
    def of(cls, group: TrajectoryGroup) -> JudgeRecord | None:
        """The record a judge left on `group`, or None if no judge has scored it."""
        data = group.metadata.get("judge")
        return None if data is None else cls.model_validate(data)


@dataclass(frozen=True)
class Shown:
    """One trajectory as a judge sees it: under an anonymous id, at a position."""

    id: str
    member: int
    """Its index in `group.trajectories`; never shown to the judge."""
    position: int


def shuffled_ids(size: int, rng: random.Random, shuffle_ids: bool = True) -> list[tuple[str, int]]:
    """(id, member) in display order: the members in a random order, under ids `t1`..`tN` shuffled apart from the
    positions, or numbered as shown (`shuffle_ids=False`). The tiny judge's training data is shown the same way."""
    members = list(range(size))
    rng.shuffle(members)
    ids = [f"t{number}" for number in range(1, size + 1)]
    if shuffle_ids:
        rng.shuffle(ids)
    return list(zip(ids, members))


# ----- the interface -----------------------------------------------------------------------------------------------
class GroupJudge(ABC):
    """Scores the trajectories of a group. Subclasses implement `judge`; `score` does the rest (see module doc).

    - `permutations`: judge the group K times in K shuffled orders and average the scores (position-bias control).
    - `on_failure`: `"raise"` a `JudgeError` or `"skip"` the group when it cannot be scored.
    - `seed`: seeds the shuffles. It is combined with the group's environment and seed, so re-judging the same
      group shows the same order (and a cached answer is found again).
    """

    name: ClassVar[str]
    max_concurrency: int = 1
    shuffle_ids: bool = True
    """Shuffle the ids apart from the positions; False numbers them in display order (see `arrange`)."""

    def __init__(self, *, permutations: int = 1, on_failure: OnFailure = "raise", seed: int = 0) -> None:
        if permutations < 1:
            raise ValueError(f"permutations must be at least 1, got {permutations}")
        if on_failure not in ("raise", "skip"):
            raise ValueError(f"on_failure must be 'raise' or 'skip', got {on_failure!r}")
        self.permutations = permutations
        self.on_failure = on_failure
        self.seed = seed

    @property
    @abstractmethod
    def model_name(self) -> str:
        """What produced the scores: a model name, or "ground truth"."""

    @abstractmethod
    def judge(self, group: TrajectoryGroup, shown: list[Shown], permutation: int, record: JudgeRecord) -> None:
        """Score the `shown` trajectories: append one or more `JudgeCall`s with their scores to `record`.

        Raise `JudgeError` if that cannot be done; calls appended before that stay in the record.
        """

    def arrange(self, group: TrajectoryGroup, permutation: int = 0) -> list[Shown]:
        """Anonymous ids and display positions for the group's trajectories, shuffled independently and seeded by
        (judge seed, environment, group seed, permutation); with `shuffle_ids=False`, `t1` is the one shown first.
        The positions are the same either way."""
        rng = random.Random(f"{self.seed}/{group.env}/{group.seed}/{permutation}")
        shown = shuffled_ids(len(group.trajectories), rng, self.shuffle_ids)
        return [Shown(id_, member, position) for position, (id_, member) in enumerate(shown)]

    def score(self, group: TrajectoryGroup) -> TrajectoryGroup | None:
        """Judge `group` and write every trajectory's `reward` and `metadata["judge"]`, and the group's record.

        Returns the group, or None when it was skipped (no trajectories, or a failure with `on_failure="skip"`).
        """
        return self._score(group, warn=True)

    def _score(self, group: TrajectoryGroup, warn: bool) -> TrajectoryGroup | None:
        record = JudgeRecord(judge=self.name, model=self.model_name, permutations=self.permutations)
        started = time.perf_counter()
        if not group.trajectories:
            record.skipped = "the group has no trajectories to judge"
            group.metadata["judge"] = record.model_dump(mode="json")
            return None
        try:
            for permutation in range(self.permutations):
                self.judge(group, self.arrange(group, permutation), permutation, record)
            verdicts = _verdicts_by_member(record, len(group.trajectories))
        except JudgeError as exc:
            record.skipped = f"{self.name} judge could not score group {group.env} seed {group.seed}: {exc}"
            record.seconds = time.perf_counter() - started
            group.metadata["judge"] = record.model_dump(mode="json")
            if self.on_failure == "raise":
                raise JudgeError(record.skipped, record) from exc
            if warn:
                warnings.warn(f"{record.skipped}; skipped the group (on_failure='skip')", stacklevel=3)
            return None
        for trajectory, mine in zip(group.trajectories, verdicts):
            judged = {
                "judge": self.name,
                "model": self.model_name,
                "score": statistics.fmean(v["score"] for v in mine),
                "explanation": mine[0]["explanation"],
                "scores": [v["score"] for v in mine],
                "ids": [v["id"] for v in mine],
                "positions": [v["position"] for v in mine],
                "explanations": [v["explanation"] for v in mine],
            }
            if trajectory.reward is not None:
                judged["previous_reward"] = trajectory.reward
            trajectory.metadata["judge"] = judged
            trajectory.reward = judged["score"]
        if self.permutations > 1:
            record.position_consistency = position_consistency([[v["score"] for v in mine] for mine in verdicts])
        record.seconds = time.perf_counter() - started
        group.metadata["judge"] = record.model_dump(mode="json")
        return group

    def score_groups(self, groups: Sequence[TrajectoryGroup], *, progress: bool = True) -> list[TrajectoryGroup]:
        """Score every group, up to `max_concurrency` at once; returns the scored groups in order, without the
        skipped ones (their reasons are in `group.metadata["judge"]["skipped"]`)."""
        results: dict[int, TrajectoryGroup | None] = {}
        workers = max(1, min(self.max_concurrency, len(groups)))
        with ThreadPoolExecutor(workers, thread_name_prefix="judge") as pool:
            futures = {pool.submit(self._score, group, False): index for index, group in enumerate(groups)}
            with tqdm(total=len(groups), desc=f"judge ({self.name})", unit="group", disable=not progress) as bar:
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    skipped = sum(result is None for result in results.values())
                    bar.set_postfix(skipped=skipped, refresh=False)
                    bar.update(1)
        skipped = [groups[index] for index in range(len(groups)) if results[index] is None]
        if skipped:
            warnings.warn(
                f"{self.name} judge skipped {len(skipped)} of {len(groups)} groups (reasons in "
                f"group.metadata['judge']['skipped']), the first because: {skipped[0].metadata['judge']['skipped']}",
                stacklevel=2,
            )
        return [group for index in range(len(groups)) if (group := results[index]) is not None]


def _verdicts_by_member(record: JudgeRecord, size: int) -> list[list[dict[str, Any]]]:
    """Each trajectory's verdicts, one per permutation, found through `call.members[id]`: by id, never by position.

    Also the last line of defence: every trajectory must have exactly one verdict per permutation.
    """
    verdicts: list[list[dict[str, Any]]] = [[] for _ in range(size)]
    for call in record.calls:
        for id_, score in call.scores.items():
            verdicts[call.members[id_]].append(
                {
                    "id": id_,
                    "score": score,
                    "position": call.order.index(id_),
                    "explanation": call.explanations.get(id_, ""),
                    "permutation": call.permutation,
                }
            )
    for member, mine in enumerate(verdicts):
        if sorted(v["permutation"] for v in mine) != list(range(record.permutations)):
            raise JudgeError(f"trajectory {member} got {len(mine)} scores for {record.permutations} permutation(s)")
    return [sorted(mine, key=lambda v: v["permutation"]) for mine in verdicts]


def position_consistency(scores: Sequence[Sequence[float]]) -> float | None:
    """The fraction of trajectory pairs ordered the same way (better, worse or tied) in every permutation.

    `scores[member][permutation]`. 1.0: the order of presentation never changed a comparison. With one
    permutation, or fewer than two trajectories, there is nothing to compare: None.
    """
    if len(scores) < 2 or len(scores[0]) < 2:
        return None
    pairs = list(itertools.combinations(range(len(scores)), 2))
    same = 0
    for i, j in pairs:
        signs = {_sign(a - b) for a, b in zip(scores[i], scores[j])}
        same += len(signs) == 1
    return same / len(pairs)


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def judge_usage(groups: Sequence[TrajectoryGroup]) -> dict[str, int]:
    """Totals over the judge records on `groups`: calls, requests, cached answers, tokens, failed attempts, skips."""
    totals = dict.fromkeys(
        ("groups", "skipped", "calls", "requests", "cached", "prompt_tokens", "completion_tokens", "failed_attempts"), 0
    )
    for group in groups:
        record = JudgeRecord.of(group)
        if record is None:
            continue
        totals["groups"] += 1
        totals["skipped"] += record.skipped is not None
        totals["calls"] += len(record.calls)
        for key in ("requests", "cached", "prompt_tokens", "completion_tokens", "failed_attempts"):
            totals[key] += getattr(record, key)
    return totals
