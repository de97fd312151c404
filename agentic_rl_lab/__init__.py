"""agentic_rl_lab: learn agentic reinforcement learning end to end, one notebook at a time.

Importing the package is cheap and never imports torch, unsloth or vllm; the modules that need them import
them when used.
"""

__version__ = "0.1.0"
