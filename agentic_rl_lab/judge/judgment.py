"""Reading a judge model's answer: find the JSON, validate it with pydantic, and match every score by its id.

A judge model's answer is untrusted input. RULER's issues show what comes back in practice: scores of 7 or 15
on a 0-1 scale, broken JSON, an empty list, the wrong number of scores, and (because RULER zips scores with
trajectories by position) scores silently landing on the wrong trajectory. Here an answer is accepted only if

- it holds a JSON object `{"scores": [{"trajectory_id", "explanation", "score"}, ...]}`,
- it has exactly one score per id that was shown, and no unknown or duplicate id,
- every score is a finite number in [0, 1];

and then each score goes to the trajectory whose anonymous id it names: never by position. Anything else raises
`InvalidJudgment`, whose message lists every problem, so the judge can be asked again with what to fix.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator


class InvalidJudgment(ValueError):
    """A judge's answer that cannot be used. `problems` is every reason, each phrased so the judge can fix it."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class TrajectoryScore(BaseModel):
    """One trajectory's verdict, as the judge wrote it."""

    model_config = ConfigDict(extra="ignore")

    trajectory_id: str
    explanation: str = ""
    score: float = Field(allow_inf_nan=False)


class Judgment(BaseModel):
    """A judge's whole answer. Validate with `context={"ids": [...]}` to check it against the ids that were shown."""

    scores: list[TrajectoryScore]

    @model_validator(mode="after")
    def one_score_in_range_per_id(self, info: ValidationInfo) -> Judgment:
        expected = list((info.context or {}).get("ids", []))
        given = [entry.trajectory_id for entry in self.scores]
        problems = []
        if expected and len(given) != len(expected):
            problems.append(f"there are {len(given)} scores for {len(expected)} trajectories")
        duplicates = [id_ for id_, count in Counter(given).items() if count > 1]
        if duplicates:
            problems.append(f"more than one score for {', '.join(duplicates)}")
        if expected:
            unknown = [id_ for id_ in dict.fromkeys(given) if id_ not in expected]
            missing = [id_ for id_ in expected if id_ not in given]
            if unknown:
                problems.append(f"unknown trajectory ids {', '.join(unknown)} (the ids are {', '.join(expected)})")
            if missing:
                problems.append(f"no score for {', '.join(missing)}")
        for entry in self.scores:
            if not 0.0 <= entry.score <= 1.0:
                problems.append(f"the score {entry.score:g} for {entry.trajectory_id} is outside [0, 1]")
        if problems:
            raise ValueError("; ".join(problems))
        return self


def read_judgment(text: str, ids: Sequence[str]) -> dict[str, TrajectoryScore]:
    """The verdicts in a judge's answer, keyed by trajectory id. Raises `InvalidJudgment` listing every problem."""
    data = extract_json(text)
    try:
        judgment = Judgment.model_validate(data, context={"ids": list(ids)})
    except ValidationError as exc:
        raise InvalidJudgment([_describe(error) for error in exc.errors()]) from None
    return {entry.trajectory_id: entry for entry in judgment.scores}


_THINKING = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)
_FENCED = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The JSON object in a model's reply, which may also hold reasoning, prose or a fenced code block.

    Tried in order: the whole reply; each fenced block; each `{...}` that parses, preferring one with a "scores"
    key. `<think>...</think>` reasoning is dropped first, so a brace in it is never mistaken for the answer.
    """
    text = _THINKING.sub("", text or "").strip()
    if not text:
        raise InvalidJudgment(["the answer is empty; it must be a JSON object"])
    candidates = [text, *(block.strip() for block in _FENCED.findall(text))]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    found = []
    decoder = json.JSONDecoder()
    for start in (match.start() for match in re.finditer(r"\{", text)):
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(value, dict):
            if "scores" in value:
                return value
            found.append(value)
    if found:
        return found[0]
    raise InvalidJudgment([f"the answer holds no JSON object (it begins {text[:80]!r})"])


def _describe(error: Any) -> str:
    """A pydantic error as one phrase, e.g. "scores[1].score: Input should be a valid number"."""
    if error["type"] == "value_error":  # ours, from `one_score_in_range_per_id`: already phrased for the judge
        return str(error["ctx"]["error"])
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
    if error["type"] == "model_type" and not error["loc"]:
        return 'the answer must be a JSON object like {"scores": [...]}'
    return f"{where or 'answer'}: {error['msg']}"
