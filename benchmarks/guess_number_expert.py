"""The expert guess_number policy against the information-theoretic optimum, over 1,000 seeds.

    python benchmarks/guess_number_expert.py      # writes benchmarks/results/guess_number_expert.json

Targets: the expert (binary search) succeeds on every seed and its mean number of guesses is within 0.1 of the
optimum for a uniform secret on 1..100 (5.80); rollout throughput stays above 1,000 scripted episodes per second.
"""

import json
import statistics
import time
from pathlib import Path

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.envs.guess_number import optimal_mean_guesses
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import collect_groups

NUM_SEEDS = 1000


def main() -> dict:
    env = GuessNumber()
    results = {}
    for strategy in ["expert", "mediocre", "random"]:
        start = time.perf_counter()
        groups = collect_groups(env, ScriptedPolicy(env, strategy, seed=0), range(NUM_SEEDS), 1, progress=False)
        seconds = time.perf_counter() - start
        trajectories = [g.trajectories[0] for g in groups]
        guesses = [t.outcome.num_steps for t in trajectories]
        results[strategy] = {
            "success_rate": sum(t.outcome.success for t in trajectories) / NUM_SEEDS,
            "mean_guesses": statistics.mean(guesses),
            "max_guesses": max(guesses),
            "episodes_per_second": NUM_SEEDS / seconds,
        }
    optimum = optimal_mean_guesses(env.low, env.high)
    report = {
        "env": "guess_number",
        "range": [env.low, env.high],
        "max_turns": env.max_turns,
        "num_seeds": NUM_SEEDS,
        "optimal_mean_guesses": optimum,
        "strategies": results,
        "targets": {
            "expert_success_rate": 1.0,
            "expert_mean_guesses_within": 0.1,
            "min_episodes_per_second": 1000,
        },
        "met": results["expert"]["success_rate"] == 1.0
        and abs(results["expert"]["mean_guesses"] - optimum) <= 0.1
        and results["expert"]["episodes_per_second"] >= 1000,
    }
    out = Path(__file__).parent / "results" / "guess_number_expert.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
