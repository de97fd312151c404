"""The tiny judge's training data: the judges' own prompts, and targets that apply the rubric to the ground truth."""

import random

import pytest

from agentic_rl_lab.judge import RelativeJudge
from agentic_rl_lab.judge.backends import ScriptedBackend
from agentic_rl_lab.judge.judgment import read_judgment
from agentic_rl_lab.judge.prompt import trajectory_ids
from agentic_rl_lab.tiny_judge import (
    TINY_JUDGE_RUBRIC,
    JudgeData,
    absolute_example,
    judge_conversations,
    mixed_group,
    relative_example,
    rubric_verdict,
)


def test_the_rubric_puts_success_far_above_failure_and_fewer_turns_above_more():
    rng = random.Random(0)
    trajectories = [t for seed in range(30) for t in mixed_group("guess_number", seed, 8, rng).trajectories]
    scored = [(t, *rubric_verdict(t)) for t in trajectories]
    successes = [s for t, s, _ in scored if t.outcome.success]
    failures = [s for t, s, _ in scored if not t.outcome.success]
    assert successes and failures and min(successes) >= 0.5 > 0.3 >= max(failures)
    clean = [(t.num_turns, s) for t, s, _ in scored if t.outcome.success and not t.errors]
    for (turns_a, a), (turns_b, b) in zip(clean, clean[1:]):
        assert (turns_a < turns_b) <= (a > b), "a faster clean success scores higher"
    for trajectory, _, explanation in scored:
        assert f"in {trajectory.num_turns} turn" in explanation
        assert ("error" in explanation) == bool(trajectory.errors)
        assert ("did not reach" in explanation) == (not trajectory.outcome.success)


def test_a_training_conversation_is_what_the_relative_judge_sends_and_an_answer_it_reads():
    group = mixed_group("guess_number", 7, 6, random.Random(1))
    backend = ScriptedBackend(["not json"])
    judge = RelativeJudge(backend, rubric=TINY_JUDGE_RUBRIC, cache=None, max_retries=0, on_failure="skip")
    shown = [(s.id, s.member) for s in judge.arrange(group)]
    with pytest.warns(UserWarning, match="skipped the group"):
        judge.score(group)  # the scripted answer is not JSON: only the request is wanted here
    conversation = relative_example(group, shown)
    assert conversation[:-1] == backend.requests[0], "the prompt is the judge's own, byte for byte"
    verdicts = read_judgment(conversation[-1]["content"], trajectory_ids(conversation[:-1]))
    assert list(verdicts) == [f"t{k}" for k in range(1, 7)], "the answer lists the ids in order, whatever was shown"
    for id_, member in shown:
        score, explanation = rubric_verdict(group.trajectories[member])
        assert (verdicts[id_].score, verdicts[id_].explanation) == (score, explanation)
    prompt = "".join(m["content"] for m in conversation[:-1])
    assert "outcome" not in prompt and "reached the goal" not in prompt, "no ground truth in what the judge reads"


def test_the_data_mixes_relative_and_absolute_conversations_of_every_quality():
    conversations = judge_conversations(JudgeData(groups=(("guess_number", 12, (4, 8)),)))
    relative = [c for c in conversations if "in no particular order" in c[1]["content"]]
    absolute = [c for c in conversations if c not in relative]
    assert len(relative) == 12 and absolute
    answers = [read_judgment(c[-1]["content"], trajectory_ids(c[:-1])) for c in relative]
    scores = [v.score for a in answers for v in a.values()]
    assert min(scores) <= 0.3 and max(scores) > 0.8, "failures and fast successes"
    one = absolute_example(mixed_group("guess_number", 1, 1, random.Random(2)).trajectories[0], random.Random(3))
    assert len(read_judgment(one[-1]["content"], trajectory_ids(one[:-1]))) == 1


def test_it_is_trained_and_judges_with_the_ids_in_display_order(small_model_dir):
    from agentic_rl_lab.tiny_judge import make_tiny_judge

    (conversation,) = judge_conversations(JudgeData(groups=(("guess_number", 1, (5,)),), absolute_per_group=0))
    assert trajectory_ids(conversation[:-1]) == [f"t{k}" for k in range(1, 6)], "t1 is shown first, t5 last"
    group = mixed_group("guess_number", 3, 5, random.Random(4))
    judge = make_tiny_judge(path=small_model_dir, cache=None)
    assert [s.id for s in judge.arrange(group, 1)] == [f"t{k}" for k in range(1, 6)], "judged as it was trained"
    shuffled = make_tiny_judge(path=small_model_dir, cache=None, shuffle_ids=True).arrange(group, 1)
    assert [s.id for s in shuffled] != [f"t{k}" for k in range(1, 6)], "unless asked otherwise"


def test_a_rebuilt_judge_is_never_served_its_predecessors_cached_answers(small_model_dir, tmp_path):
    """The judge cache keys answers by the backend's model name: the name must change with the weights."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from agentic_rl_lab.tiny_judge import make_tiny_judge

    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(small_model_dir, rebuilt)
    weights = load_file(rebuilt / "model.safetensors")
    first = next(iter(weights))
    weights[first] = weights[first] + 1
    save_file(weights, rebuilt / "model.safetensors", metadata={"format": "pt"})

    def cache_name(path) -> str:
        return json.dumps(make_tiny_judge(path=path).backend.settings(), sort_keys=True)  # what the cache key holds

    assert cache_name(rebuilt) != cache_name(small_model_dir), "a rebuild would be served the old answers"
    assert cache_name(small_model_dir) == cache_name(small_model_dir), "the same weights keep their cached answers"
