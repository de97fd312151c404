"""The seed plan: which scenario seeds each part of the lab plays, in one place.

A scenario seed fixes an episode's hidden state: the secret number, the maze, the question asked of the inbox.
Playing the same seed twice replays the same scenario, so the parts that must not see each other's scenarios get
ranges that do not overlap:

- demonstrations: `block * 1,000,000 + i`, blocks 0-899 (`demonstration_seeds`). The tiny model's SFT plays block
  `seed`, its tokenizer's text block `seed + 1`, a warm start block `seed`;
- GRPO's training groups: `seed * 7,919 + step * groups_per_step + i` (`training_seeds`), far below 900,000,000;
- evaluation only: 900,000,000 and up (`held_out_seeds`): the trainer's `evaluate`, the benchmarks, the notebooks'
  checks.

Training and demonstrations may share scenarios (both are training data); nothing that trains ever plays a seed
from `HELD_OUT_SEED_START` up, so a held-out success rate measures what was learned, not what was seen.
"""

from __future__ import annotations

HELD_OUT_SEED_START = 900_000_000
"""Scenario seeds from here on are for evaluation only."""
BLOCK = 1_000_000
"""Scenario seeds per demonstration block."""


def demonstration_seeds(block: int, episodes: int) -> range:
    """The scenario seeds of `episodes` demonstrations drawn from `block` (a build's or warm start's seed)."""
    start = block * BLOCK
    if block < 0 or episodes > BLOCK or start + episodes > HELD_OUT_SEED_START:
        raise ValueError(
            f"demonstration block {block} with {episodes} episodes leaves the training seeds "
            f"(blocks 0-{HELD_OUT_SEED_START // BLOCK - 1}, at most {BLOCK:,} episodes each)"
        )
    return range(start, start + episodes)


def training_seeds(seed: int, step: int, groups_per_step: int) -> list[int]:
    """The scenario seeds of GRPO step `step`'s groups: each step new scenarios, each run `seed` its own order."""
    seeds = [seed * 7919 + step * groups_per_step + i for i in range(groups_per_step)]
    if seeds[-1] >= HELD_OUT_SEED_START:
        raise ValueError(f"seed={seed}, step={step} reaches the held-out seeds ({HELD_OUT_SEED_START:,} up)")
    return seeds


def held_out_seeds(episodes: int) -> range:
    """The first `episodes` held-out scenario seeds: what every evaluation plays."""
    return range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + episodes)
