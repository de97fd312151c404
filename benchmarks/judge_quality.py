"""How good is the tiny judge? Relative against absolute, on held-out groups, against the ground truth.

    python benchmarks/judge_quality.py      # writes benchmarks/results/judge_quality.json (~10 min on 2 cores)

The judge is the committed tiny judge (`agentic_rl_lab/data/tiny-judge`, built by `build-tiny-judge`; none is
committed yet: `docs/tiny-judge.md`), as `make_tiny_judge` serves it: loaded with
`AutoModelForCausalLM`/`AutoTokenizer`, `HFJudgeBackend` with batched generation, the ids in display order. The groups
are held out from its training (other scenario seeds and other strategy draws): per environment, groups that
mix the scripted strategies, and groups of 8 sampled by the `cpu-tiny` policy (what the judge sees in training).

For each mode (`RelativeJudge`, one call per group; `AbsoluteJudge`, one call per trajectory), over every group of
every environment together (and per environment under `by_env`):
- `valid_first_attempt`: the share of calls whose first answer was a valid judgment;
- `valid_after_retries`: the share of groups scored within `MAX_RETRIES` retries;
- `pairwise_accuracy`, `spearman`: against the ground truth (`outcome.score`), within groups, over the pairs whose
  true scores differ (`judge.diagnostics.agreement`);
- `position_consistency`: with 2 permutations, how often the order of a pair stayed the same;
- `seconds_per_group`.
Targets (issue 20), for relative mode: `valid_first_attempt` >= 0.95, `pairwise_accuracy` >= 0.85.
"""

from __future__ import annotations

import json
import platform
import random
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

from agentic_rl_lab.judge import JudgeRecord
from agentic_rl_lab.judge.diagnostics import agreement
from agentic_rl_lab.tiny_judge import EMBEDDED_JUDGE_DIR, make_tiny_judge, mixed_group, policy_samples
from agentic_rl_lab.trajectory import TrajectoryGroup

OUT = Path(__file__).parent / "results" / "judge_quality.json"
GROUPS = {"guess_number": (12, 8), "inbox_search": (8, 4)}
"""Per environment: (mixed groups, their size)."""
POLICY_GROUPS = 6
"""Groups of 8 sampled by cpu-tiny, per environment (inbox_search: cut to its mixed groups' size)."""
MAX_RETRIES = 2
TARGETS = {"valid_first_attempt": 0.95, "pairwise_accuracy": 0.85}


def held_out_groups() -> dict[str, list[TrajectoryGroup]]:
    rng = random.Random("judge-quality")
    sampled = policy_samples(tuple(GROUPS), POLICY_GROUPS, seed=7)  # seeds the judge's training never used
    groups = {}
    for env_name, (count, size) in GROUPS.items():
        mixed = [mixed_group(env_name, 700_000 + index, size, rng) for index in range(count)]
        own = [g.model_copy(update={"trajectories": g.trajectories[:size]}) for g in sampled[env_name]]
        groups[env_name] = mixed + own
    return groups


def judge_all(judge: Any, groups: list[TrajectoryGroup]) -> tuple[list[TrajectoryGroup], float]:
    """The groups the judge scored (the others carry why they were skipped), and the seconds it took."""
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped groups are counted in `summary`
        judged = judge.score_groups(groups, progress=False)
    return judged, time.perf_counter() - started


def summary(groups: list[TrajectoryGroup], judged: list[TrajectoryGroup], seconds: float) -> dict[str, Any]:
    calls = [call for g in groups if "judge" in g.metadata for call in JudgeRecord.of(g).calls]
    consistency = [c for g in judged if (c := JudgeRecord.of(g).position_consistency) is not None]
    return {
        "groups": len(groups),
        "valid_first_attempt": sum(bool(c.attempts) and c.attempts[0].error is None for c in calls) / len(calls),
        "valid_after_retries": len(judged) / len(groups),
        **{k: v for k, v in agreement(judged).items() if k in ("pairwise_accuracy", "spearman", "pairs")},
        "position_consistency": statistics.fmean(consistency) if consistency else None,
        "seconds_per_group": seconds / len(groups),
    }


def main() -> None:
    groups = held_out_groups()
    report: dict[str, Any] = {"judge": str(EMBEDDED_JUDGE_DIR.relative_to(Path(__file__).resolve().parents[1]))}
    for mode, batch_size in {"relative": 8, "absolute": 16}.items():  # groups (or trajectories) per generate call
        judge = make_tiny_judge(
            mode, batch_size, permutations=2, cache=None, max_retries=MAX_RETRIES, on_failure="skip", backoff_base=0.0
        )
        runs = {}
        for env, env_groups in groups.items():
            copies = [g.model_copy(deep=True) for g in env_groups]
            runs[env] = (copies, *judge_all(judge, copies))
        all_groups = [g for copies, _, _ in runs.values() for g in copies]
        all_judged = [g for _, judged, _ in runs.values() for g in judged]
        report[mode] = {
            **summary(all_groups, all_judged, sum(run[2] for run in runs.values())),
            "by_env": {env: summary(*run) for env, run in runs.items()},
        }
        print(mode, json.dumps({k: v for k, v in report[mode].items() if k != "by_env"}), flush=True)
    report["targets"] = {f"relative.{k}": v for k, v in TARGETS.items()}
    report["met"] = {f"relative.{k}": (report["relative"][k] or 0) >= v for k, v in TARGETS.items()}
    report["machine"] = f"{platform.machine()}, {platform.processor() or 'cpu'}"
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written: {OUT}")


if __name__ == "__main__":
    main()
