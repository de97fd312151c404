"""OpenAIPolicy: the real `openai` client against a scripted OpenAI-compatible server on 127.0.0.1."""

import itertools
import random
import re
import traceback

import pytest
from chat_server import ChatServer, RecordedRequest, Reply, completion, error, malformed, tool_call

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.envs.base import tool_exchanges
from agentic_rl_lab.envs.guess_number import expert
from agentic_rl_lab.policies.openai_api import OpenAIPolicy, OpenAIPolicyError
from agentic_rl_lab.policies.scripted import ScriptedPolicy
from agentic_rl_lab.rollout import RolloutError, collect_group, collect_groups

KEY = "sk-test-0123456789-not-a-real-key"
KEY_ENV = "LAB_TEST_API_KEY"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key lives in the test's own variable; nothing from the machine's environment leaks in."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTIC_RL_LAB_BASE_URL", "AGENTIC_RL_LAB_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # traffic stays on this machine even where a proxy is set
    monkeypatch.setenv(KEY_ENV, KEY)


def make_policy(server: ChatServer, **overrides) -> OpenAIPolicy:
    """A policy with test-sized timeouts and waits."""
    settings = {"base_url": server.url, "api_key_env": KEY_ENV, "timeout": 2.0, "max_retries": 2, "backoff_base": 0.01}
    return OpenAIPolicy("test-model", **{**settings, **overrides})


def binary_search(request: RecordedRequest) -> dict:
    """Answer like a model that plays binary search, reading its state from the messages the client sent.

    It only plays well if every earlier assistant message and tool reply arrived intact."""
    message = expert(request.messages, random.Random(0))
    return completion(None, message["tool_calls"])


def failed(policy: OpenAIPolicy) -> OpenAIPolicyError:
    """Send one history; the request must fail for good, and the policy returns the error in its place."""
    (result,) = policy.act([[{"role": "user", "content": "hi"}]], [])
    assert isinstance(result, OpenAIPolicyError), f"expected a failure, got {result!r}"
    return result


def test_a_whole_episode_is_played_through_the_real_client(chat_server: ChatServer) -> None:
    env = GuessNumber()
    chat_server.default = binary_search
    policy = make_policy(chat_server)
    group = collect_group(env, policy, seed=7, num_generations=3, progress=False)
    scripted = collect_group(env, ScriptedPolicy(env, "expert"), seed=7, num_generations=3, progress=False)

    assert group.exceptions == []
    assert [t.messages for t in group.trajectories] == [t.messages for t in scripted.trajectories]
    assert all(t.outcome.success and t.completions == [] for t in group.trajectories), "API models give no tokens"
    turns = sum(t.num_turns for t in group.trajectories)
    assert policy.usage.requests == len(chat_server.requests) == turns
    sent = [request.response["usage"] for request in chat_server.requests]
    assert policy.usage.prompt_tokens == sum(u["prompt_tokens"] for u in sent)
    assert policy.usage.completion_tokens == sum(u["completion_tokens"] for u in sent)


def test_the_request_carries_history_and_tools_and_the_reply_is_a_message_the_env_accepts(
    chat_server: ChatServer,
) -> None:
    env = GuessNumber()
    history = env.reset(0)
    wrong = env.hidden_state()["secret"] % 100 + 1
    calls = [tool_call("guess", {"n": wrong}, "call_a"), tool_call("guess", '{"n": ', "call_b")]
    chat_server.push(completion("Let me guess.", calls), completion("I give up."))
    policy = make_policy(chat_server, temperature=0.7, max_tokens=64, extra_body={"top_k": 20})

    (action,) = policy.act([history], env.tool_schemas)
    body = chat_server.requests[0].body
    assert body["model"] == "test-model" and body["messages"] == history and body["tools"] == env.tool_schemas
    assert (body["temperature"], body["max_tokens"], body["top_k"]) == (0.7, 64, 20)
    assert action.message == {"role": "assistant", "content": "Let me guess.", "tool_calls": calls}
    assert action.token_ids is None and action.logprobs is None

    result = env.step(action.message)
    assert [m["tool_call_id"] for m in result.observation] == ["call_a", "call_b"]
    assert result.observation[0]["content"].split(" than ")[0] in ("higher", "lower")
    assert [e["kind"] for e in result.info["errors"]] == ["malformed_arguments"]

    (text,) = policy.act([history], env.tool_schemas)
    assert text.message == {"role": "assistant", "content": "I give up."}


