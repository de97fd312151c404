"""The viewers, built on real trajectories, checked through the state they expose rather than through pixels."""

import copy
import re

import matplotlib
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentic_rl_lab.envs import GuessNumber, make
from agentic_rl_lab.grpo.advantages import compute_advantages
from agentic_rl_lab.grpo.tensors import trajectory_to_sequence
from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer
from agentic_rl_lab.judge import JudgeRecord, ReferenceJudge
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.policies.hf import HFPolicy
from agentic_rl_lab.rollout import collect_group, collect_groups
from agentic_rl_lab.trajectory import append_groups
from agentic_rl_lab.widgets import (
    MASK_COLOURS,
    GroupScoreboard,
    TokenView,
    TrainingDashboard,
    TrajectoryViewer,
    replay,
)

matplotlib.use("Agg")
STRATEGIES = {"guess_number": "mediocre", "fog_maze": "mediocre", "inbox_search": "random"}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def judged():
    """Per environment: two groups of three scripted trajectories, judged twice in shuffled orders."""
    result = {}
    for name, strategy in STRATEGIES.items():
        env = make(name)
        groups = collect_groups(env, ScriptedPolicy(env, strategy, seed=1), [0, 1], 3, progress=False)
        ReferenceJudge(noise=0.1, permutations=2, seed=0).score_groups(groups, progress=False)
        result[name] = groups
    return result


@pytest.fixture(scope="module")
def sampled(small_model_dir):
    """A rewarded group sampled by the small tiny model (trajectories with real token ids), its tokenizer and model."""
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(small_model_dir)
    model = AutoModelForCausalLM.from_pretrained(small_model_dir).eval()
    policy = HFPolicy(model, tokenizer, max_new_tokens=24, seed=0)
    group = collect_group(GuessNumber(max_turns=4), policy, seed=3, num_generations=3, progress=False)
    for member, trajectory in enumerate(group.trajectories):  # rewards that differ: every advantage is non-zero
        trajectory.reward = member / 2
    return group, tokenizer, model


# ----- TrajectoryViewer ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_the_viewer_shows_every_message_as_a_bubble_beside_the_hidden_truth_and_the_judge(judged, name):
    groups = judged[name]
    viewer = TrajectoryViewer(groups)
    advantages = compute_advantages(groups)
    expected = {(a.group, a.member): a.advantage for a in advantages.trajectories}
    for group_index, member in viewer.order:
        viewer.show(group_index, member)
        trajectory = groups[group_index].trajectories[member]
        assert viewer.num_bubbles == len(trajectory.messages) == viewer.chat.value.count("class='arl-bubble")
        tool_results = sum(m["role"] == "tool" for m in trajectory.messages)
        assert viewer.chat.value.count("arl-bubble arl-tool") == tool_results
        # The hidden truth is the environment's own, recovered by replaying the recorded actions.
        assert viewer.hidden == replay(trajectory).hidden_state()
        truth = {"guess_number": "secret", "fog_maze": "exit", "inbox_search": "answer"}[name]
        assert f"{truth}&quot;: " in viewer.side.value
        assert f"score {trajectory.outcome.score:.3f}" in viewer.side.value
        assert f"reward</b>: {trajectory.reward:.3f}" in viewer.side.value
        assert trajectory.metadata["judge"]["explanation"].split(";")[0] in viewer.side.value
        if group_index in advantages.zero_advantage_groups:
            assert viewer.advantage == 0.0
        else:
            assert viewer.advantage == pytest.approx(expected[(group_index, member)])
            assert f"{viewer.advantage:+.2f}" in viewer.side.value


def test_fog_maze_shows_the_map_the_agent_has_seen_next_to_the_hidden_map(judged):
    viewer = TrajectoryViewer(judged["fog_maze"])
    env = replay(viewer.trajectory)
    assert env.render_seen() in viewer.side.value.replace("&lt;", "<").replace("&gt;", ">")
    assert viewer.hidden["render"] == env.render() != env.render_seen()


def test_buttons_and_dropdowns_change_the_view(judged):
    groups = judged["guess_number"]
    viewer = TrajectoryViewer(groups)
    first = (viewer.position.value, viewer.chat.value)
    viewer.next_button.click()
    assert (viewer.group_index, viewer.member_index) == (0, 1)
    assert viewer.position.value != first[0] and viewer.member_picker.value == 1
    viewer.member_picker.value = 2  # the last member: "next" moves on to the next group
    viewer.next()
    assert (viewer.group_index, viewer.member_index) == (1, 0) and viewer.group_picker.value == 1
    assert viewer.chat.value == TrajectoryViewer(groups[1]).chat.value
    viewer.group_picker.value = 0
    assert (viewer.group_index, viewer.member_index) == (0, 0)
    assert (viewer.position.value, viewer.chat.value) == first
    viewer.previous_button.click()  # before the first trajectory comes the last one
    assert (viewer.group_index, viewer.member_index) == (1, 2)


