"""Any lab environment and judge under TRL's `GRPOTrainer`: a `rollout_func` and a reward function.

The road past one GPU. The lab's trainer is written to be read; TRL's runs on many GPUs (accelerate, DeepSpeed),
with vLLM for generation. These two adapters let the same environments and judges train there, without a rewrite:

    from trl import GRPOConfig, GRPOTrainer
    from agentic_rl_lab.integrations.trl import judge_reward, make_rollout_func, scenario_dataset

    env = make("guess_number")
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer,
        args=GRPOConfig(num_generations=8, per_device_train_batch_size=8, ...),
        train_dataset=scenario_dataset(env, seeds=range(1000)),
        rollout_func=make_rollout_func(env, max_new_tokens=64),
        reward_funcs=judge_reward(RelativeJudge(backend)),
    )

How the pieces meet:
1. **The dataset holds scenarios, not what the model reads.** Each row's prompt is a key (`{"env": ..., "seed":
   ...}`): the agent's real opening messages come from `env.reset(seed)`, and many scenarios share the same
   opening text (every `guess_number` game begins alike), so the text alone could not say which game to play.
2. **`rollout_func`** plays the episodes with the lab's `collect_groups` and the model TRL is training (through
   `HFPolicy`), one group per distinct key, and returns them token in / token out: `prompt_ids` (the opening
   tokens), `completion_ids` (every later token: each turn's *sampled* ids, with the tool results and the next
   turn's header tokenized in between), `logprobs` (the sampler's, 0 on tool tokens), and `env_mask`, 1 on the
   sampled tokens only, which TRL multiplies into its loss mask: tool results are read, never trained on.
3. **`judge_reward`** scores each group with one judge call (`judge.score(group)`), as the lab's trainer does, and
   hands TRL the rewards in its order. TRL then normalises them per group: the advantages of
   `tests/grpo/test_trl_parity.py`.

TRL's `GRPOTrainer` is imported by the caller, not here, so this module loads without TRL. `rollout_func` is
experimental in TRL (from 0.25); the adapters are tested with TRL 1.16 on a CPU
(`tests/integrations/test_trl.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from agentic_rl_lab.envs.base import Environment
from agentic_rl_lab.grpo.tensors import trajectory_to_sequence
from agentic_rl_lab.judge.base import GroupJudge
from agentic_rl_lab.models import for_training
from agentic_rl_lab.policies.hf import HFPolicy
from agentic_rl_lab.rollout import collect_groups
from agentic_rl_lab.trajectory import Trajectory, TrajectoryGroup


# ----- 1. the dataset: one row per scenario ---------------------------------------------------------------------
def scenario_key(env: Environment, seed: int) -> list[dict[str, str]]:
    """The prompt a dataset row carries for scenario `seed` of `env`: a key the rollout reads, as a chat."""
    return [{"role": "user", "content": json.dumps({"env": env.name, "seed": int(seed)})}]


def read_scenario_key(prompt: Any) -> tuple[str, int]:
    """(environment name, seed) from a prompt made by `scenario_key`; a clear error for any other prompt."""
    try:
        key = json.loads(prompt[-1]["content"] if isinstance(prompt, list) else prompt)
        return str(key["env"]), int(key["seed"])
    except (ValueError, KeyError, TypeError, IndexError):
        raise ValueError(
            f"not a scenario key: {str(prompt)[:120]!r}; build the dataset with `scenario_dataset(env, seeds)`"
        ) from None


def scenario_dataset(env: Environment, seeds: Iterable[int]) -> Any:
    """A `datasets.Dataset` with one row per seed, whose `prompt` is the scenario's key (see the module doc)."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": scenario_key(env, seed)} for seed in seeds])