def test_at_most_max_concurrency_requests_are_in_flight_and_answers_keep_their_order(
    chat_server: ChatServer,
) -> None:
    def slow_echo(request: RecordedRequest) -> Reply:
        index = int(request.messages[-1]["content"])
        return Reply(completion(f"answer {index}"), delay=0.05 * (7 - index))  # later histories finish first

    chat_server.default = slow_echo
    policy = make_policy(chat_server, max_concurrency=3)
    actions = policy.act([[{"role": "user", "content": str(i)}] for i in range(7)], [])
    assert [a.message["content"] for a in actions] == [f"answer {i}" for i in range(7)]
    assert chat_server.max_in_flight == 3
    assert "tools" not in chat_server.requests[0].body, "an empty tool list is not sent"


def test_rate_limits_and_server_errors_are_retried_with_growing_backoff(chat_server: ChatServer) -> None:
    chat_server.push(error(429), error(500), error(503), completion("ok"))
    policy = make_policy(chat_server, max_retries=3, backoff_base=0.05)
    (action,) = policy.act([[{"role": "user", "content": "hi"}]], [])
    assert action.message["content"] == "ok"
    arrivals = [request.received for request in chat_server.requests]
    waits = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert len(waits) == 3 and waits[0] >= 0.025 and waits[2] >= 0.1 and waits[2] > waits[0], "2**k growth"
    assert (policy.usage.retries, policy.usage.requests, policy.usage.failures) == (3, 1, 0)


def test_retry_after_is_honoured_up_to_max_backoff(chat_server: ChatServer) -> None:
    chat_server.push(error(429, retry_after=0.3), completion("ok"), error(503, retry_after=30), completion("ok"))
    patient = make_policy(chat_server, backoff_base=0.001, max_backoff=5)
    hasty = make_policy(chat_server, backoff_base=0.001, max_backoff=0.2)
    patient.act([[{"role": "user", "content": "hi"}]], [])
    hasty.act([[{"role": "user", "content": "hi"}]], [])
    first, second, third, fourth = (request.received for request in chat_server.requests)
    assert second - first >= 0.3, "the server asked for 0.3 s, far more than the 0.001 s backoff"
    assert 0.2 <= fourth - third < 3, "the server asked for 30 s, capped at max_backoff=0.2"


def test_a_server_that_never_answers_in_time_gives_a_clear_error_after_the_retries(chat_server: ChatServer) -> None:
    chat_server.push(Reply(completion("too late"), delay=1.0), completion("ok"))
    policy = make_policy(chat_server, timeout=0.2, max_retries=2)
    (action,) = policy.act([[{"role": "user", "content": "hi"}]], [])
    assert action.message["content"] == "ok", "one timeout, then a retry that succeeds"

    chat_server.default = Reply(completion("too late"), delay=1.0)
    failure = failed(policy)
    assert "timed out after 0.2 s" in str(failure)
    assert chat_server.url in str(failure) and "3 attempts" in str(failure)
    assert (failure.attempts, failure.status, failure.endpoint) == (3, None, chat_server.url)
    assert len(chat_server.requests) == 2 + 3
    assert (policy.usage.failures, policy.usage.retries) == (1, 3)


