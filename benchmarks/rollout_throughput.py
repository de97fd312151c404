"""Lockstep batching against one trajectory at a time: sampling throughput of the cpu-tiny model.

    python benchmarks/rollout_throughput.py       # writes benchmarks/results/rollout_throughput.json

One group of 8 guess_number trajectories, played twice through `collect_group` with `HFPolicy`:
- **batched (lockstep)**: every turn, one `generate` call for all active trajectories;
- **one at a time**: the same 8 trajectories played one after another, one `generate` call per turn each.

Throughput is sampled tokens per second of wall time, the median of `REPEATS` runs after a warm-up, at the
tier's sampling settings. Target: batched at least 3x faster on 2 CPU cores. At this model size one decoding step
costs nearly the same for 1 row as for 8 (per-call overhead dominates), so batching is nearly free throughput;
what it loses is the wait for the slowest trajectory of each turn. Both modes keep the KV cache between turns
(`HFPolicy`'s default); the same two runs without it are reported too, to show what the cache buys: without it,
every turn recomputes the whole history, and that cost grows with the batch.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.models import PROFILES
from agentic_rl_lab.policies import HFPolicy
from agentic_rl_lab.rollout import collect_group
from agentic_rl_lab.seeds import HELD_OUT_SEED_START
from agentic_rl_lab.tiny import default_model_path, load_build_info, repository_path

GROUP_SIZE = 8
REPEATS = 5
TARGET_SPEEDUP = 3.0


def tokens_per_second(policy: HFPolicy, seed: int, batched: bool) -> tuple[float, int, float]:
    """Play one group of GROUP_SIZE trajectories; return (tokens/s, sampled tokens, seconds)."""
    env = GuessNumber()
    started = time.perf_counter()
    if batched:
        groups = [collect_group(env, policy, seed, num_generations=GROUP_SIZE, progress=False)]
    else:
        groups = [collect_group(env, policy, seed, num_generations=1, progress=False) for _ in range(GROUP_SIZE)]
    seconds = time.perf_counter() - started
    tokens = sum(len(c.token_ids) for g in groups for t in g.trajectories for c in t.completions)
    return tokens / seconds, tokens, seconds


def main() -> dict:
    torch.set_num_threads(2)
    path = default_model_path()
    sampling = PROFILES["cpu-tiny"].sampling
    policy = HFPolicy.from_pretrained(path, seed=0, **sampling)
    no_cache = HFPolicy(policy.model, policy.tokenizer, seed=0, reuse_cache=False, **sampling)
    tokens_per_second(policy, HELD_OUT_SEED_START, batched=True)  # warm-up: first calls allocate and compile
    runs: dict[str, list[tuple[float, int, float]]] = defaultdict(list)
    for repeat in range(REPEATS):
        seed = HELD_OUT_SEED_START + 1 + repeat
        for batched, mode in ((True, "batched"), (False, "one_at_a_time")):
            runs[mode].append(tokens_per_second(policy, seed, batched))
            runs[f"{mode}_without_kv_cache"].append(tokens_per_second(no_cache, seed, batched))
    summary = {
        mode: {
            "tokens_per_second": statistics.median(r[0] for r in results),
            "runs": [{"tokens_per_second": r[0], "tokens": r[1], "seconds": r[2]} for r in results],
        }
        for mode, results in runs.items()
    }
    speedup = summary["batched"]["tokens_per_second"] / summary["one_at_a_time"]["tokens_per_second"]
    without = summary["batched_without_kv_cache"]["tokens_per_second"]
    speedup_without = without / summary["one_at_a_time_without_kv_cache"]["tokens_per_second"]
    report = {
        "model": {"path": repository_path(path), "parameters": load_build_info(path)["parameters"], "tier": "cpu-tiny"},
        "env": "guess_number",
        "group_size": GROUP_SIZE,
        "repeats": REPEATS,
        "sampling": sampling,
        "threads": torch.get_num_threads(),
        **summary,
        "batched_speedup": speedup,
        "batched_speedup_without_kv_cache": speedup_without,
        "target_batched_speedup": TARGET_SPEEDUP,
        "met": speedup >= TARGET_SPEEDUP,
    }
    out = Path(__file__).parent / "results" / "rollout_throughput.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
