"""Reading a judge's answer: JSON found wherever it is, every problem named, scores keyed by id."""

import json

import pytest

from agentic_rl_lab.judge.judgment import InvalidJudgment, extract_json, read_judgment

IDS = ["t3", "t1", "t2"]


def answer(*entries: tuple[str, float]) -> str:
    return json.dumps({"scores": [{"trajectory_id": i, "explanation": f"about {i}", "score": s} for i, s in entries]})


def problems(text: str, ids=IDS) -> str:
    with pytest.raises(InvalidJudgment) as caught:
        read_judgment(text, ids)
    return str(caught.value)


def test_scores_are_keyed_by_id_whatever_order_they_come_in() -> None:
    verdicts = read_judgment(answer(("t2", 0.2), ("t3", 0.3), ("t1", 0.1)), IDS)
    assert {id_: v.score for id_, v in verdicts.items()} == {"t1": 0.1, "t2": 0.2, "t3": 0.3}
    assert verdicts["t2"].explanation == "about t2"


@pytest.mark.parametrize(
    "text",
    [
        answer(("t1", 0.5)),
        "Here are my scores:\n```json\n" + answer(("t1", 0.5)) + "\n```\nThanks!",
        "Sure. " + answer(("t1", 0.5)) + " Hope this helps {not json}",
        '<think>Maybe {"scores": []} ... no.</think>\n' + answer(("t1", 0.5)),
        '{broken {"a": 1} then ' + answer(("t1", 0.5)),
    ],
    ids=["bare", "fenced", "prose", "reasoning", "prefers-scores"],
)
def test_the_json_is_found_in_prose_code_fences_and_after_reasoning(text: str) -> None:
    assert read_judgment(text, ["t1"])["t1"].score == 0.5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I think t1 is best.", "holds no JSON object"),
        ("", "the answer is empty"),
        ('{"scores": [{"trajectory_id": "t1", "score": 0.5', "holds no JSON object"),
        (answer(("t1", 0.5), ("t2", 0.5)), "there are 2 scores for 3 trajectories; no score for t3"),
        (answer(("t1", 7), ("t2", 0.5), ("t3", 15)), "the score 7 for t1 is outside [0, 1]; the score 15 for t3"),
        (answer(("t1", -0.1), ("t2", 0.5), ("t3", 1)), "the score -0.1 for t1 is outside [0, 1]"),
        (answer(("t1", 0.5), ("t1", 0.6), ("t2", 0.5)), "more than one score for t1; no score for t3"),
        (answer(("t1", 0.5), ("t2", 0.5), ("t9", 0.5)), "unknown trajectory ids t9 (the ids are t3, t1, t2)"),
        (answer(("1", 0.5), ("2", 0.5), ("3", 0.5)), "unknown trajectory ids 1, 2, 3"),
        ('{"scores": [{"trajectory_id": "t1", "score": "high"}]}', "scores[0].score: Input should be a valid number"),
        ('{"scores": [{"trajectory_id": "t1", "score": NaN}]}', "scores[0].score: Input should be a finite number"),
        ('{"ranking": ["t1", "t2", "t3"]}', "scores: Field required"),
        ('[{"trajectory_id": "t1", "score": 0.5}]', 'must be a JSON object like {"scores": [...]}'),
    ],
    ids=[
        "no-json",
        "empty",
        "truncated",
        "too-few",
        "out-of-range",
        "negative",
        "duplicate",
        "unknown",
        "positions-not-ids",
        "not-a-number",
        "nan",
        "wrong-shape",
        "a-list",
    ],
)
def test_every_problem_is_named_so_the_judge_can_fix_it(text: str, expected: str) -> None:
    assert expected in problems(text)


def test_all_problems_are_reported_at_once() -> None:
    found = problems(answer(("t1", 2.0), ("t1", 0.5), ("t7", 0.5)))
    for part in ("more than one score for t1", "unknown trajectory ids t7", "no score for t3, t2", "score 2 for t1"):
        assert part in found
    assert extract_json('text {"x": 1}') == {"x": 1}
