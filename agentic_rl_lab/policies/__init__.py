"""Policies: what maps an agent's history to its next action.

- `ScriptedPolicy`: each environment's hand-written strategies (baselines and demonstrators).
- `HFPolicy` (`policies/hf.py`): a local Hugging Face model, sampled in batches, token ids and logprobs kept.
- `OpenAIPolicy` (`policies/openai_api.py`): any OpenAI-compatible endpoint, with native tool calling.

The language-model policies are imported on first use, so `import agentic_rl_lab.policies` stays light.
"""

from importlib import import_module
from typing import Any

from agentic_rl_lab.policies.scripted import ScriptedPolicy

_LAZY = {"HFPolicy": "agentic_rl_lab.policies.hf", "OpenAIPolicy": "agentic_rl_lab.policies.openai_api"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentic_rl_lab.policies' has no attribute {name!r}")


__all__ = ["HFPolicy", "OpenAIPolicy", "ScriptedPolicy"]
