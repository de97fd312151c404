"""`agentic_rl_lab.sft`: demonstrations are reproducible and never held out, the loss is the cross-entropy to the
demonstrator's distribution, and the soft targets estimate that distribution."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentic_rl_lab import sft, tiny
from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.seeds import HELD_OUT_SEED_START, demonstration_seeds
from agentic_rl_lab.sft import play_demonstrations
from agentic_rl_lab.tiny import SMALL_CONFIG


def test_demonstrations_are_reproducible_and_never_use_held_out_seeds():
    first = play_demonstrations(GuessNumber(), "mediocre", 5, seed=0)
    again = play_demonstrations(GuessNumber(), "mediocre", 5, seed=0)
    assert [t.messages for t in first] == [t.messages for t in again]
    other = play_demonstrations(GuessNumber(), "mediocre", 5, seed=1)
    assert [t.messages for t in first] != [t.messages for t in other]
    for config in (tiny.DEFAULT_CONFIG, SMALL_CONFIG):
        most = max([episodes for _, _, episodes in config.demonstrators] + [config.tokenizer_episodes])
        # demonstrations play block `seed` of the seed plan, the tokenizer's corpus block `seed + 1`
        for block in (config.seed, config.seed + 1):
            assert demonstration_seeds(block, most)[-1] < HELD_OUT_SEED_START


def test_sft_loss_with_soft_targets_is_the_cross_entropy_to_the_demonstrators_distribution(small_model_dir):
    model = AutoModelForCausalLM.from_pretrained(small_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(small_model_dir)
    (demo,) = play_demonstrations(GuessNumber(), "mediocre", 1, seed=4)
    messages, tools = demo.messages, demo.tools
    ids, mask = sft.tokenize_episode(tokenizer, messages, tools)
    hard = sft.Example("guess_number", ids, mask)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    position = next(p for p in range(len(ids)) if mask[p] and tokens[p].lstrip("Ġ").isdigit())  # the first guess
    other = tokenizer.convert_tokens_to_ids("Ġ7" if tokens[position] != "Ġ7" else "Ġ8")
    soft = sft.Example("guess_number", ids, mask, soft_targets={position: {ids[position]: 0.25, other: 0.75}})
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        targets = [p for p in range(1, len(ids)) if mask[p]]
        expected_hard = -torch.stack([logprobs[p - 1, ids[p]] for p in targets]).mean()
        at = -(0.25 * logprobs[position - 1, ids[position]] + 0.75 * logprobs[position - 1, other])
        expected_soft = expected_hard + (at - -logprobs[position - 1, ids[position]]) / len(targets)
        assert torch.allclose(sft.sft_loss(model, [hard], tokenizer.pad_token_id), expected_hard, atol=1e-5)
        assert torch.allclose(sft.sft_loss(model, [soft], tokenizer.pad_token_id), expected_soft, atol=1e-5)
        padded = sft.sft_loss(model, [soft, sft.Example("x", ids[:40], mask[:40])], tokenizer.pad_token_id)
        assert torch.isfinite(padded), "right padding needs no attention mask"


def test_soft_targets_estimate_the_demonstrators_next_token_distribution_on_every_guessing_turn(small_model_dir):
    """The mediocre demonstrator guesses uniformly in the feasible interval. Every assistant turn gets soft
    targets; each is a distribution; every token it allows, read along the written prefix, decodes to a guess that
    lies inside the interval; and a number split into two tokens (`" 4"`, `"5"`) gets a target on both."""
    from agentic_rl_lab.envs.guess_number import feasible_interval

    tokenizer = AutoTokenizer.from_pretrained(small_model_dir)
    mediocre = GuessNumber.strategies["mediocre"]
    (demo,) = play_demonstrations(GuessNumber(), "mediocre", 1, seed=3)
    messages, tools = demo.messages, demo.tools
    example = sft.Example("guess_number", *sft.tokenize_episode(tokenizer, messages, tools))
    targets = sft.demonstrator_distribution(tokenizer, mediocre, messages, example, 64, seed="t")
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    spans = sft._runs(example.assistant_mask)
    assert len(turns) == len(spans) > 2
    multi_token_turns = 0
    for index, (start, end) in zip(turns, spans):
        low, high = feasible_interval(messages[:index], 1, 100)
        in_turn = sorted(p for p in targets if start <= p < end)
        if low == high:  # only one possible guess: nothing random to learn
            assert not in_turn
            continue
        assert in_turn, f"turn {index} (interval {low}..{high}) got no soft target"
        for position in in_turn:
            assert abs(sum(targets[position].values()) - 1) < 1e-9
            prefix = tokenizer.decode(example.input_ids[start:position])
            for token in targets[position]:
                number = (prefix + tokenizer.decode([token])).split('"n":')[1].strip()
                if number.endswith("}"):  # the number ended with the token before: it must be a possible guess
                    assert low <= int(number.rstrip("}")) <= high
                else:  # a number, or its first digits: some possible guess starts with it
                    assert any(str(k).startswith(number) for k in range(low, high + 1)), (number, low, high)
        multi_token_turns += len(in_turn) > 1
    assert multi_token_turns > 0, "this tokenizer splits some numbers in two: those turns need two targets"


def test_rehearsal_makes_every_nth_step_a_batch_of_the_other_examples(small_model_dir, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(small_model_dir)
    main = [sft.Example("main", [1, 2, 3, 4], [False, True, True, True]) for _ in range(8)]
    other = [sft.Example("other", [5, 6, 7], [False, True, True]) for _ in range(8)]
    seen, real_loss = [], sft.sft_loss

    def recording(model, batch, pad_id):
        seen.append({example.env for example in batch})
        return real_loss(model, batch, pad_id)

    rates, real_step = [], torch.optim.AdamW.step

    def stepping(optimizer, *args, **kwargs):
        rates.append(optimizer.param_groups[0]["lr"])
        return real_step(optimizer, *args, **kwargs)

    monkeypatch.setattr(sft, "sft_loss", recording)
    monkeypatch.setattr(torch.optim.AdamW, "step", stepping)
    config = sft.SFTConfig(sft_steps=9, batch_tokens=8, warmup_steps=1, min_learning_rate_ratio=1.0)
    sft.train_sft(model, main, config, 0, progress=False, rehearse=sft.Rehearsal(other, 6, 3, 4.0))
    assert seen == [{"main"}, {"main"}, {"other"}] * 3
    assert rates == pytest.approx([1e-3, 1e-3, 4e-3] * 3)  # the rehearsal batches at their own rate
    seen.clear()
    sft.train_sft(model, main, config, 0, progress=False, rehearse=sft.Rehearsal(other, 6, 3, until=6))
    assert seen == [{"main"}, {"main"}, {"other"}] * 2 + [{"main"}] * 3  # none from step 6 on


def test_weights_make_some_counted_tokens_weigh_more_in_the_mean(small_model_dir):
    model = AutoModelForCausalLM.from_pretrained(small_model_dir)
    plain = sft.Example("e", [1, 2, 3, 4, 5], [False, True, True, True, True])
    weighted = sft.Example("e", [1, 2, 3, 4, 5], [False, True, True, True, True], weights={2: 5.0})
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([plain.input_ids])).logits[0]
        each = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(plain.input_ids[1:]), reduction="none")
        assert sft.sft_loss(model, [plain], 0).item() == pytest.approx(each.mean().item(), rel=1e-4)
        expected = (each.sum() + 4 * each[1]) / 8  # position 2 is predicted by row 1, counted 5 times
        assert sft.sft_loss(model, [weighted], 0).item() == pytest.approx(expected.item(), rel=1e-4)
        uncounted = sft.Example("e", [1, 2, 3, 4, 5], [False, False, True, True, True], weights={1: 5.0})
        with pytest.raises(ValueError, match="does not count"):
            sft.sft_loss(model, [uncounted], 0)