def test_a_malformed_body_is_retried_and_then_reported(chat_server: ChatServer) -> None:
    chat_server.push(malformed(), completion("ok"), malformed(), malformed())
    policy = make_policy(chat_server, max_retries=1)
    assert policy.act([[{"role": "user", "content": "hi"}]], [])[0].message["content"] == "ok"
    assert "not valid JSON" in str(failed(policy))


def test_client_errors_are_not_retried_and_a_rejected_key_names_its_variable(chat_server: ChatServer) -> None:
    chat_server.push(error(401, "Incorrect API key provided"), error(400, "context too long"))
    policy = make_policy(chat_server)
    failure = failed(policy)
    assert re.search(f"HTTP 401.*{KEY_ENV}", str(failure))
    assert (failure.attempts, failure.status) == (1, 401)
    assert re.search("after 1 attempt: HTTP 400: .*context too long", str(failed(policy)))
    assert len(chat_server.requests) == 2


def test_a_history_whose_requests_keep_failing_is_recorded_on_its_group(chat_server: ChatServer) -> None:
    env = GuessNumber()
    env.reset(11)
    assert env.hidden_state()["secret"] not in (10, 20, 30)

    def one_doomed_member(opening_guesses):
        def script(request: RecordedRequest) -> Reply | dict:
            guesses = [arguments["n"] for _, arguments, _ in tool_exchanges(request.messages)]
            if not guesses:  # each member opens differently, so the histories can be told apart
                return completion(None, [tool_call("guess", {"n": next(opening_guesses)}, "call_2")])
            if guesses[0] == 10:
                return error(503, "this replica is down")
            return binary_search(request)

        return script

    chat_server.default = one_doomed_member(iter([10, 20, 30]))
    policy = make_policy(chat_server, max_retries=1)
    (group,) = collect_groups(env, policy, [11], num_generations=3, max_exceptions=1, progress=False)
    assert len(group.trajectories) == 2 and all(t.outcome.success for t in group.trajectories)
    (failure,) = group.exceptions
    assert failure.type == "OpenAIPolicyError"
    assert chat_server.url in failure.message and "2 attempts" in failure.message and "503" in failure.message
    assert KEY not in group.model_dump_json()

    chat_server.default = one_doomed_member(iter([10, 20, 30]))
    with pytest.raises(RolloutError, match="max_exceptions=0"):
        collect_groups(env, policy, [11], num_generations=3, max_exceptions=0, progress=False)


def test_the_key_is_sent_as_a_header_and_appears_nowhere_else(chat_server: ChatServer) -> None:
    chat_server.push(completion("ok"), error(500, f"upstream rejected Bearer {KEY}"))
    policy = make_policy(chat_server, max_retries=0)
    (action,) = policy.act([[{"role": "user", "content": "hi"}]], [])
    assert chat_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    failure = failed(policy)
    text = "".join(traceback.format_exception(failure))
    assert "upstream rejected" in text, "the server's message is kept..."
    for place in (repr(policy), str(action), text):
        assert KEY not in place, "...but the key is scrubbed from it"
    with pytest.raises(TypeError):
        OpenAIPolicy("test-model", base_url=chat_server.url, api_key=KEY)  # there is no argument for a literal key


def test_configuration_comes_from_arguments_or_environment_and_gaps_are_clear(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ValueError, match=f"no API key and no endpoint: set the environment variable {KEY_ENV}"):
        OpenAIPolicy("test-model", api_key_env=KEY_ENV)
    with pytest.raises(ValueError, match="AGENTIC_RL_LAB_MODEL"):
        OpenAIPolicy(base_url=chat_server.url)

    monkeypatch.setenv("AGENTIC_RL_LAB_BASE_URL", chat_server.url)
    monkeypatch.setenv("AGENTIC_RL_LAB_MODEL", "model-from-env")
    chat_server.push(completion("ok"))
    policy = OpenAIPolicy(api_key_env=KEY_ENV)  # a local server that needs no key
    assert policy.act([[{"role": "user", "content": "hi"}]], [])[0].message["content"] == "ok"
    request = chat_server.requests[0]
    assert request.body["model"] == "model-from-env" and request.headers["authorization"] == "Bearer EMPTY"
    assert repr(policy) == f"OpenAIPolicy(model='model-from-env', endpoint='{chat_server.url}', max_concurrency=8)"


