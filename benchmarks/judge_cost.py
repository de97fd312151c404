"""What a judge costs per group: calls and prompt tokens, relative against absolute, with and without dedup.

    python benchmarks/judge_cost.py      # writes benchmarks/results/judge_cost.json

Every variant judges the same groups (8 trajectories per group, RULER's recommended upper size) of all three
environments, played by scripted policies (`POLICIES`). The judge model is a `ScriptedBackend` that answers a
valid judgment for the ids it is shown, so the numbers count exactly what the judges *send*, with no model and no
network:

- calls: requests per group, read from the judge records (no failures, so no retries, are involved);
- prompt characters: exact, summed over the messages of every request;
- prompt tokens: estimated as characters / 4 (`judge.backends.estimate_tokens`, OpenAI's rule of thumb for English).
  The lab's only local tokenizer is the cpu-tiny model's, trained on game transcripts rather than English prose,
  so it would not say what an API judge bills; the ratios between variants are what this benchmark is about, and
  they are exact in characters.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from agentic_rl_lab.envs import make
from agentic_rl_lab.envs.base import Message
from agentic_rl_lab.judge import AbsoluteJudge, GroupJudge, JudgeRecord, RelativeJudge, ScriptedBackend
from agentic_rl_lab.judge.prompt import trajectory_ids
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import collect_groups
from agentic_rl_lab.trajectory import TrajectoryGroup

GROUP_SIZE = 8
SEEDS = range(10)
POLICIES = {
    "guess_number": {"mediocre": 8},
    "fog_maze": {"mediocre": 8},
    "inbox_search": {"expert": 4, "random": 4},  # its expert is deterministic: 8 of it would be 8 copies
}
"""Members per scripted strategy in each group: groups whose trajectories differ, as a policy's samples do."""


def always_valid(messages: list[Message]) -> str:
    """A judgment of every trajectory shown, all 0.5: the content does not matter here, only the cost."""
    scores = [{"trajectory_id": id_, "explanation": "-", "score": 0.5} for id_ in trajectory_ids(messages)]
    return json.dumps({"scores": scores})


def collect(env_name: str) -> list[TrajectoryGroup]:
    """One group per seed, its members played by the strategies in `POLICIES[env_name]`."""
    env = make(env_name)
    groups = [TrajectoryGroup(env=env_name, seed=seed) for seed in SEEDS]
    for strategy, members in POLICIES[env_name].items():
        played = collect_groups(env, ScriptedPolicy(env, strategy, seed=0), SEEDS, members, progress=False)
        for group, part in zip(groups, played):
            group.trajectories.extend(part.trajectories)
    return groups


def measure(judge: GroupJudge, groups: list[TrajectoryGroup]) -> dict[str, float]:
    """Calls, prompt characters and prompt tokens per group, as means over `groups`."""
    scored = judge.score_groups([group.model_copy(deep=True) for group in groups], progress=False)
    assert len(scored) == len(groups), "no group may fail in a cost benchmark"
    records = [JudgeRecord.of(group) for group in scored]
    requests = [[a.request for call in r.calls for a in call.attempts] for r in records]
    characters = [sum(len(m["content"]) for request in sent for m in request["messages"]) for sent in requests]
    return {
        "calls_per_group": statistics.fmean(r.requests for r in records),
        "prompt_chars_per_group": statistics.fmean(characters),
        "prompt_tokens_per_group": statistics.fmean(r.prompt_tokens for r in records),
    }


def main() -> dict:
    variants = {
        "relative": lambda: RelativeJudge(ScriptedBackend(always_valid), cache=None),
        "relative_no_dedup": lambda: RelativeJudge(ScriptedBackend(always_valid), cache=None, dedup_prefix=False),
        "absolute": lambda: AbsoluteJudge(ScriptedBackend(always_valid), cache=None),
    }
    per_env: dict[str, dict[str, dict[str, float]]] = {}
    all_groups: list[TrajectoryGroup] = []
    for env_name in POLICIES:
        groups = collect(env_name)
        assert all(len(group.trajectories) == GROUP_SIZE for group in groups)
        all_groups.extend(groups)
        per_env[env_name] = {name: measure(build(), groups) for name, build in variants.items()}
    overall = {name: measure(build(), all_groups) for name, build in variants.items()}

    def ratio(a: str, b: str) -> float:
        return overall[a]["prompt_tokens_per_group"] / overall[b]["prompt_tokens_per_group"]

    report = {
        "groups": len(all_groups),
        "group_size": GROUP_SIZE,
        "environments": POLICIES,
        "token_count": "estimated: prompt characters / 4 (see the module docstring); characters are exact",
        "calls_per_group_relative": overall["relative"]["calls_per_group"],
        "calls_per_group_absolute": overall["absolute"]["calls_per_group"],
        "prompt_tokens_per_group_relative": overall["relative"]["prompt_tokens_per_group"],
        "prompt_tokens_per_group_relative_no_dedup": overall["relative_no_dedup"]["prompt_tokens_per_group"],
        "prompt_tokens_per_group_absolute": overall["absolute"]["prompt_tokens_per_group"],
        "absolute_over_relative_tokens": ratio("absolute", "relative"),
        "no_dedup_over_dedup_tokens": ratio("relative_no_dedup", "relative"),
        "overall": overall,
        "per_environment": per_env,
    }
    out = Path(__file__).parent / "results" / "judge_cost.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("overall", "per_environment")}, indent=2))
    return report


if __name__ == "__main__":
    main()