def test_the_viewer_reads_groups_from_a_jsonl_file_and_shows_the_same(judged, tmp_path):
    groups = judged["inbox_search"]
    append_groups(tmp_path / "groups.jsonl", groups)
    from_file, in_memory = TrajectoryViewer(tmp_path / "groups.jsonl"), TrajectoryViewer(groups)
    for viewer in (from_file, in_memory):
        viewer.show(1, 2)
    assert from_file.to_html() == in_memory.to_html()
    assert from_file.advantage == in_memory.advantage is not None


def test_unjudged_trajectories_show_no_reward_and_no_advantage_yet():
    env = GuessNumber()
    group = collect_group(env, ScriptedPolicy(env, "expert"), seed=4, num_generations=2, progress=False)
    viewer = TrajectoryViewer(group)
    assert viewer.advantage is None
    assert "not judged yet" in viewer.side.value and "needs a reward" in viewer.side.value


def test_an_environment_built_with_other_settings_is_replayed_from_the_template_given():
    small = GuessNumber(high=20)
    group = collect_group(small, ScriptedPolicy(small, "expert"), seed=2, num_generations=1, progress=False)
    assert TrajectoryViewer(group).hidden is None
    assert "could not replay" in TrajectoryViewer(group).side.value
    viewer = TrajectoryViewer(group, env=small)
    assert viewer.hidden["secret"] == replay(group.trajectories[0], small).hidden_state()["secret"] <= 20


def test_every_viewer_carries_a_static_copy_for_where_widgets_are_not_live(judged, sampled):
    group, tokenizer, _ = sampled
    viewers = [
        TrajectoryViewer(judged["fog_maze"]),
        GroupScoreboard(judged["guess_number"][0]),
        TokenView(group.trajectories[0], tokenizer),
        TrainingDashboard([{"step": 0, "reward_mean": 0.5, "reward_std": 0.1}]),
    ]
    for viewer in viewers:
        bundle = viewer._repr_mimebundle_()
        assert WIDGET_VIEW in bundle
        assert bundle["text/html"] == viewer.to_html() and len(bundle["text/html"]) > 200


def test_trajectories_and_groups_show_a_compact_table(judged):
    group = judged["guess_number"][0]
    trajectory = group.trajectories[0]
    table = trajectory._repr_html_()
    assert f"reward {trajectory.reward:.3f}" in table
    assert table.count("<tr") == len(trajectory.messages) + 1  # a header, then one row per message
    assert group._repr_html_().count("<tr") == len(group.trajectories) + 1


# ----- GroupScoreboard ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_the_scoreboard_puts_each_judge_score_on_the_trajectory_it_was_given_to(judged, name):
    group = judged[name][0]
    board = GroupScoreboard(group)
    record = JudgeRecord.of(group)
    assert board.permutations == record.permutations == 2
    shuffled = False
    for call in record.calls:
        for position, id_ in enumerate(call.order):
            member = call.members[id_]  # the record's id -> member map: the only source of truth
            shuffled |= member != position
            row = board.rows[member]
            assert row["scores"][call.permutation] == call.scores[id_]
            assert row["positions"][call.permutation] == position
            html_row = re.search(rf"<tr class='arl-member' data-member='{member}'>(.*?)</tr>", board.table.value)
            assert f"{call.scores[id_]:.2f} @ {position}" in html_row.group(1)
    assert shuffled, "the judge showed every member at its own index: this test would not catch a mix-up"
    advantages = compute_advantages([group])
    for member, (row, trajectory) in enumerate(zip(board.rows, group.trajectories)):
        assert row["judge_score"] == trajectory.reward == pytest.approx(sum(row["scores"]) / 2)
        assert row["truth"] == trajectory.outcome.score and row["turns"] == trajectory.num_turns
        if advantages.trajectories:
            assert row["advantage"] == pytest.approx(advantages.trajectories[member].advantage)
    best = max(board.rows, key=lambda row: row["judge_score"])
    assert best["rank"] == 1


def test_sorting_the_scoreboard_by_judge_score_puts_the_best_first(judged):
    board = GroupScoreboard(judged["guess_number"][1])
    board.sorter.value = "judge score"
    shown = [int(m) for m in re.findall(r"data-member='(\d+)'", board.table.value)]
    assert shown == sorted(range(len(board.rows)), key=lambda m: -board.rows[m]["judge_score"])


# ----- TokenView ------------------------------------------------------------------------------------------------------
def test_token_colours_follow_the_loss_mask_token_for_token(sampled):
    group, tokenizer, _ = sampled
    for trajectory in group.trajectories:
        sequence = trajectory_to_sequence(trajectory, tokenizer)
        view = TokenView(trajectory, tokenizer)
        assert view.token_ids == sequence.input_ids and view.mask == sequence.assistant_mask
        assert view.colours == [MASK_COLOURS["assistant" if m else "context"] for m in sequence.assistant_mask]
        kinds = re.findall(r"class='arl-token arl-(\w+)'", view.text.value)
        assert kinds == ["assistant" if m else "context" for m in sequence.assistant_mask]
        assert "".join(view.tokens) == tokenizer.decode(sequence.input_ids, clean_up_tokenization_spaces=False)