# ----- a vLLM server's token ids: rollouts served by vLLM train like HFPolicy's ------------------------------------
def vllm_like(model, tokenizer):
    """Answer as a vLLM server does with `return_token_ids` and `logprobs`: the chat template applied to the
    messages, the sampled ids, each one's log-prob, and the tool calls parsed out of the text. The "model" is
    cpu-tiny, sampling greedily."""
    import torch

    from agentic_rl_lab.chat import apply_template, parse_assistant_text

    def answer(request: RecordedRequest) -> dict:
        body = request.body
        assert body.get("return_token_ids") is True and body.get("logprobs") is True, "asked the vLLM way"
        prompt = apply_template(tokenizer, body["messages"], body.get("tools"), add_generation_prompt=True)
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=24, do_sample=False, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"))  # fmt: skip
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, ids)]
        message, _ = parse_assistant_text(tokenizer.decode(ids, skip_special_tokens=True))
        body = completion(message.get("content"), message.get("tool_calls"))
        body["prompt_token_ids"] = prompt_ids
        body["choices"][0]["token_ids"] = ids
        content = [{"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []} for t, lp in
                   zip(ids, logprobs)]  # fmt: skip
        body["choices"][0]["logprobs"] = {"content": content}
        return body

    return answer


def test_a_vllm_servers_token_ids_make_trajectories_the_trainer_reads_token_for_token(chat_server) -> None:
    import torch

    from agentic_rl_lab.grpo.logprobs import assistant_token_logprobs
    from agentic_rl_lab.grpo.tensors import collate, trajectory_to_sequence
    from agentic_rl_lab.models import load_model

    loaded = load_model("cpu-tiny", add_lora=False)
    chat_server.default = vllm_like(loaded.model, loaded.tokenizer)
    policy = make_policy(chat_server, return_token_ids=True, timeout=120.0)  # the server runs a model: no retries
    trajectory = collect_group(GuessNumber(), policy, seed=4, num_generations=1, progress=False).trajectories[0]
    assert trajectory.num_turns >= 2 and len(trajectory.completions) == trajectory.num_turns
    assert policy.usage.retries == 0
    served = [r.response["choices"][0] for r in chat_server.requests]
    assert [c.token_ids for c in trajectory.completions] == [c["token_ids"] for c in served]

    # The trainer's sequence holds exactly the served ids, and the model scores them as the server did.
    sequence = trajectory_to_sequence(trajectory, loaded.tokenizer)
    batch = collate([sequence], [[0.0] * trajectory.num_turns], loaded.tokenizer.pad_token_id)
    with torch.no_grad():
        recomputed = assistant_token_logprobs(loaded.model, batch.input_ids, batch.attention_mask,
                                              batch.assistant_mask[:, 1:], temperature=1.0)  # fmt: skip
    recomputed = recomputed[batch.assistant_mask[:, 1:].bool()].tolist()
    served_logprobs = [entry["logprob"] for c in served for entry in c["logprobs"]["content"]]
    assert recomputed == pytest.approx(served_logprobs, abs=1e-4)
    # Each turn's prompt, as the server rendered it, is the trainer's context up to that turn.
    first = sequence.assistant_mask.index(1)
    assert sequence.input_ids[:first] == chat_server.requests[0].response["prompt_token_ids"]


def test_a_server_that_returns_no_token_ids_is_a_clear_error(chat_server) -> None:
    chat_server.push(completion("hello"))
    error = failed(make_policy(chat_server, return_token_ids=True))
    assert "return_token_ids" in str(error) and chat_server.requests[0].body["return_token_ids"] is True
