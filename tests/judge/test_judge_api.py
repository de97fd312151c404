"""LLM judges through the real `openai` client against a scripted OpenAI-compatible server on 127.0.0.1.

The server plays the judge model. Its "judgment" of a trajectory is a fingerprint of that trajectory's text, so
the test knows which score belongs to which trajectory without trusting ids or positions, and answers list the
scores in reverse order of display: a judge that matched by position would put every score on the wrong one.
"""

import hashlib
import itertools
import json
import re
import traceback
import warnings
from pathlib import Path

import pytest
from chat_server import ChatServer, RecordedRequest, Reply, completion, error, malformed

from agentic_rl_lab.judge import (
    AbsoluteJudge,
    JudgeCache,
    JudgeError,
    JudgeRecord,
    OpenAIJudgeBackend,
    RelativeJudge,
    judge_usage,
)
from agentic_rl_lab.judge.prompt import common_prefix_length, render_messages
from agentic_rl_lab.trajectory import TrajectoryGroup

KEY = "sk-judge-test-0123456789-not-a-real-key"
KEY_ENV = "LAB_JUDGE_TEST_API_KEY"
BLOCK = re.compile(r'<trajectory id="([^"]+)">\n(.*?)\n</trajectory>', re.DOTALL)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key lives in the test's own variable, so the test can check it is written nowhere."""
    monkeypatch.setenv(KEY_ENV, KEY)


# ----- the scripted judge model ---------------------------------------------------------------------------------------
def fingerprint(text: str) -> float:
    """A score in [0, 1] that only this trajectory's text produces."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:6], 16) / 0xFFFFFF


def blocks(request: RecordedRequest) -> list[tuple[str, str]]:
    """(id, transcript) of each trajectory in the judge prompt, in display order."""
    first_user = next(m for m in request.messages if m["role"] == "user")
    return BLOCK.findall(first_user["content"])


def scores_json(entries: list[tuple[str, float]]) -> str:
    return json.dumps({"scores": [{"trajectory_id": i, "explanation": "fingerprint", "score": s} for i, s in entries]})


def by_content(request: RecordedRequest) -> dict:
    """A valid answer: each shown trajectory's fingerprint, listed in reverse display order."""
    return completion(scores_json([(id_, fingerprint(text)) for id_, text in reversed(blocks(request))]))


def expected_rewards(group: TrajectoryGroup, dedup: bool = True) -> list[float]:
    lists = [t.messages for t in group.trajectories]
    prefix = common_prefix_length(lists) if dedup else 0
    return [fingerprint(render_messages(messages[prefix:])) for messages in lists]


def backend(server: ChatServer, **overrides) -> OpenAIJudgeBackend:
    settings = {"base_url": server.url, "api_key_env": KEY_ENV, "timeout": 2.0}
    return OpenAIJudgeBackend("judge-model", **{**settings, **overrides})


def relative(server: ChatServer, **overrides) -> RelativeJudge:
    settings = {"cache": None, "max_retries": 2, "backoff_base": 0.01}
    backend_settings = {k: overrides.pop(k) for k in ("timeout", "structured") if k in overrides}
    return RelativeJudge(backend(server, **backend_settings), **{**settings, **overrides})


def rewards(group: TrajectoryGroup) -> list[float | None]:
    return [t.reward for t in group.trajectories]


