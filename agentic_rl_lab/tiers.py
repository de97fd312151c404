"""Tiers: how big a model a notebook runs, chosen from the hardware at hand.

Every notebook's parameters cell holds `TIER = "auto"`. On a machine with a CUDA GPU that means a GPU tier;
everywhere else it means `cpu-tiny`, the lab's own tiny model, which runs the whole sequence on a laptop and
in CI. A notebook prints which tier it chose and why.
"""

from __future__ import annotations

TIERS = ("cpu-tiny", "cpu-small", "t4", "a100")
"""cpu-tiny: the lab's own ~5M model; cpu-small: Qwen2.5-0.5B via transformers (needs the Hub);
t4: Qwen2.5-1.5B/3B in 4-bit via Unsloth on a free Colab T4; a100: Qwen2.5-7B via Unsloth."""


def choose_tier(requested: str = "auto") -> tuple[str, str]:
    """Resolve `requested` to a tier name and say why; `"auto"` picks from the GPU that is present, if any."""
    if requested != "auto":
        if requested not in TIERS:
            raise ValueError(f"unknown tier {requested!r}; choose 'auto' or one of: {', '.join(TIERS)}")
        return requested, "asked for explicitly"
    try:
        import torch
    except ImportError:
        return "cpu-tiny", "torch is not installed, so no GPU can be used"
    if not torch.cuda.is_available():
        return "cpu-tiny", "no CUDA GPU found"
    name = torch.cuda.get_device_name(0)
    memory_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    if memory_gib >= 35:
        return "a100", f"found {name} with {memory_gib:.0f} GiB"
    return "t4", f"found {name} with {memory_gib:.0f} GiB"
