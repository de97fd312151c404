"""The lab's chat format: how a conversation of OpenAI messages becomes the text a language model reads and writes.

A chat model does not see JSON messages; it sees one long string, marked up by a *chat template*. Ours is ChatML,
the format of Qwen and Hermes models:

    <|im_start|>system
    You play a guessing game. Call the tool guess with an integer.

    # Tools
    - guess(n: integer): Guess the secret integer n (1 <= n <= 100).
    - interval(): Ask which integers can still hold the secret, given your guesses.
    Call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.<|im_end|>
    <|im_start|>user
    I am thinking of an integer from 1 to 100. Find it in as few guesses as possible.<|im_end|>
    <|im_start|>assistant
    <tool_call>{"name": "guess", "arguments": {"n": 50}}</tool_call><|im_end|>
    <|im_start|>tool
    lower<|im_end|>

The model writes only what follows `<|im_start|>assistant\\n`, up to and including `<|im_end|>`. Going the other
way, `parse_assistant_text` turns that text back into an OpenAI assistant message with `tool_calls`, which is
what the environments read.

A model's text can be anything, so parsing never raises. A call that cannot be read stays in the message's
`content` verbatim (the next prompt shows the model exactly what it wrote), and the environment, finding no
valid tool call, answers with an error observation. The parse errors come back as a list, to count as a metric.

The last part turns a conversation into **tokens**, token in / token out: the turns a model sampled keep their exact
sampled ids, and only the context between them (system, user and tool messages, turn headers) is tokenized. The
policy builds its prompts this way and the trainer its training sequences, so both see the same tokens.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentic_rl_lab.envs.base import Message

START_OF_TURN, END_OF_TURN = "<|im_start|>", "<|im_end|>"
"""The tokens that open and end every message; a model's turn is over when it samples `END_OF_TURN`."""
TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"
SPECIAL_TOKENS = ("<|endoftext|>", START_OF_TURN, END_OF_TURN, "<|pad|>")
"""The tokenizer's special tokens: document separator, message start, message end, padding."""

CHAT_TEMPLATE = """\
{%- macro text_of(content) -%}
    {%- if content is string -%}{{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content -%}{%- if part.text is defined -%}{{- part.text -}}{%- endif -%}{%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- macro type_of(spec) -%}
    {%- if spec.enum is defined -%}{{- spec.enum | join('|') -}}
    {%- elif spec.type == 'array' and spec['items'] is defined and spec['items'].type is defined -%}
        {{- 'array of ' + spec['items'].type -}}
    {%- elif spec.type is defined and spec.type is string -%}{{- spec.type -}}
    {%- else -%}{{- 'any' -}}
    {%- endif -%}
{%- endmacro -%}
{%- macro tool_call_text(call) -%}
    {%- set function = call.function if call.function is defined else call -%}
    {%- set arguments = function.arguments if function.arguments is defined else {} -%}
    {%- set name = function.name if function.name is defined else none -%}
    {{- '<tool_call>{"name": ' + (name | tojson) + ', "arguments": ' -}}
    {{- (arguments if arguments is string else arguments | tojson) + '}</tool_call>' -}}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\\n' -}}
    {%- if has_system -%}{{- text_of(messages[0].content) + '\\n\\n' -}}{%- endif -%}
    {{- '# Tools\\n' -}}
    {%- for tool in tools -%}
        {%- set f = tool.function if tool.function is defined else tool -%}
        {%- set params = f.parameters if f.parameters is defined else {} -%}
        {%- set required = params.required if params.required is defined else [] -%}
        {{- '- ' + f.name + '(' -}}
        {%- if params.properties is defined -%}
            {%- for name, spec in params.properties.items() -%}
                {{- name + ('' if name in required else '?') + ': ' + type_of(spec) -}}
                {%- if not loop.last -%}{{- ', ' -}}{%- endif -%}
            {%- endfor -%}
        {%- endif -%}
        {{- ')' + (': ' + f.description if f.description is defined and f.description else '') + '\\n' -}}
    {%- endfor -%}
    {{- 'Call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.<|im_end|>\\n' -}}
{%- elif has_system -%}
    {{- '<|im_start|>system\\n' + text_of(messages[0].content) + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if loop.first and has_system -%}
    {%- elif message.role == 'assistant' -%}
        {{- '<|im_start|>assistant\\n' -}}
        {%- generation -%}
            {{- text_of(message.content) -}}
            {%- if message.tool_calls is defined and message.tool_calls -%}
                {%- for call in message.tool_calls -%}
                    {%- if not loop.first or text_of(message.content) -%}{{- '\\n' -}}{%- endif -%}
                    {{- tool_call_text(call) -}}
                {%- endfor -%}
            {%- endif -%}
            {{- '<|im_end|>' -}}
        {%- endgeneration -%}
        {{- '\\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\\n' + text_of(message.content) + '<|im_end|>\\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""
"""The chat template (jinja, as Hugging Face tokenizers store it). Roles: system, user, assistant, tool.

