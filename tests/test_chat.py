"""The chat format: the template renders every role and tool call, and parsing model text never raises."""

import json
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentic_rl_lab.chat import (
    CHAT_TEMPLATE,
    PARSE_ERROR_KINDS,
    TOOL_CALL_END,
    TOOL_CALL_START,
    assistant_text,
    parse_assistant_text,
    render,
)
from agentic_rl_lab.envs import ENVIRONMENTS, GuessNumber, tool_call_message
from agentic_rl_lab.sft import play_demonstrations, tokenize_episode
from agentic_rl_lab.tiny import SMALL_CONFIG, train_tokenizer


def episodes():
    """A few scripted episodes of every registered environment: (messages, tools)."""
    demos = [t for env in ENVIRONMENTS.values() for t in play_demonstrations(env(), "random", 3, seed=5)]
    return [(t.messages, t.tools) for t in demos]


@pytest.fixture(scope="module")
def tokenizer():
    """A tokenizer trained in a fraction of a second, carrying the lab's chat template."""
    return train_tokenizer([render(m, t) for m, t in episodes()], SMALL_CONFIG)


# ----- rendering ------------------------------------------------------------------------------------------------------
def test_a_guess_number_conversation_renders_as_documented():
    env = GuessNumber()
    history = env.reset(seed=0)
    call = tool_call_message("guess", {"n": 50})
    history += [call, *env.step(call).observation]
    assert render(history, env.tool_schemas, add_generation_prompt=True) == (
        "<|im_start|>system\n"
        "You play a guessing game. Call the tool guess with an integer.\n\n"
        "# Tools\n"
        "- guess(n: integer): Guess the secret integer n (1 <= n <= 100).\n"
        "- interval(): Ask which integers can still hold the secret, given your guesses.\n"
        'Call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.<|im_end|>\n'
        "<|im_start|>user\n"
        "I am thinking of an integer from 1 to 100. Find it in as few guesses as possible.<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>{"name": "guess", "arguments": {"n": 50}}</tool_call><|im_end|>\n'
        "<|im_start|>tool\n"
        f"{history[-1]['content']}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_system_block_appears_only_for_a_system_message_or_tools():
    user = {"role": "user", "content": "hi"}
    assert render([user]) == "<|im_start|>user\nhi<|im_end|>\n"
    assert render([{"role": "system", "content": "S"}, user]).startswith(
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user"
    )
    tools = [{"type": "function", "function": {"name": "f", "description": "", "parameters": {"type": "object"}}}]
    assert render([user], tools).startswith("<|im_start|>system\n# Tools\n- f()\nCall a tool with")


def test_tools_block_is_compact_and_shows_types_enums_and_optional_arguments():
    tools = [tool for env_class in ENVIRONMENTS.values() for tool in env_class().tool_schemas]
    block = render([], tools)
    assert "- guess(n: integer): Guess the secret integer" in block
    assert "- move(direction: north|east|south|west): Move one cell" in block
    if "inbox_search" in ENVIRONMENTS:
        assert "- search_inbox(keywords: array of string, max_results?: integer): " in block


def test_tool_calls_render_after_the_text_one_per_line_and_arguments_strings_verbatim():
    message = {
        "role": "assistant",
        "content": "Two guesses.",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "guess", "arguments": '{"n":  7}'}},
            {"id": "b", "type": "function", "function": {"name": "guess", "arguments": {"n": 8}}},
        ],
    }
    assert assistant_text(message) == (
        'Two guesses.\n<tool_call>{"name": "guess", "arguments": {"n":  7}}</tool_call>\n'
        '<tool_call>{"name": "guess", "arguments": {"n": 8}}</tool_call>'
    )
    tool_reply = {"role": "tool", "tool_call_id": "a", "content": "lower"}
    assert render([tool_reply]) == "<|im_start|>tool\nlower<|im_end|>\n"


def test_render_matches_transformers_apply_chat_template(tokenizer):
    assert tokenizer.chat_template == CHAT_TEMPLATE
    for messages, tools in episodes():
        for generation_prompt in (False, True):
            expected = tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
            )
            assert render(messages, tools, add_generation_prompt=generation_prompt) == expected


def test_assistant_mask_covers_exactly_what_the_assistant_wrote(tokenizer):
    for messages, tools in episodes():
        ids, mask = tokenize_episode(tokenizer, messages, tools)
        spans, current = [], []
        for token, is_assistant in zip(ids, mask):
            if is_assistant:
                current.append(token)
            elif current:
                spans.append(current)
                current = []
        assistant = [m for m in messages if m["role"] == "assistant"]
        assert [tokenizer.decode(span) for span in spans] == [assistant_text(m) + "<|im_end|>" for m in assistant]


# ----- parsing --------------------------------------------------------------------------------------------------------
def test_a_well_formed_call_parses_into_an_openai_tool_call():
    message, errors = parse_assistant_text('<tool_call>{"name": "guess", "arguments": {"n": 50}}</tool_call>')
    assert errors == []
    assert message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "guess", "arguments": '{"n": 50}'}}],
    }


def test_text_around_calls_is_content_and_ids_follow_the_prefix():
    text = 'Let me try.\n<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b"}</tool_call>'
    message, errors = parse_assistant_text(text, call_id_prefix="call_7_")
    assert errors == []
    assert message["content"] == "Let me try."
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("call_7_0", "a", "{}"),
        ("call_7_1", "b", "{}"),
    ]