# ----- the happy path ------------------------------------------------------------------------------------------------
def test_one_request_per_group_and_every_score_lands_on_its_own_trajectory(chat_server, groups) -> None:
    chat_server.default = by_content
    judge = relative(chat_server)
    scored = judge.score_groups(groups, progress=False)

    assert len(scored) == len(groups) == len(chat_server.requests)
    for group in scored:
        assert rewards(group) == pytest.approx(expected_rewards(group)), "matched by id, not by position"
        for trajectory in group.trajectories:
            assert trajectory.metadata["judge"]["explanation"] == "fingerprint"
            assert trajectory.metadata["judge"]["judge"] == "relative"
    body = chat_server.requests[0].body
    assert body["model"] == "judge-model" and body["temperature"] == 0.0
    schema = body["response_format"]["json_schema"]["schema"]
    shown_ids = [id_ for id_, _ in blocks(chat_server.requests[0])]
    assert schema["properties"]["scores"]["items"]["properties"]["trajectory_id"]["enum"] == shown_ids
    record = JudgeRecord.of(scored[0])
    assert (record.requests, record.prompt_tokens, record.completion_tokens) == (1, 10, 5)
    (request,) = [r for r in chat_server.requests if r.body == record.calls[0].attempts[0].request]
    assert record.calls[0].attempts[0].raw_response == request.response, "the raw request and response are kept"
    assert judge_usage(scored) == {
        "groups": 4,
        "skipped": 0,
        "calls": 4,
        "requests": 4,
        "cached": 0,
        "prompt_tokens": 40,
        "completion_tokens": 20,
        "failed_attempts": 0,
    }


def test_the_absolute_judge_makes_one_request_per_trajectory_with_one_trajectory_each(chat_server, groups) -> None:
    chat_server.default = by_content
    judge = AbsoluteJudge(backend(chat_server), cache=None)
    group = judge.score(groups[0])
    assert len(chat_server.requests) == len(group.trajectories) == 5
    assert all(len(blocks(request)) == 1 for request in chat_server.requests)
    assert "<context>" not in chat_server.requests[0].messages[1]["content"]
    assert rewards(group) == pytest.approx(expected_rewards(group, dedup=False))


def test_permutations_judge_several_orders_average_them_and_report_consistency(chat_server, groups) -> None:
    chat_server.default = by_content
    group = relative(chat_server, permutations=3).score(groups[0])
    orders = [[id_ for id_, _ in blocks(request)] for request in chat_server.requests]
    assert len(orders) == 3 and len({tuple(order) for order in orders}) > 1
    assert rewards(group) == pytest.approx(expected_rewards(group)), "an order-blind judge: every order agrees"
    assert JudgeRecord.of(group).position_consistency == 1.0

    def later_is_better(request: RecordedRequest) -> dict:
        shown = blocks(request)
        return completion(scores_json([(id_, position / 4) for position, (id_, _) in enumerate(shown)]))

    chat_server.default = later_is_better
    biased = relative(chat_server, permutations=3).score(groups[1])
    record = JudgeRecord.of(biased)
    assert record.position_consistency < 1.0, "a judge that scores positions is inconsistent across orders"
    for member, trajectory in enumerate(biased.trajectories):
        positions = [call.order.index(id_) for call in record.calls for id_, m in call.members.items() if m == member]
        assert trajectory.metadata["judge"]["positions"] == positions
        assert trajectory.reward == pytest.approx(sum(positions) / 4 / 3), "the mean over the three orders"


def test_ids_in_display_order_still_reach_their_trajectories_in_every_permutation(chat_server, groups) -> None:
    chat_server.default = by_content
    group = relative(chat_server, permutations=3, shuffle_ids=False).score(groups[0])
    orders = [[id_ for id_, _ in blocks(request)] for request in chat_server.requests]
    assert orders == [[f"t{k}" for k in range(1, 6)]] * 3, "t1 is always the first shown"
    record = JudgeRecord.of(group)
    assert len({tuple(call.members.values()) for call in record.calls}) > 1, "t1 names another trajectory each time"
    assert rewards(group) == pytest.approx(expected_rewards(group)), "each score found its own trajectory"