def test_advantages_colour_each_turn_and_ratios_outline_what_clipping_can_touch(sampled):
    group, tokenizer, _ = sampled
    advantages = compute_advantages([group])
    item = max(advantages.trajectories, key=lambda a: abs(a.advantage))
    trajectory = group.trajectories[item.member]
    sequence = trajectory_to_sequence(trajectory, tokenizer)
    assistant = sum(sequence.assistant_mask)
    ratios = [0.5, 1.0, 1.1, 1.5] * (assistant // 4) + [1.0] * (assistant % 4)
    view = TokenView(trajectory, tokenizer, advantages=item.turn_advantages, ratios=ratios)
    assert list(view.layers) == ["loss mask", "advantage", "ratio"] and view.mode == "ratio"
    view.show("advantage")
    for colour, mask, turn, value in zip(view.colours, view.mask, sequence.turn, view.values):
        if mask:
            assert value == item.turn_advantages[turn] and colour != MASK_COLOURS["context"]
        else:
            assert value is None and colour == MASK_COLOURS["context"]
    view.picker.value = "ratio"
    outlined = [o for o, m in zip(view.outlined, view.mask) if m]
    assert outlined == [not 0.8 <= r <= 1.2 for r in ratios]
    assert not any(o for o, m in zip(view.outlined, view.mask) if not m)
    with pytest.raises(ValueError, match="needs"):
        TokenView(trajectory, tokenizer, ratios=[1.0, 1.0])


# ----- TrainingDashboard ----------------------------------------------------------------------------------------------
def line_labels(figure):
    return {line.get_label() for ax in figure.axes for line in ax.get_lines()}


def test_the_dashboard_redraws_per_row_and_draws_every_panel():
    dashboard = TrainingDashboard([{"step": 0, "eval_only": True, "eval_success": 0.2, "eval_mean_turns": 9.0}])
    assert dashboard.redraws == 1 and "waiting" in dashboard.status.value
    for step in range(3):
        row = {
            "step": step,
            "reward_mean": 0.3 + 0.1 * step,
            "reward_std": 0.1,
            "train_score": 0.35 + 0.05 * step,
            "approx_kl": 0.01 * step,
            "kl": 0.002 * step,
            "clip_fraction": 0.05,
            "completion_tokens": 40 - step,
            "seconds_rollout": 2.0,
            "seconds_judge": 0.1,
            "seconds_update": 1.0,
        }
        dashboard(None, {**row, **({"eval_success": 0.6, "eval_mean_turns": 7.0} if step == 2 else {})})
    assert dashboard.redraws == 4 and len(dashboard.rows) == 4
    labels = line_labels(dashboard.figure)
    assert {"judge's reward", "ground-truth score", "held-out success", "held-out mean turns"} <= labels
    assert "clip fraction" in labels
    assert {"approx KL(π_old ‖ π_θ)", "KL(π_θ ‖ π_ref)", "sampled tokens per trajectory"} <= labels
    lines = {line.get_label(): line for ax in dashboard.figure.axes for line in ax.get_lines()}
    success = lines["held-out success"]
    assert list(success.get_xdata()) == [0, 3] and list(success.get_ydata()) == [0.2, 0.6]
    for name in ("held-out success", "held-out mean turns"):  # the top of the held-out panel is left to the legends
        low, high = lines[name].axes.get_ylim()
        assert all((y - low) / (high - low) < 0.8 for y in lines[name].get_ydata())
    timing = next(ax for ax in dashboard.figure.axes if ax.get_title() == "Time per step")
    assert len(timing.patches) == 3 * 3  # rollout, judge and update for each step
    assert dashboard.png().startswith(b"\x89PNG") and "step 3: reward 0.500" in dashboard.status.value


def test_the_dashboard_is_a_trainer_callback(sampled, tmp_path):
    _, tokenizer, model = sampled
    config = GRPOConfig(
        steps=2,
        groups_per_step=1,
        num_generations=3,
        per_device_train_batch_size=3,
        gradient_accumulation_steps=1,
        max_new_tokens=24,
        eval_every=2,
        eval_episodes=2,
        save_every=2,
    )
    dashboard = TrainingDashboard()
    env = GuessNumber(max_turns=4)
    judge = ReferenceJudge(noise=0.3, length_bias=0.3, seed=0)  # rewards that differ, so every step updates
    trainer = GRPOTrainer(
        config, copy.deepcopy(model), tokenizer, env, judge, tmp_path, callbacks=[dashboard], progress=False
    )
    trainer.train()
    assert [row["step"] for row in dashboard.rows] == [0, 1]
    assert {"judge's reward", "clip fraction", "held-out success"} <= line_labels(dashboard.figure)