- Tools, when given, become a compact block in the system message: one line per tool, `name(arg: type, opt?: type)`.
- Assistant `tool_calls` render as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one per line after
  the message's text. OpenAI keeps `arguments` as a JSON *string*; a string is rendered verbatim, a dict as JSON.
- Tool results are `tool` turns in call order; `tool_call_id` is not shown (the order says which call it answers).
- What the assistant writes (its text, calls and `<|im_end|>`) sits inside `{% generation %}`, so
  `tokenizer.apply_chat_template(..., return_dict=True, return_assistant_tokens_mask=True)` marks exactly the
  tokens that supervised fine-tuning trains on.
"""

PARSE_ERROR_KINDS = ("malformed_tool_call", "unclosed_tool_call", "arguments_not_object")
"""Every way the text of a turn can fail to parse: a `<tool_call>` block that is not `{"name": ..., "arguments":
...}` JSON, a `<tool_call>` never closed (often a generation cut off by `max_new_tokens`), arguments that are
not a JSON object."""

_BLOCK = re.compile(re.escape(TOOL_CALL_START) + "(.*?)" + re.escape(TOOL_CALL_END), re.DOTALL)


def render(
    messages: list[Message], tools: list[dict[str, Any]] | None = None, add_generation_prompt: bool = False
) -> str:
    """Render a conversation with `CHAT_TEMPLATE` exactly as `tokenizer.apply_chat_template(..., tokenize=False)`
    does, without needing a tokenizer (same jinja settings and `tojson` filter as transformers)."""
    return _compiled_template().render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)


def assistant_text(message: Message) -> str:
    """What a model writes for `message` under the template: the text between `<|im_start|>assistant\\n` and
    `<|im_end|>`. For a message parsed from model text, this is the *canonical* form of what the model wrote."""
    rendered = render([{**message, "role": "assistant"}])
    return rendered[len("<|im_start|>assistant\n") : -len(END_OF_TURN + "\n")]


def parse_assistant_text(text: str, call_id_prefix: str = "call_") -> tuple[Message, list[dict[str, str]]]:
    """Turn a model's turn (the text before `<|im_end|>`) into an OpenAI assistant message, and list what went wrong.

    - Each `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` becomes a tool call with id
      `f"{call_id_prefix}{i}"` and `arguments` as a JSON string (compact `json.dumps`, like vLLM's Hermes parser).
    - The text outside the calls is `content` (`None` if empty). Without any valid call, `content` is the text
      exactly as written, so the conversation re-renders to what the model wrote.
    - A block that cannot be read stays in `content` verbatim and yields an error; arguments that are valid JSON
      but not an object are kept (the environment then reports `malformed_arguments`).

    Never raises. Errors are `{"kind": one of PARSE_ERROR_KINDS, "message": ...}`, like an environment's.
    """
    errors: list[dict[str, str]] = []
    tool_calls: list[dict[str, Any]] = []
    kept_text: list[str] = []  # text outside valid calls, including blocks that could not be read
    position = 0
    for match in _BLOCK.finditer(text):
        kept_text.append(text[position : match.start()])
        position = match.end()
        call, problem = _read_call(match.group(1), f"{call_id_prefix}{len(tool_calls)}")
        if call is None:
            errors.append({"kind": "malformed_tool_call", "message": problem})
            kept_text.append(match.group(0))
            continue
        if problem:
            errors.append({"kind": "arguments_not_object", "message": problem})
        tool_calls.append(call)
    rest = text[position:]
    if TOOL_CALL_START in rest:
        errors.append({"kind": "unclosed_tool_call", "message": f"{TOOL_CALL_START} was opened but never closed"})
    kept_text.append(rest)

    if not tool_calls:
        return {"role": "assistant", "content": text}, errors
    content = "".join(kept_text).strip()
    return {"role": "assistant", "content": content or None, "tool_calls": tool_calls}, errors


def _read_call(body: str, call_id: str) -> tuple[dict[str, Any] | None, str]:
    """One `<tool_call>` body -> (OpenAI tool call or None, a description of the problem or "")."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; deep nesting can recurse
        return None, f"the tool call is not valid JSON ({getattr(exc, 'msg', type(exc).__name__)})"
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None, 'a tool call must be a JSON object {"name": "...", "arguments": {...}}'
    arguments = value.get("arguments", {})
    try:
        arguments_json = json.dumps(arguments, ensure_ascii=False)
    except (ValueError, RecursionError):  # e.g. NaN is allowed by loads and dumps, but cycles cannot occur
        return None, "the tool call's arguments cannot be written back as JSON"
    function = {"name": value["name"], "arguments": arguments_json}
    problem = "" if isinstance(arguments, dict) else f"the arguments of {value['name']} are not a JSON object"
    return {"id": call_id, "type": "function", "function": function}, problem


# ----- from a conversation to tokens, token in / token out -------------------------------------------------------
@dataclass
class ChatTokens:
    """A conversation as the tokens a model reads, with the turns it sampled spliced in. All lists have one entry
    per token."""

    input_ids: list[int] = field(default_factory=list)
    assistant_mask: list[int] = field(default_factory=list)
    """1 where the policy sampled the token (the trainer takes its loss there), 0 on context."""
    sampled_logprobs: list[float] = field(default_factory=list)
    """The sampler's log-probability of each sampled token; 0.0 on context (never used there)."""
    turn: list[int] = field(default_factory=list)
    """Which assistant turn each token belongs to (0, 1, ...), -1 on context: per-turn credit uses it."""

    def __len__(self) -> int:
        return len(self.input_ids)

    def append(self, ids: list[int], turn: int = -1, logprobs: list[float] | None = None) -> None:
        """Add context (`turn=-1`) or a sampled turn's ids with their logprobs."""
        sampled = turn >= 0
        self.input_ids += ids
        self.assistant_mask += [int(sampled)] * len(ids)
        self.sampled_logprobs += list(logprobs) if sampled and logprobs else [0.0] * len(ids)
        self.turn += [turn] * len(ids)


def splice_sampled_tokens(
    tokenizer: Any,
    messages: list[Message],
    tools: list[dict[str, Any]] | None,
    sampled: dict[int, tuple[list[int], list[float] | None]],
    add_generation_prompt: bool = False,
) -> ChatTokens:
    """The conversation as tokens, with the assistant messages in `sampled` (message index -> (ids, logprobs))
    given by their sampled ids and everything else tokenized from the tokenizer's chat template.

    Without `add_generation_prompt` it stops after the last sampled message (a training sequence); with it, it
    continues to the end of `messages` and the `<|im_start|>assistant` header (a prompt).

    Why not render the whole chat and tokenize it? The text the model sampled and the text the template renders
    from the *parsed* message can tokenize differently (other JSON spacing, another BPE split), and training on
    tokens the model never produced drifts off-policy (verl and verifiers report this breaking multi-turn
    training). With ChatML every turn boundary is a special token, so tokenizing the pieces gives the ids of the
    whole; `tests/grpo/test_trainer.py` and `tests/policies/test_hf.py` check it against the prompts the policy saw.
    """
    tokens = ChatTokens()
    rendered_until = 0  # characters of the rendered conversation already turned into tokens
    for turn, k in enumerate(sorted(sampled)):
        token_ids, logprobs = sampled[k]
        if messages[k].get("role") != "assistant":
            raise ValueError(f"sampled tokens point at message {k}, which is not an assistant message")
        # The context the policy read before this turn, minus what is already in the sequence.
        prompt = apply_template(tokenizer, messages[:k], tools, add_generation_prompt=True)
        tokens.append(tokenizer.encode(prompt[rendered_until:], add_special_tokens=False))
        tokens.append(list(token_ids), turn, logprobs)
        rendered_until = rendered_through(tokenizer, messages[: k + 1], tools, token_ids)
    if add_generation_prompt:
        tail = apply_template(tokenizer, messages, tools, add_generation_prompt=True)[rendered_until:]
        tokens.append(tokenizer.encode(tail, add_special_tokens=False))
    return tokens


def extend_prompt(
    tokenizer: Any,
    messages: list[Message],
    tools: list[dict[str, Any]] | None,
    prompt_ids: list[int],
    k: int,
    token_ids: list[int],
) -> list[int]:
    """The next prompt, grown from the last one: `prompt_ids` (what assistant message `k`, the last in `messages`,
    was sampled from), its sampled `token_ids`, then the messages after it and the `<|im_start|>assistant` header.

    The same ids as `splice_sampled_tokens(..., add_generation_prompt=True)`, in two renders instead of two per
    turn: a policy that remembers its last prompt need not rebuild the whole conversation every turn.
    """
    until = rendered_through(tokenizer, messages[: k + 1], tools, token_ids)
    tail = apply_template(tokenizer, messages, tools, add_generation_prompt=True)[until:]
    return list(prompt_ids) + list(token_ids) + tokenizer.encode(tail, add_special_tokens=False)


def rendered_through(
    tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]] | None, token_ids: list[int]
) -> int:
    """How many characters of the rendered `messages` the last (assistant) message's sampled ids stand for: up to
    its end-of-turn marker, or to just before it when the turn was cut off by max_new_tokens (the template then
    adds the marker back, as context)."""
    until = apply_template(tokenizer, messages, tools).rindex(END_OF_TURN)
    if list(token_ids[-1:]) == [tokenizer.convert_tokens_to_ids(END_OF_TURN)]:
        until += len(END_OF_TURN)
    return until


def apply_template(
    tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]] | None, add_generation_prompt: bool = False
) -> str:
    """The tokenizer's chat template's text for `messages` (on the lab's models, the same as `render`)."""
    return tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False
    )


_TEMPLATE: Any = None


def _compiled_template() -> Any:
    """`CHAT_TEMPLATE` compiled the way transformers compiles chat templates (jinja2 is imported only here)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        from jinja2 import nodes
        from jinja2.ext import Extension, loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        class GenerationTag(Extension):
            """`{% generation %}...{% endgeneration %}` renders its body unchanged; in transformers the same tag
            also records which characters the assistant wrote (`return_assistant_tokens_mask=True`)."""

            tags = {"generation"}

            def parse(self, parser: Any) -> Any:
                lineno = next(parser.stream).lineno
                body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
                return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

            def _body(self, caller: Any) -> str:
                return caller()

        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols]
        )
        environment.filters["tojson"] = lambda value, **kwargs: json.dumps(value, ensure_ascii=False, **kwargs)
        _TEMPLATE = environment.from_string(CHAT_TEMPLATE)
    return _TEMPLATE