# ----- invalid answers: retried with feedback ------------------------------------------------------------------------
def invalid_answer(kind: str):
    """A scripted answer with one kind of problem, built from the ids actually shown in the request."""

    def answer(request: RecordedRequest) -> dict | Reply:
        shown = [(id_, fingerprint(text)) for id_, text in blocks(request)]
        if kind == "malformed_json":
            return completion('{"scores": [{"trajectory_id": ' + shown[0][0])
        if kind == "malformed_body":
            return malformed()
        if kind == "wrong_count":
            return completion(scores_json(shown[:-1]))
        if kind == "out_of_range":
            return completion(scores_json([(id_, 7.0) for id_, _ in shown]))
        if kind == "missing_id":
            return completion(scores_json([*shown[:-1], (shown[0][0], 0.5)]))
        if kind == "duplicate_id":
            return completion(scores_json([*shown, (shown[0][0], 0.5)]))
        if kind == "unknown_id":
            return completion(scores_json([*shown[:-1], ("t99", 0.5)]))
        if kind == "positional_ids":
            return completion(scores_json([(str(n), s) for n, (_, s) in enumerate(shown, start=1)]))
        raise AssertionError(kind)

    return answer


FEEDBACK = {
    "malformed_json": "holds no JSON object",
    "wrong_count": "there are 4 scores for 5 trajectories",
    "out_of_range": "the score 7 for",
    "missing_id": "more than one score for",
    "duplicate_id": "there are 6 scores for 5 trajectories",
    "unknown_id": "unknown trajectory ids t99",
    "positional_ids": "unknown trajectory ids 1, 2, 3, 4, 5",
}


@pytest.mark.parametrize("kind", list(FEEDBACK))
def test_an_invalid_answer_is_retried_with_a_message_that_says_what_was_wrong(chat_server, groups, kind) -> None:
    chat_server.push(invalid_answer(kind), by_content)
    group = relative(chat_server).score(groups[0])

    assert rewards(group) == pytest.approx(expected_rewards(group))
    first, second = chat_server.requests
    bad_answer = first.response["choices"][0]["message"]["content"]
    assert second.messages[: len(first.messages)] == first.messages
    assistant, feedback = second.messages[len(first.messages) :]
    assert assistant == {"role": "assistant", "content": bad_answer}
    assert FEEDBACK[kind] in feedback["content"] and feedback["role"] == "user"
    attempts = JudgeRecord.of(group).calls[0].attempts
    assert FEEDBACK[kind] in attempts[0].error and attempts[1].error is None
    assert attempts[0].response == bad_answer, "the invalid answer is kept in the record"


@pytest.mark.parametrize("kind", [*FEEDBACK, "malformed_body"])
def test_when_retries_run_out_the_caller_chooses_raise_or_skip(chat_server, groups, kind) -> None:
    chat_server.default = invalid_answer(kind)
    failure = r"could not score group guess_number seed 0: no (valid )?answer after 3"
    with pytest.raises(JudgeError, match=failure) as raised:
        relative(chat_server).score(groups[0])
    assert len(chat_server.requests) == 3
    assert len(raised.value.record.calls[0].attempts) == 3
    assert rewards(groups[0]) == [None] * 5, "no score written"
    assert groups[0].metadata["judge"]["skipped"] == str(raised.value), "the record is on the group too"

    with pytest.warns(UserWarning, match="skipped the group"):
        assert relative(chat_server, on_failure="skip").score(groups[1]) is None
    assert rewards(groups[1]) == [None] * 5
    assert "answer after 3 attempts" in groups[1].metadata["judge"]["skipped"]


# ----- no answer: retried with backoff -----------------------------------------------------------------------------
def test_rate_limits_and_server_errors_are_retried_with_growing_backoff(chat_server, groups) -> None:
    chat_server.push(error(429), error(500), error(503), by_content)
    group = relative(chat_server, max_retries=3, backoff_base=0.05).score(groups[0])
    assert rewards(group) == pytest.approx(expected_rewards(group))
    arrivals = [request.received for request in chat_server.requests]
    waits = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert len(waits) == 3 and waits[0] >= 0.025 and waits[2] >= 0.1 and waits[2] > waits[0], "2**k growth"
    record = JudgeRecord.of(group)
    assert [a.error is not None for a in record.calls[0].attempts] == [True, True, True, False]
    assert "HTTP 429" in record.calls[0].attempts[0].error and record.failed_attempts == 3
    assert chat_server.requests[0].body == chat_server.requests[3].body, "the same request is sent again"


