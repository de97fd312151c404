"""Trajectories and their JSONL store: exact round trips, and nothing complete lost to a crash."""

import json
import math
import warnings

import pytest

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import collect_groups
from agentic_rl_lab.trajectory import (
    Completion,
    RecordedException,
    Trajectory,
    TrajectoryGroup,
    append_groups,
    load_groups,
    to_dataframe,
)


@pytest.fixture(scope="module")
def groups():
    env = GuessNumber()
    collected = collect_groups(env, ScriptedPolicy(env, "mediocre"), range(5), 4, progress=False)
    # Add what a language-model policy and a judge would add, so the round trip covers every field.
    first = collected[0].trajectories[0]
    first.completions = [Completion(message_index=2, token_ids=[5, 17, 2], logprobs=[-0.1, -2.5e-7, -13.25])]
    first.reward = 0.8125
    first.metadata["judge"] = {"explanation": "found it — «quickly»", "nested": [1, 2.5, None]}
    collected[1].exceptions.append(RecordedException.from_exception(ValueError("boom"), member=3))
    return collected


def test_save_then_load_is_exact(tmp_path, groups):
    path = tmp_path / "groups.jsonl"
    append_groups(path, groups[:2])
    append_groups(path, groups[2:])
    loaded = load_groups(path)
    assert loaded == groups
    assert loaded[0].trajectories[0].completions[0].logprobs == [-0.1, -2.5e-7, -13.25]
    assert path.read_text().count("\n") == len(groups)


def test_a_truncated_last_line_is_skipped_with_a_warning_and_complete_groups_kept(tmp_path, groups):
    path = tmp_path / "groups.jsonl"
    append_groups(path, groups)
    data = path.read_bytes()
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1 + 40  # 40 bytes into the last line: a crash mid-write
    path.write_bytes(data[:cut])
    with pytest.warns(UserWarning, match="incomplete"):
        loaded = load_groups(path)
    assert loaded == groups[:-1]


def test_appending_after_a_crash_cuts_the_torn_line_and_loses_no_complete_group(tmp_path, groups):
    path = tmp_path / "groups.jsonl"
    append_groups(path, groups[:3])
    with path.open("a") as file:
        file.write(groups[3].model_dump_json()[:100])  # torn write
    with pytest.warns(UserWarning, match="incomplete last line"):
        append_groups(path, groups[4:])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_groups(path) == groups[:3] + groups[4:]


def test_a_corrupt_line_in_the_middle_raises_with_its_line_number(tmp_path, groups):
    path = tmp_path / "groups.jsonl"
    append_groups(path, groups[:2])
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0][:50] + "\n" + lines[1])
    with pytest.raises(ValueError, match="line 1"):
        load_groups(path)


def test_untrusted_files_are_validated(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"env": "x", "seed": "not a number", "trajectories": []}) + "\n")
    with pytest.raises(ValueError, match="seed"):
        load_groups(path)


def test_dataframe_has_one_row_per_trajectory(groups):
    frame = to_dataframe(groups)
    assert len(frame) == sum(len(g.trajectories) for g in groups) == 20
    assert {"seed", "member", "turns", "success", "score", "reward", "duration_s"} <= set(frame.columns)
    assert frame.loc[0, "reward"] == 0.8125 and math.isnan(frame.loc[1, "reward"])
    assert frame.loc[0, "sampled_tokens"] == 3
    assert (
        frame["turns"]
        == [len([m for m in t.messages if m["role"] == "assistant"]) for g in groups for t in g.trajectories]
    ).all()
    assert "<table" in groups[0]._repr_html_()


def test_trajectory_knows_its_final_message_and_turns(groups):
    trajectory: Trajectory = groups[0].trajectories[1]
    assert trajectory.final_message is not None and trajectory.final_message["tool_calls"]
    assert trajectory.num_turns == trajectory.outcome.num_steps
    assert isinstance(groups[0], TrajectoryGroup)
