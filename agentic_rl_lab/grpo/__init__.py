"""GRPO over whole multi-step trajectories: advantages from judged groups, and the loss.

`advantages` is plain Python (no torch); `loss` needs torch, so `import agentic_rl_lab.grpo` imports torch while
`import agentic_rl_lab` still does not.
"""

from agentic_rl_lab.grpo.advantages import (
    Advantages,
    CreditAssignment,
    ScaleRewards,
    TrajectoryAdvantage,
    compute_advantages,
    normalise_rewards,
)
from agentic_rl_lab.grpo.loss import (
    ImportanceSamplingLevel,
    LossStats,
    LossType,
    grpo_loss,
    token_logprobs,
)

__all__ = [
    "Advantages",
    "CreditAssignment",
    "ImportanceSamplingLevel",
    "LossStats",
    "LossType",
    "ScaleRewards",
    "TrajectoryAdvantage",
    "compute_advantages",
    "grpo_loss",
    "normalise_rewards",
    "token_logprobs",
]