def test_retry_after_is_honoured(chat_server, groups) -> None:
    chat_server.push(error(429, retry_after=0.3), by_content)
    relative(chat_server, backoff_base=0.001).score(groups[0])
    first, second = chat_server.requests
    assert second.received - first.received >= 0.3


def test_a_timeout_is_retried(chat_server, groups) -> None:
    chat_server.push(Reply(completion("too late"), delay=1.0), by_content)
    group = relative(chat_server, timeout=0.2).score(groups[0])
    assert rewards(group) == pytest.approx(expected_rewards(group))
    assert "timed out after 0.2 s" in JudgeRecord.of(group).calls[0].attempts[0].error


PERSISTENT_FAILURES = {
    "429": (error(429, "slow down"), r"HTTP 429: .*slow down"),
    "500": (error(500, "the judge replica is down"), r"HTTP 500: .*the judge replica is down"),
    "timeout": (Reply(completion("too late"), delay=1.0), r"timed out after 0.2 s"),
}


@pytest.mark.parametrize("kind", list(PERSISTENT_FAILURES))
def test_a_server_that_keeps_failing_ends_in_a_clear_error_or_a_skip(chat_server, groups, kind) -> None:
    chat_server.default, message = PERSISTENT_FAILURES[kind]
    with pytest.raises(JudgeError, match=f"no answer after 3 attempts: .*{message}") as raised:
        relative(chat_server, timeout=0.2).score(groups[0])
    assert len(chat_server.requests) == 3
    assert all(re.search(message, a.error) for a in raised.value.record.calls[0].attempts)
    with pytest.warns(UserWarning, match="skipped the group"):
        assert relative(chat_server, timeout=0.2, on_failure="skip").score(groups[1]) is None
    assert re.search(message, groups[1].metadata["judge"]["skipped"]) and rewards(groups[1]) == [None] * 5


def test_client_errors_are_not_retried(chat_server, groups) -> None:
    chat_server.push(error(400, "context length exceeded"))
    with pytest.raises(JudgeError, match="no answer after 1 attempt: .*HTTP 400: .*context length exceeded"):
        relative(chat_server).score(groups[0])
    assert len(chat_server.requests) == 1


def test_no_failure_crashes_a_collection_and_no_score_lands_on_the_wrong_group(chat_server, groups) -> None:
    def script(request: RecordedRequest) -> dict | Reply:
        if "seed-2-marker" in request.messages[1]["content"]:
            return error(503)
        return by_content(request)

    groups[2].trajectories[0].messages[-1]["content"] += " seed-2-marker"
    chat_server.default = script
    with pytest.warns(UserWarning, match="seed 2"):
        scored = relative(chat_server, on_failure="skip").score_groups(groups, progress=False)
    assert [g.seed for g in scored] == [0, 1, 3]
    for group in scored:
        assert rewards(group) == pytest.approx(expected_rewards(group))
    assert rewards(groups[2]) == [None] * 5 and "HTTP 503" in groups[2].metadata["judge"]["skipped"]
    assert judge_usage(groups)["skipped"] == 1


# ----- structured output, cache, configuration, the key ---------------------------------------------------------------
def test_a_server_without_structured_output_gets_plain_json_requests(chat_server, groups) -> None:
    def text_answer(request: RecordedRequest) -> dict:
        body = by_content(request)["choices"][0]["message"]["content"]
        return completion(f"Here is my judgment.\n```json\n{body}\n```")

    chat_server.push(error(400, "response_format json_schema is not supported by this model"), text_answer, text_answer)
    judge = relative(chat_server)
    with pytest.warns(UserWarning, match="rejected structured output"):
        first = judge.score(groups[0])
    second = judge.score(groups[1])
    assert "response_format" in chat_server.requests[0].body
    assert all("response_format" not in request.body for request in chat_server.requests[1:])
    assert rewards(first) == pytest.approx(expected_rewards(first))
    assert rewards(second) == pytest.approx(expected_rewards(second))
    assert JudgeRecord.of(first).calls[0].attempts[0].request == chat_server.requests[1].body, "records what was sent"


