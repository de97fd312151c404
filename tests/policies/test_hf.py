"""HFPolicy: one batched generate call per turn, and the exact sampled tokens with their log-probabilities.

Runs on the SMALL tiny model (built once into the user cache, seconds). It plays badly, which is useful here: its
turns include malformed calls and odd tokenisations, the cases where the sampled tokens and the re-rendered
conversation can disagree.
"""

import pytest
import torch
from transformers import AutoTokenizer

from agentic_rl_lab.chat import assistant_text, parse_assistant_text
from agentic_rl_lab.envs import ENVIRONMENTS, GuessNumber, make
from agentic_rl_lab.grpo.tensors import trajectory_to_sequence
from agentic_rl_lab.policies import HFPolicy
from agentic_rl_lab.rollout import collect_group, collect_groups
from agentic_rl_lab.tiny import SMALL_CONFIG, build_tiny_model


@pytest.fixture(scope="module")
def model_dir():
    torch.set_num_threads(2)
    return build_tiny_model(SMALL_CONFIG, progress=False)


@pytest.fixture(scope="module")
def loaded(model_dir):
    """(model, tokenizer), loaded once: a policy wraps them without copying."""
    policy = HFPolicy.from_pretrained(model_dir)
    return policy.model, policy.tokenizer


@pytest.fixture(scope="module")
def group(loaded):
    """Eight guess_number trajectories sampled at temperature 1, with the policy that sampled them."""
    policy = HFPolicy(*loaded, seed=0, max_new_tokens=48)
    return collect_group(GuessNumber(), policy, seed=3, num_generations=8, progress=False), policy


def turns(group):
    """(history before the turn, the assistant message, its Completion) for every sampled turn of a group."""
    for trajectory in group.trajectories:
        for completion in trajectory.completions:
            index = completion.message_index
            yield trajectory.messages[:index], trajectory.messages[index], completion, trajectory.tools


def test_from_pretrained_loads_the_tiny_model_with_auto_classes(model_dir):
    policy = HFPolicy.from_pretrained(model_dir, temperature=0.7, seed=1)
    assert type(policy.model).__name__ == "LlamaForCausalLM" and not policy.model.training
    assert policy.tokenizer.convert_ids_to_tokens(policy.end_of_turn_id) == "<|im_end|>"
    assert policy.context_length == SMALL_CONFIG.max_context and "temperature=0.7" in repr(policy)


def test_every_turn_keeps_its_tokens_ending_at_end_of_turn_and_they_decode_to_the_message(group, loaded):
    _, tokenizer = loaded
    trajectories, policy = group
    eos = policy.end_of_turn_id
    for history, message, completion, _ in turns(trajectories):
        ids = completion.token_ids
        assert len(ids) == len(completion.logprobs) >= 1
        finished = ids[-1] == eos
        assert finished or len(ids) == policy.max_new_tokens
        text = tokenizer.decode(ids[:-1] if finished else ids, skip_special_tokens=False)
        parsed, _ = parse_assistant_text(text, call_id_prefix=f"call_{len(history)}_")
        assert {**parsed, "role": "assistant"} == message
    assert policy.counts["turns"] == sum(t.num_turns for t in trajectories.trajectories)
    assert policy.counts["sampled_tokens"] == sum(len(c.token_ids) for _, _, c, _ in turns(trajectories))


def test_logprobs_match_a_teacher_forced_forward_pass_at_the_temperature(loaded):
    model, tokenizer = loaded
    for temperature in (1.0, 0.7):
        policy = HFPolicy(model, tokenizer, temperature=temperature, seed=2, max_new_tokens=32)
        trajectories = collect_group(GuessNumber(), policy, seed=5, num_generations=4, progress=False)
        for history, _, completion, tools in list(turns(trajectories))[:12]:
            prompt = policy.prompt_ids(history, tools)
            ids = torch.tensor([prompt + completion.token_ids])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # position t predicts t+1
            expected = torch.log_softmax(logits / temperature, -1).gather(
                -1, torch.tensor(completion.token_ids)[:, None]
            )
            assert torch.allclose(torch.tensor(completion.logprobs), expected[:, 0], atol=1e-4)