# ----- 2. the rollout: the lab's episodes, token in / token out ---------------------------------------------------
def make_rollout_func(
    env: Environment, max_new_tokens: int = 64, max_exceptions: int | float = 0
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """TRL's `rollout_func(prompts, trainer)`: play `env` with the model being trained, one group per scenario.

    TRL passes each prompt once per generation (a group's `num_generations` copies side by side); each run of
    equal keys becomes one group of that many trajectories, played in lockstep. Sampling follows the trainer's
    `temperature` and `top_p`; `max_new_tokens` is per turn. Besides TRL's keys the result holds `trajectory`
    and `group` (the index of its group in this call), which TRL forwards to the reward functions.
    """

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        runs = _runs([read_scenario_key(prompt) for prompt in prompts])
        for (name, _), _ in runs:
            if name != env.name:
                raise ValueError(f"the dataset asks for {name!r}, but this rollout_func plays {env.name!r}")
        model = trainer.accelerator.unwrap_model(trainer.model)
        args = trainer.args
        sampling_seed = args.seed * 1_000_003 + trainer.state.global_step  # another one each step
        policy = HFPolicy(model, trainer.processing_class, temperature=args.temperature, top_p=args.top_p,
                          max_new_tokens=max_new_tokens, seed=sampling_seed)  # fmt: skip
        out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
        out |= {"trajectory": [], "group": []}
        was_training = model.training
        try:
            groups = _play(env, policy, runs, max_exceptions)
        finally:  # HFPolicy switched to sampling mode; TRL's loss must run in the mode it left (and logs by it)
            if was_training:
                for_training(model)
        for index, group in enumerate(groups):
            for trajectory in group.trajectories:
                prompt_ids, completion_ids, logprobs, env_mask = token_fields(trajectory, trainer.processing_class)
                out["prompt_ids"].append(prompt_ids)
                out["completion_ids"].append(completion_ids)
                out["logprobs"].append(logprobs)
                out["env_mask"].append(env_mask)
                out["trajectory"].append(trajectory)
                out["group"].append(index)
        return out

    return rollout_func


def token_fields(trajectory: Trajectory, tokenizer: Any) -> tuple[list[int], list[int], list[float], list[int]]:
    """A trajectory as TRL's four lists: the tokens before the first sampled one (the prompt), then the rest with
    the sampler's log-probs and a mask that is 1 on sampled tokens. The same sequence as the lab's trainer uses."""
    sequence = trajectory_to_sequence(trajectory, tokenizer)
    start = sequence.assistant_mask.index(1)
    return (
        sequence.input_ids[:start],
        sequence.input_ids[start:],
        sequence.sampled_logprobs[start:],
        sequence.assistant_mask[start:],
    )


def _play(env: Environment, policy: HFPolicy, runs: list[tuple[tuple[str, int], int]], max_exceptions: int | float
          ) -> list[TrajectoryGroup]:  # fmt: skip
    """One group per run, in order. Runs of one size are played together, in lockstep (one `generate` call per
    turn for all of them): group by group would take several times longer."""
    groups: dict[int, TrajectoryGroup] = {}
    for size in sorted({size for _, size in runs}):
        indices = [i for i, (_, n) in enumerate(runs) if n == size]
        seeds = [runs[i][0][1] for i in indices]
        played = collect_groups(env, policy, seeds, size, max_exceptions=max_exceptions, progress=False)
        groups |= dict(zip(indices, played))
    return [groups[i] for i in range(len(runs))]


def _runs(keys: list[tuple[str, int]]) -> list[tuple[tuple[str, int], int]]:
    """Consecutive equal keys as (key, count): `[a, a, b, b] -> [(a, 2), (b, 2)]`."""
    runs: list[tuple[tuple[str, int], int]] = []
    for key in keys:
        if runs and runs[-1][0] == key:
            runs[-1] = (key, runs[-1][1] + 1)
        else:
            runs.append((key, 1))
    return runs


# ----- 3. the reward: one judge call per group --------------------------------------------------------------------
def judge_reward(judge: GroupJudge) -> Callable[..., list[float | None]]:
    """A TRL reward function that scores each group of the batch with `judge`, once, and returns the rewards in
    TRL's order. A group the judge skips (`on_failure="skip"`) gets None for each member, which TRL treats as
    unscorable (no advantage). Needs the `trajectory` and `group` fields that `make_rollout_func` returns."""

    def reward(prompts: list[Any], completions: list[Any], trajectory: list[Trajectory], group: list[int],
               **kwargs: Any) -> list[float | None]:  # fmt: skip
        rewards: list[float | None] = [None] * len(trajectory)
        for index in dict.fromkeys(group):
            members = [i for i, g in enumerate(group) if g == index]
            scored = TrajectoryGroup(
                env=trajectory[members[0]].env,
                seed=trajectory[members[0]].seed,
                trajectories=[trajectory[i] for i in members],
            )
            if judge.score(scored) is not None:
                for i, member in zip(members, scored.trajectories):
                    rewards[i] = member.reward
        return rewards

    reward.__name__ = f"{judge.name}_judge"
    return reward
