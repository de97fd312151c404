"""The judge lab: turning groups of trajectories into rewards with an LLM judge, and checking the judge.

- `base`: the `GroupJudge` interface, the `JudgeRecord` kept on every group, `JudgeError`.
- `prompt`: the rubric, the shared context shown once, trajectories as delimited data.
- `judgment`: reading an answer: JSON extraction, pydantic validation, scores matched by id.
- `llm`: asking a model with retries, feedback, backoff and the disk cache (`cache`).
- `relative` (`RelativeJudge`, RULER-style), `absolute` (`AbsoluteJudge`), `reference` (`ReferenceJudge`,
  ground truth with knobs for noise and bias).
- `backends`: an OpenAI-compatible API, a Hugging Face model in this process, or a script.
- `diagnostics`: Spearman, Kendall, pairwise accuracy, position and length bias, judge-against-judge.
"""

from agentic_rl_lab.judge.absolute import AbsoluteJudge
from agentic_rl_lab.judge.backends import (
    BackendError,
    BackendReply,
    HFJudgeBackend,
    JudgeBackend,
    OpenAIJudgeBackend,
    ScriptedBackend,
    TokenUsage,
)
from agentic_rl_lab.judge.base import GroupJudge, JudgeAttempt, JudgeCall, JudgeError, JudgeRecord, judge_usage
from agentic_rl_lab.judge.cache import JudgeCache
from agentic_rl_lab.judge.judgment import InvalidJudgment, read_judgment
from agentic_rl_lab.judge.prompt import DEFAULT_RUBRIC, rubric_for
from agentic_rl_lab.judge.reference import ReferenceJudge
from agentic_rl_lab.judge.relative import RelativeJudge

__all__ = [
    "DEFAULT_RUBRIC",
    "rubric_for",
    "AbsoluteJudge",
    "BackendError",
    "BackendReply",
    "GroupJudge",
    "HFJudgeBackend",
    "InvalidJudgment",
    "JudgeAttempt",
    "JudgeBackend",
    "JudgeCache",
    "JudgeCall",
    "JudgeError",
    "JudgeRecord",
    "OpenAIJudgeBackend",
    "ReferenceJudge",
    "RelativeJudge",
    "ScriptedBackend",
    "TokenUsage",
    "judge_usage",
    "read_judgment",
]