def test_sampled_tokens_sit_where_the_template_puts_the_turn_unless_the_text_or_tokenisation_is_not_canonical(
    group, loaded
):
    """The documented divergence. Re-rendering a history puts a turn's *canonical* text and tokens in the
    conversation. They equal the sampled ones, as a contiguous span right after the prompt, unless:
    (a) the model wrote a valid call non-canonically (spacing, key order): the re-rendered text differs, or
    (b) the model sampled a non-canonical tokenisation of the text (" 5", "0" where the tokenizer makes " 50"), or
    (c) the model sampled bytes that are not valid UTF-8: they decode to U+FFFD, which re-encodes differently.
    A turn cut off by `max_new_tokens` also re-renders with an `<|im_end|>` it never sampled.
    Training must therefore use `Completion.token_ids`, never a re-tokenisation, and `HFPolicy` builds its own next
    prompts from them too (`test_the_policy_reads_its_own_sampled_ids_in_later_prompts`)."""
    _, tokenizer = loaded
    trajectories, policy = group
    kinds = {"canonical": 0, "text differs": 0, "tokens differ": 0}
    for history, message, completion, tools in turns(trajectories):
        prompt = tokenizer.apply_chat_template(history, tools=tools, add_generation_prompt=True, tokenize=True)
        prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
        encoded = tokenizer.apply_chat_template(
            [*history, message], tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids, mask = encoded["input_ids"], encoded["assistant_masks"]
        assert ids[: len(prompt)] == prompt, "the prompt is a prefix of the re-rendered conversation"
        assert mask[len(prompt) - 1] == 0 and mask[len(prompt)] == 1, "the turn starts right after the prompt"
        span_end = next((i for i in range(len(prompt), len(ids)) if not mask[i]), len(ids))
        rendered_turn = ids[len(prompt) : span_end]
        sampled = completion.token_ids
        sampled_text = tokenizer.decode(sampled, skip_special_tokens=False)
        if rendered_turn == sampled:
            kinds["canonical"] += 1
        elif tokenizer.decode(rendered_turn, skip_special_tokens=False) != sampled_text:
            kinds["text differs"] += 1
            assert sampled[-1] != policy.end_of_turn_id or message.get("tool_calls") or "\ufffd" in sampled_text, (
                "text without valid calls is kept verbatim: its rendering differs only if cut off or not UTF-8"
            )
            same_meaning, _ = parse_assistant_text(assistant_text(message), call_id_prefix=f"call_{len(history)}_")
            assert {**same_meaning, "role": "assistant"} == message
        else:
            kinds["tokens differ"] += 1
    assert kinds["canonical"] >= sum(kinds.values()) // 2, kinds


def test_the_policy_reads_its_own_sampled_ids_in_later_prompts(group, loaded):
    """Token in, token out: after a turn, the next prompt holds the ids the model sampled, not a re-rendering."""
    trajectories, policy = group
    for trajectory in trajectories.trajectories:
        for later in trajectory.completions[1:]:
            prompt = policy.prompt_ids(trajectory.messages[: later.message_index], trajectory.tools)
            position = 0
            for earlier in trajectory.completions:
                if earlier.message_index >= later.message_index:
                    break
                ids = earlier.token_ids
                starts = [i for i in range(position, len(prompt) - len(ids) + 1) if prompt[i : i + len(ids)] == ids]
                assert starts, "an earlier turn's sampled ids appear verbatim, in order, in the next prompt"
                position = starts[0] + len(ids)


def test_non_canonical_text_and_tokens_are_the_documented_divergence(loaded):
    _, tokenizer = loaded
    # (a) valid JSON without spaces: the environment reads the same call, the template writes it with spaces.
    written = '<tool_call>{"name":"guess","arguments":{"n":50}}</tool_call>'
    message, errors = parse_assistant_text(written)
    assert errors == [] and message["tool_calls"][0]["function"]["arguments"] == '{"n": 50}'
    assert assistant_text(message) == '<tool_call>{"name": "guess", "arguments": {"n": 50}}</tool_call>' != written
    # (b) the same text from other tokens: " 5" + "0" decodes to " 50", which the tokenizer encodes as one token.
    pieces = tokenizer.convert_tokens_to_ids(["Ġ5", "0"])
    assert tokenizer.decode(pieces) == " 50"
    assert tokenizer.encode(" 50", add_special_tokens=False) == tokenizer.convert_tokens_to_ids(["Ġ50"]) != pieces


class CountingModel:
    """Wraps a model and records the batch size of every `generate` call."""

    def __init__(self, model):
        self.model, self.batch_sizes = model, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def generate(self, **kwargs):
        self.batch_sizes.append(kwargs["input_ids"].shape[0])
        return self.model.generate(**kwargs)


def test_one_generate_call_per_turn_for_all_active_trajectories(loaded):
    model, tokenizer = loaded
    counting = CountingModel(model)
    policy = HFPolicy(counting, tokenizer, seed=0, max_new_tokens=48)
    groups = collect_groups(GuessNumber(), policy, seeds=[1, 2], num_generations=4, progress=False)
    lengths = [t.num_turns for g in groups for t in g.trajectories]
    assert counting.batch_sizes[0] == 8
    assert len(counting.batch_sizes) == max(lengths) == policy.counts["generate_calls"]
    assert sum(counting.batch_sizes) == sum(lengths)


def test_a_batch_acts_like_each_history_alone(loaded):
    """Left padding must not change what a history gets: greedy actions and logprobs, batched and one by one."""
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer, temperature=0.0, max_new_tokens=40)
    env = GuessNumber()
    histories = []
    for seed, guesses in [(0, []), (1, [50]), (2, [50, 25, 12])]:  # prompts of different lengths
        history = env.reset(seed)
        for n in guesses:
            call = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "guess", "arguments": f'{{"n": {n}}}'}}
                ],
            }
            history += [call, *env.step(call).observation]
        histories.append(history)
    batched = policy.act(histories, env.tool_schemas)
    for history, action in zip(histories, batched):
        (alone,) = policy.act([history], env.tool_schemas)
        assert alone.token_ids == action.token_ids and alone.message == action.message
        assert torch.allclose(torch.tensor(alone.logprobs), torch.tensor(action.logprobs), atol=1e-4)