def test_a_rerun_is_answered_from_the_cache_without_a_request(chat_server, groups, tmp_path) -> None:
    chat_server.default = by_content
    cache = JudgeCache(tmp_path / "judge-cache")
    first = relative(chat_server, cache=cache).score_groups(groups[:2], progress=False)
    assert len(chat_server.requests) == 2 and len(cache) == 2

    again = relative(chat_server, cache=JudgeCache(tmp_path / "judge-cache")).score_groups(
        [group.model_copy(deep=True) for group in groups[:2]], progress=False
    )
    assert len(chat_server.requests) == 2, "no second HTTP request"
    assert [rewards(g) for g in again] == [rewards(g) for g in first]
    record = JudgeRecord.of(again[0])
    assert (record.cached, record.requests, record.prompt_tokens) == (1, 0, 0), "cached answers cost nothing"

    relative(chat_server, cache=cache, rubric="- Shorter is better.").score(groups[0].model_copy(deep=True))
    assert len(chat_server.requests) == 3, "another rubric is another prompt: a miss"


def test_the_default_cache_lives_in_the_lab_cache_folder(chat_server, groups, tmp_path) -> None:
    chat_server.default = by_content
    judge = RelativeJudge(backend(chat_server))
    assert judge.cache.directory == tmp_path / "lab-cache" / "judge"
    judge.score(groups[0])
    RelativeJudge(backend(chat_server)).score(groups[0].model_copy(deep=True))
    assert len(chat_server.requests) == 1


def test_the_api_key_is_sent_as_a_header_and_written_nowhere(chat_server, groups, tmp_path) -> None:
    chat_server.push(error(500, f"upstream rejected Bearer {KEY}"), by_content, error(401, f"bad key {KEY}"))
    cache = JudgeCache(tmp_path / "key-cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        group = relative(chat_server, cache=cache).score(groups[0])
        skipped = relative(chat_server, cache=cache, on_failure="skip").score(groups[1])
    assert skipped is None and chat_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert "upstream rejected Bearer ***" in JudgeRecord.of(group).calls[0].attempts[0].error
    with pytest.raises(JudgeError) as raised:
        chat_server.push(error(500, f"still {KEY}"))
        relative(chat_server, cache=None, max_retries=0).score(groups[2])
    places = [
        group.model_dump_json(),
        groups[1].model_dump_json(),
        "".join(traceback.format_exception(raised.value)),
        *(str(w.message) for w in caught),
        *(path.read_text() for path in Path(tmp_path).rglob("*.json")),
        repr(backend(chat_server)),
    ]
    assert all(KEY not in place for place in places)


def test_configuration_comes_from_arguments_or_environment_and_gaps_are_clear(chat_server, monkeypatch) -> None:
    with pytest.raises(ValueError, match="AGENTIC_RL_LAB_JUDGE_MODEL"):
        OpenAIJudgeBackend(base_url=chat_server.url)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ValueError, match=f"no API key and no endpoint: set the environment variable {KEY_ENV}"):
        OpenAIJudgeBackend("judge-model", api_key_env=KEY_ENV)
    monkeypatch.setenv("AGENTIC_RL_LAB_JUDGE_MODEL", "model-from-env")
    monkeypatch.setenv("AGENTIC_RL_LAB_JUDGE_BASE_URL", chat_server.url)
    judge_backend = OpenAIJudgeBackend(api_key_env=KEY_ENV)
    assert (judge_backend.model, judge_backend.endpoint) == ("model-from-env", chat_server.url)
    chat_server.push(completion("{}"))
    judge_backend.complete([{"role": "user", "content": "hi"}], {})
    assert chat_server.requests[0].headers["authorization"] == "Bearer EMPTY", "a local server needs no key"
