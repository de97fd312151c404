"""Policies: what maps an agent's history to its next action. Scripted baselines live here; language-model
policies (`hf`, `openai_api`) import their heavy dependencies only when used."""

from agentic_rl_lab.policies.scripted import ScriptedPolicy

__all__ = ["ScriptedPolicy"]