def test_the_kv_cache_between_turns_changes_the_work_not_the_samples(loaded):
    """With the cache, each turn computes only its new tokens; what is sampled, and its logprobs, stay the same.
    Two groups at different stages, and turns cut off by max_new_tokens, exercise rows of unequal cached length."""
    model, tokenizer = loaded
    runs = {}
    for reuse in (False, True):
        policy = HFPolicy(model, tokenizer, seed=0, max_new_tokens=24, reuse_cache=reuse)
        groups = collect_groups(GuessNumber(), policy, seeds=[1, 2], num_generations=4, progress=False)
        runs[reuse] = policy, [c for g in groups for t in g.trajectories for c in t.completions]
    (plain, plain_turns), (cached, cached_turns) = runs[False], runs[True]
    assert [c.token_ids for c in plain_turns] == [c.token_ids for c in cached_turns]
    for a, b in zip(plain_turns, cached_turns):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    assert plain.counts["truncated_turns"] > 0, "some turns were cut off, so their cache ends without <|im_end|>"
    assert plain.counts["cached_tokens"] == 0
    assert cached.counts["cached_tokens"] > 2 * cached.counts["prefill_tokens"], "most of each prompt came cached"
    assert cached.counts["cached_tokens"] + cached.counts["prefill_tokens"] == plain.counts["prefill_tokens"]
    assert 0 < len(cached.cache) <= 8, "only the rows of the last call are kept"


def test_every_prompt_the_policy_read_is_the_training_sequence_up_to_that_turn(loaded):
    """Prompts grown turn by turn (`extend_prompt`, with the cache) are the trainer's tokens, exactly."""
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer, seed=1, max_new_tokens=24)
    read = []
    prompt_ids = policy.prompt_ids
    policy.prompt_ids = lambda history, tools: read.append((list(history), prompt_ids(history, tools))) or read[-1][1]
    group = collect_group(GuessNumber(), policy, seed=5, num_generations=4, progress=False)
    checked = 0
    for trajectory in group.trajectories:
        sequence = trajectory_to_sequence(trajectory, tokenizer)
        starts = [i for i, t in enumerate(sequence.turn) if t >= 0 and (i == 0 or sequence.turn[i - 1] != t)]
        for completion, start in zip(trajectory.completions, starts):
            history = trajectory.messages[: completion.message_index]
            prompts = [ids for seen, ids in read if seen == history]  # members can share a history (turn 1)
            assert prompts and all(prompt == sequence.input_ids[:start] for prompt in prompts)
            checked += 1
    assert checked == sum(t.num_turns for t in group.trajectories) > 8


