"""The seed plan: training, demonstrations and evaluation never play the same scenario."""

import pytest

from agentic_rl_lab.seeds import HELD_OUT_SEED_START, demonstration_seeds, held_out_seeds, training_seeds


def test_demonstration_blocks_are_disjoint_and_below_the_held_out_seeds():
    assert set(demonstration_seeds(0, 6000)).isdisjoint(demonstration_seeds(1, 200))
    assert demonstration_seeds(899, 1_000_000)[-1] == HELD_OUT_SEED_START - 1
    with pytest.raises(ValueError, match="leaves the training seeds"):
        demonstration_seeds(900, 1)
    with pytest.raises(ValueError, match="leaves the training seeds"):
        demonstration_seeds(0, 1_000_001)  # would run into block 1


def test_training_seeds_are_new_each_step_and_never_held_out():
    steps = [training_seeds(0, step, 4) for step in range(50)]
    flat = [seed for step in steps for seed in step]
    assert len(set(flat)) == len(flat) == 200
    assert max(flat) < HELD_OUT_SEED_START
    with pytest.raises(ValueError, match="held-out"):
        training_seeds(0, HELD_OUT_SEED_START // 4, 4)


def test_evaluation_plays_only_held_out_seeds():
    assert list(held_out_seeds(3)) == [HELD_OUT_SEED_START + i for i in range(3)]