def test_plain_text_stays_exactly_as_written_and_the_env_asks_for_a_tool_call():
    message, errors = parse_assistant_text("  I think it is 42. ")
    assert message == {"role": "assistant", "content": "  I think it is 42. "} and errors == []
    env = GuessNumber()
    env.reset(seed=0)
    assert [e["kind"] for e in env.step(message).info["errors"]] == ["no_tool_call"]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('<tool_call>{"name": "guess", "arguments": {"n": 5}</tool_call>', "malformed_tool_call"),  # a brace short
        ("<tool_call>guess(5)</tool_call>", "malformed_tool_call"),
        ('<tool_call>{"arguments": {"n": 5}}</tool_call>', "malformed_tool_call"),  # no name
        ('<tool_call>["guess", 5]</tool_call>', "malformed_tool_call"),
        ('<tool_call>{"name": "guess", "arguments": {"n": 5}}', "unclosed_tool_call"),  # cut off by max_new_tokens
    ],
)
def test_an_unreadable_call_stays_in_the_content_and_becomes_an_error_observation(text, kind):
    message, errors = parse_assistant_text(text)
    assert [e["kind"] for e in errors] == [kind]
    assert "tool_calls" not in message and message["content"] == text
    assert assistant_text(message) == text, "the next prompt shows the model exactly what it wrote"
    env = GuessNumber()
    env.reset(seed=0)
    assert [e["kind"] for e in env.step(message).info["errors"]] == ["no_tool_call"]


def test_arguments_that_are_not_an_object_reach_the_env_as_malformed_arguments():
    message, errors = parse_assistant_text('<tool_call>{"name": "guess", "arguments": "n=5"}</tool_call>')
    assert [e["kind"] for e in errors] == ["arguments_not_object"]
    assert message["tool_calls"][0]["function"]["arguments"] == '"n=5"'
    assert assistant_text(message) == '<tool_call>{"name": "guess", "arguments": "n=5"}</tool_call>'
    env = GuessNumber()
    env.reset(seed=0)
    assert [e["kind"] for e in env.step(message).info["errors"]] == ["malformed_arguments"]


def test_a_bad_call_next_to_a_good_one_keeps_the_good_one():
    text = '<tool_call>{"name": "guess", "arguments": {"n": 5}}</tool_call>\n<tool_call>{oops}</tool_call>'
    message, errors = parse_assistant_text(text)
    assert [e["kind"] for e in errors] == ["malformed_tool_call"]
    assert [c["function"]["arguments"] for c in message["tool_calls"]] == ['{"n": 5}']
    assert message["content"] == "<tool_call>{oops}</tool_call>"


# ----- fuzzing --------------------------------------------------------------------------------------------------------
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
"""Any text without lone surrogates (which no tokenizer can encode)."""
FRAGMENTS = st.sampled_from([TOOL_CALL_START, TOOL_CALL_END, '"name"', '"arguments"', '"guess"', *'{}[]":,5\n '])
NEAR_MISSES = st.lists(st.one_of(FRAGMENTS, TEXT), max_size=25).map("".join)
"""Text made of tool-call syntax and noise: the malformed calls a half-trained model writes."""


def no_markup(text: str) -> bool:
    return TOOL_CALL_START not in text and TOOL_CALL_END not in text


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(TEXT, NEAR_MISSES))
def test_parsing_never_raises_and_always_gives_the_env_a_valid_action(text):
    message, errors = parse_assistant_text(text)
    assert message["role"] == "assistant"
    assert all(e["kind"] in PARSE_ERROR_KINDS and e["message"] for e in errors)
    for call in message.get("tool_calls", []):
        assert isinstance(call["function"]["name"], str)
        json.loads(call["function"]["arguments"])  # always a JSON string, even for bad arguments
    env = GuessNumber()
    env.reset(seed=0)
    result = env.step(message)  # never raises
    if not message.get("tool_calls"):
        assert [e["kind"] for e in result.info["errors"]] == ["no_tool_call"]
    assert isinstance(render([message]), str)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    content=st.one_of(st.none(), TEXT),
    calls=st.lists(st.tuples(TEXT, st.dictionaries(TEXT, JSON_VALUES, max_size=4)), min_size=1, max_size=3),
)
def test_valid_calls_round_trip_through_render_and_parse(content, calls):
    """render -> parse gives back the message; parse -> render gives back the text. Strings that contain the
    markup itself (`</tool_call>` inside an argument) are the Hermes format's one blind spot, so they are left out."""
    assume(content is None or (content == content.strip() and content and no_markup(content)))
    assume(all(no_markup(name) and no_markup(json.dumps(arguments, ensure_ascii=False)) for name, arguments in calls))
    message = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }
    text = assistant_text(message)
    parsed, errors = parse_assistant_text(text)
    assert errors == []
    assert parsed == message
    assert assistant_text(parsed) == text


def test_parser_survives_deep_nesting_and_huge_inputs():
    deep = TOOL_CALL_START + "[" * 100_000 + TOOL_CALL_END
    message, errors = parse_assistant_text(deep)
    assert [e["kind"] for e in errors] == ["malformed_tool_call"] and "tool_calls" not in message
    rng = random.Random(0)
    noise = "".join(rng.choice(["<tool_call>", "</tool_call>", '{"name": "guess"', "}", " "]) for _ in range(20_000))
    parse_assistant_text(noise)