def test_a_seed_makes_sampling_reproducible_and_leaves_the_global_rng_alone(loaded):
    model, tokenizer = loaded
    env = GuessNumber()
    histories = [env.reset(seed) for seed in range(6)]

    def sample(seed):
        return [a.token_ids for a in HFPolicy(model, tokenizer, seed=seed, max_new_tokens=32).act(histories, [])]

    torch.manual_seed(123)
    state = torch.get_rng_state()
    assert sample(0) == sample(0) != sample(1)
    assert torch.equal(torch.get_rng_state(), state)


def test_model_generation_defaults_do_not_change_the_sampling_distribution(loaded):
    """A checkpoint's generation_config (top_k=1 here, like greedy) must not override what HFPolicy asks for."""
    model, tokenizer = loaded
    original = model.generation_config.top_k
    model.generation_config.top_k = 1
    try:
        history = GuessNumber().reset(0)
        actions = HFPolicy(model, tokenizer, seed=0, max_new_tokens=24).act([history] * 16, [])
        assert len({tuple(a.token_ids) for a in actions}) > 1
    finally:
        model.generation_config.top_k = original


def test_turns_cut_by_max_new_tokens_are_kept_and_counted(loaded):
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer, seed=0, max_new_tokens=3)
    group = collect_group(GuessNumber(max_turns=2), policy, seed=0, num_generations=4, progress=False)
    for _, message, completion, _ in turns(group):
        assert len(completion.token_ids) == 3 and completion.token_ids[-1] != policy.end_of_turn_id
        assert "tool_calls" not in message
    assert policy.counts["truncated_turns"] == 8
    assert all(t.errors and t.errors[0].kind == "no_tool_call" for t in group.trajectories)


def test_plays_every_registered_environment_through_the_rollout_engine(loaded):
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer, seed=0, max_new_tokens=64)
    for name in ENVIRONMENTS:
        env = make(name, max_turns=4)
        group = collect_group(env, policy, seed=0, num_generations=2, progress=False)
        assert len(group.trajectories) == 2 and group.exceptions == []
        assert all(len(t.completions) == t.num_turns for t in group.trajectories)


def test_clear_errors_for_a_tokenizer_without_template_an_overlong_history_and_bad_settings(model_dir, loaded):
    model, _ = loaded
    bare = AutoTokenizer.from_pretrained(model_dir)
    bare.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        HFPolicy(model, bare)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with pytest.raises(ValueError, match="temperature"):
        HFPolicy(model, tokenizer, temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        HFPolicy(model, tokenizer, top_p=0)
    policy = HFPolicy(model, tokenizer, max_new_tokens=16)
    long_history = [{"role": "user", "content": "word " * SMALL_CONFIG.max_context}]
    with pytest.raises(ValueError, match=r"exceeds the model's context of \d+ tokens"):
        policy.act([long_history], [])


MEMORY_SCRIPT = """
import json, resource, sys, torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.policies.hf import HFPolicy

torch.manual_seed(0)
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
config = LlamaConfig(
    vocab_size=151_936, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
    num_key_value_heads=1, max_position_embeddings=4096, pad_token_id=tokenizer.pad_token_id,
)
model = LlamaForCausalLM(config).eval()
env = GuessNumber()
history = env.reset(seed=0)
HFPolicy(model, tokenizer, max_new_tokens=4, seed=0).act([history], env.tool_schemas)  # warm up: every buffer in place
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
policy = HFPolicy(model, tokenizer, max_new_tokens=48, seed=0)
actions = policy.act([history] * 64, env.tool_schemas)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print("RESULT " + json.dumps({
    "peak_growth": after - before,
    "lengths": [len(a.logprobs) for a in actions],
    "finite": all(-1e9 < x <= 0 for a in actions for x in a.logprobs),
}))
"""


def test_sampling_with_a_qwen_sized_vocabulary_keeps_one_step_of_logits_not_all_of_them(model_dir):
    """64 trajectories × 48 sampled tokens over 151,936 words: keeping every step's float32 logits would take
    1.9 GB (and more for their log-softmax); the policy keeps one step's at a time. Measured as the growth of the
    process's peak memory, in a fresh process."""
    import json
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(model_dir)], capture_output=True, text=True, timeout=600
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    report = json.loads(lines[-1].removeprefix("RESULT "))
    assert report["lengths"] == [48] * 64 and report["finite"], "every turn ran to max_new_tokens, logprobs kept"
    assert report["peak_growth"] < 400 * 2**20, f"peak memory grew by {report['peak_growth'] / 2**20:.0f} MiB"
