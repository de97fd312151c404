"""`inbox_search`: answer a question about an email inbox with `search_inbox`, `read_email` and `answer`.

The realistic tool-use task of the lab, after OpenPipe ART's email agent (ART-E). The hidden state is the
question's ground truth: the answer and the emails that justify it. The agent sees the question and whatever
its tools return, so it has to choose keywords, decide which results are worth a `read_email`, notice that a
later email ("Schedule change: your flight to Lisbon") corrects an earlier one, and cite its sources.

The inbox is fixed and committed under `agentic_rl_lab/data/inbox/` (see `inbox_data`, which generates it); each
episode draws one question of the split. Reward (`outcome`): a wrong answer scores 0; a right one scores 0.7, plus up
to 0.3 for citing exactly the emails that justify it.
"""

from __future__ import annotations

import functools
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from agentic_rl_lab.envs.base import (
    Environment,
    InvalidAction,
    Message,
    Outcome,
    Tool,
    ToolArguments,
    tool_call_message,
    tool_exchanges,
)
from agentic_rl_lab.envs.inbox_data import (
    DEFAULT_DATA_DIR,
    OWNER,
    QUESTION_TEMPLATES,
    TODAY,
    Email,
    Question,
    load_inbox,
)

ANSWER_WEIGHT = 0.7
"""Share of the score for a right answer; the remaining 0.3 rewards citing the right emails."""


class SearchArguments(ToolArguments):
    keywords: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, max_length=5, description="1 to 5 keywords, e.g. ['flight', 'Lisbon']"
    )
    max_results: int = Field(default=5, ge=1, le=10, description="how many matches to list (1 to 10)")


class ReadArguments(ToolArguments):
    id: str = Field(description="an email id from search_inbox, e.g. 'e042'")


class AnswerArguments(ToolArguments):
    text: str = Field(min_length=1, max_length=200, description="the short answer: a code, date, time, name...")
    source_ids: list[str] = Field(max_length=10, description="ids of the emails that support the answer")


# ----- how text is compared -------------------------------------------------------------------------------------------
def search_words(text: str) -> list[str]:
    """The words search sees: lowercase letters and digits, a possessive 's dropped, a plural s dropped.

    `"Priya's Running Shoes"` -> `["priya", "running", "shoe"]`. Search applies this to both the keywords and
    the emails, so `flights` finds `flight`.
    """
    words = re.findall(r"[a-z0-9]+", re.sub(r"'s\b", "", text.lower()))
    return [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words]


def normalize(text: str) -> str:
    """Lowercase, every run of non-alphanumerics -> one space: `"$1,234.50"` -> `"1 234 50"`."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def is_correct(text: str, question: Question) -> bool:
    """Is the answer `text` the ground truth, or one of its aliases, after `normalize`, alone or as the email's line
    that states it (its label first: `Room: Pegasus` for "Which room is ... in?")?

    One answer, written any accepted way: `"9:15 am"` and `"09:15."` are right for `09:15` (its aliases are
    `9:15`, `9:15 am`, `9:15am`), and so is `"Start time: 09:15"`; `"19:15"` is not. A sentence around the fact, or a
    list of candidates (`"K7QX2P or K7QX2B"`), is not an answer to check: the system prompt asks for the fact alone,
    and an agent that hedges across candidates must not be paid as if it knew.
    """
    given = normalize(text)
    label = QUESTION_TEMPLATES[question.kind][1]
    truths = [question.answer, *question.aliases]
    return any(given in (normalize(truth), normalize(f"{label}: {truth}")) for truth in truths)


def citation_overlap(cited: list[str], sources: list[str]) -> float:
    """Jaccard overlap |cited & sources| / |cited | sources|: 1 for exactly the sources, lower for each missing
    or extra id, 0 for none right."""
    cited_set, source_set = set(cited), set(sources)
    return len(cited_set & source_set) / len(cited_set | source_set) if cited_set | source_set else 1.0


@dataclass(frozen=True)
class _Inbox:
    """The loaded inbox, with every email's search words computed once."""

    emails: dict[str, Email]
    words: dict[str, frozenset[str]]
    questions: list[Question]

    def __deepcopy__(self, memo: dict) -> _Inbox:
        """Read-only and shared: the rollout engine copies one environment per trajectory, not the inbox."""
        return self


@functools.lru_cache(maxsize=4)
def _load(directory: Path) -> _Inbox:
    """Read a directory once per process: evaluation builds one environment per question."""
    emails, questions = load_inbox(directory)
    words = {e.id: frozenset(search_words(f"{e.sender} {e.subject} {e.body}")) for e in emails}
    return _Inbox({e.id: e for e in emails}, words, questions)


# ----- the environment ------------------------------------------------------------------------------------------------
class InboxSearch(Environment):
    """Answer one question about Jordan Lee's inbox; each assistant message (one or more tool calls) is a turn."""

    name = "inbox_search"
    rubric = """\
- For this task, rank a right answer that cites the emails stating it above a right answer without them, and \
both above a wrong answer, a guess, a list of candidates or no answer ("I could not find it." is no answer).
- An answer is right when an email the agent read states it, and no later email it read corrects it.
- Among equally good answers, fewer tool calls rank higher: reading an email the answer does not need is waste."""

    def __init__(
        self,
        split: str = "train",
        max_turns: int = 10,
        data_dir: str | Path | None = None,
        question_id: str | None = None,
    ) -> None:
        """`split` is "train" or "test"; `question_id` pins one question (for evaluation), else `reset` draws."""
        super().__init__(max_turns)
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.inbox = _load(Path(data_dir) if data_dir is not None else DEFAULT_DATA_DIR)
        self.questions = [q for q in self.inbox.questions if q.split == split]
        if question_id is not None:
            self.questions = [q for q in self.questions if q.id == question_id]
            if not self.questions:
                raise ValueError(f"there is no question {question_id!r} in the {split} split")
        self.tools = [
            Tool(
                "search_inbox",
                "Search the inbox. Lists matching emails as `id | date | from | subject`, the ones that match the "
                "most keywords first, then the newest. A keyword matches whole words in the sender, subject or "
                "body, ignoring case and plurals.",
                SearchArguments,
            ),
            Tool("read_email", "Read one email in full, by the id that search_inbox showed.", ReadArguments),
            Tool(
                "answer",
                "Give the final answer, as short as possible, with the ids of the emails that support it. "
                "Ends the episode.",
                AnswerArguments,
            ),
        ]

    def setup(self, rng: random.Random) -> list[Message]:
        self.question = rng.choice(self.questions)
        self.read_ids: list[str] = []
        self.answer_text: str | None = None
        self.cited: list[str] = []
        system = (
            f"You are an email assistant for {OWNER}. Answer the user's question from the emails in their inbox. "
            "Use search_inbox to find emails, read_email to read one in full, and answer once you know. Answer "
            "with just the fact asked for (a code, a date as YYYY-MM-DD, a time as HH:MM, an amount or a name) "
            "and cite the ids of the emails you used. When a later email corrects an earlier one, the later one "
            f"is right. You have {self.max_turns} turns."
        )
        user = f"Today is {TODAY.strftime('%A')}, {TODAY.isoformat()}.\n{self.question.question}"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def call_tool(self, name: str, arguments: ToolArguments) -> tuple[str, bool]:
        if isinstance(arguments, SearchArguments):
            return self._search(arguments.keywords, arguments.max_results), False
        if isinstance(arguments, ReadArguments):
            email = self.inbox.emails.get(arguments.id.strip())
            if email is None:
                raise InvalidAction(f"there is no email with id {arguments.id!r}; use an id from search_inbox.")
            self.read_ids.append(email.id)
            return email.as_text(), False
        assert isinstance(arguments, AnswerArguments)
        self.answer_text, self.cited = arguments.text, list(arguments.source_ids)
        return "Answer recorded.", True

    def _search(self, keywords: list[str], max_results: int) -> str:
        """Rank emails by how many keywords they match; ties go to the newest, then the highest id."""
        wanted = [search_words(keyword) for keyword in keywords]
        for keyword, words in zip(keywords, wanted):
            if not words:
                raise InvalidAction(f"the keyword {keyword!r} has no letters or digits.")
        hits = []
        for email in self.inbox.emails.values():
            # A keyword of several words ("espresso machine") matches when all of its words are in the email.
            count = sum(set(words) <= self.inbox.words[email.id] for words in wanted)
            if count:
                hits.append((count, email.date, email.id))
        if not hits:
            return "No emails match."
        ranked = sorted(hits, reverse=True)[:max_results]
        lines = [self._summary(self.inbox.emails[email_id]) for _, _, email_id in ranked]
        return f"{len(hits)} emails match; the top {len(ranked)}:\n" + "\n".join(lines)

    @staticmethod
    def _summary(email: Email) -> str:
        return f"{email.id} | {email.date} | {email.sender} | {email.subject}"

    def outcome(self) -> Outcome:
        """Success: the answer is the ground truth, written any accepted way (`is_correct`). Score: 0 if wrong or
        never given; if right, 0.7 + 0.3 * the Jaccard overlap of cited and true sources (`citation_overlap`).

        The answer earns most of the score because it is what the user asked for; the citation part rewards
        grounding, and since missing *and* extra ids lower it, citing every email in sight does not pay. A
        wrong answer earns nothing however well it is cited.
        """
        success = self.answer_text is not None and is_correct(self.answer_text, self.question)
        score = ANSWER_WEIGHT + (1 - ANSWER_WEIGHT) * citation_overlap(self.cited, self.question.source_ids)
        return Outcome(success=success, num_steps=self.turn, score=score if success else 0.0)

    def hidden_state(self) -> dict[str, Any]:
        return {
            "question_id": self.question.id,
            "answer": self.question.answer,
            "aliases": list(self.question.aliases),
            "source_ids": list(self.question.source_ids),
            "read_ids": list(self.read_ids),
            "answered": self.answer_text,
            "cited": list(self.cited),
        }


# ----- scripted policies: each reads the question and the tool replies out of the history ---------------------------
def search_results(reply: str) -> list[tuple[str, str]]:
    """`[(email id, the whole result line), ...]` from a search_inbox reply, best first."""
    return re.findall(r"^(e\d+) \| (.*)$", reply, flags=re.MULTILINE)


def _question(history: list[Message]) -> str:
    """The question is the last line of the goal message."""
    return history[1]["content"].splitlines()[-1]


def parse_question(question: str) -> tuple[str, str] | None:
    """`(entity, label)` for a question phrased like one of `QUESTION_TEMPLATES`, else None.

    `"Which room is the Atlas design review in?"` -> `("Atlas design review", "Room")`: the thing to search for,
    and the `Label:` of the email line that holds the answer.
    """
    for template, label in QUESTION_TEMPLATES.values():
        before, after = template.split("{entity}")
        match = re.fullmatch(re.escape(before) + "(.+)" + re.escape(after), question)
        if match:
            return match.group(1), label
    return None


MAX_READS = 6
"""The expert reads at most this many emails, so it answers within 1 search + 6 reads + 1 answer = 8 turns."""


def expert(history: list[Message], rng: random.Random) -> Message:
    """Search for the question's entity, read every result whose sender or subject names it, then answer with the
    `Label: value` line of the newest email that states it, citing every email that states it.

    It knows how questions are phrased and how emails are laid out (`parse_question`), the way a person knows
    what a booking email looks like; everything else comes from the tool replies.
    """
    call_id = f"call_{len(history)}"
    parsed = parse_question(_question(history))
    if parsed is None:
        return tool_call_message("answer", {"text": "I don't know.", "source_ids": []}, call_id)
    entity, label = parsed
    exchanges = tool_exchanges(history)
    searches = [reply for name, _, reply in exchanges if name == "search_inbox"]
    if not searches:
        return tool_call_message("search_inbox", {"keywords": entity.split()[:5], "max_results": 10}, call_id)

    entity_words = set(search_words(entity))
    read = {args["id"]: reply for name, args, reply in exchanges if name == "read_email" and reply.startswith("ID:")}
    relevant = [email_id for email_id, line in search_results(searches[-1]) if entity_words <= set(search_words(line))]
    unread = [email_id for email_id in relevant if email_id not in read]
    if unread and len(read) < MAX_READS:
        return tool_call_message("read_email", {"id": unread[0]}, call_id)

    return answer_from(read, label, entity_words, call_id)


NO_ANSWER = "I could not find it."
"""What the scripted agents answer when no email they read states the fact: giving up, which scores as wrong."""


def gave_up(messages: list[Message]) -> bool:
    """Whether the agent's last message answered `NO_ANSWER`: `mediocre`'s choice, which a warm start copies and GRPO
    should unlearn."""
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), {})
    return NO_ANSWER in json.dumps(last.get("tool_calls") or [])


def answer_from(read: dict[str, str], label: str, entity_words: set[str], call_id: str, line: bool = False) -> Message:
    """Answer with the `Label: value` line of the newest read email about the entity that states it, citing every
    read email that states it; "I could not find it." when none does. The answer is the value (`15:00`), or with
    `line` the whole line as the email writes it (`Start time: 15:00`): the email's own tokens, which a small model
    can copy token for token, where the value alone starts with another token (`15`, not the line's ` 15`).
    `is_correct` accepts both."""
    stating = []  # (date, id, value) for every read email about the entity that states the fact
    for email_id, text in read.items():
        fact = re.search(rf"^{re.escape(label)}: (.+)$", text, flags=re.MULTILINE)
        sent = re.search(r"^Date: (.+)$", text, flags=re.MULTILINE)
        if fact and sent and entity_words <= set(search_words(text)):
            stating.append((sent.group(1), email_id, fact.group(1)))
    if not stating:
        return tool_call_message("answer", {"text": NO_ANSWER, "source_ids": []}, call_id)
    stating.sort()  # oldest first: the newest email corrects the others
    value = stating[-1][2]
    text = f"{label}: {value}" if line else value
    return tool_call_message("answer", {"text": text, "source_ids": [i for _, i, _ in stating]}, call_id)


EARLY_ANSWER_RATE = 0.2
"""How often `mediocre` gives up right after its search instead of reading."""


def mediocre(history: list[Message], rng: random.Random) -> Message:
    """A coherent but careless agent, the demonstrator a warm start imitates: it searches for the question's entity
    as `expert` does but looks at the best match only (`max_results` 1); one time in five it gives up there
    ("I could not find it."); otherwise it names the line it looks for (`Looking for "Start time".`), reads that
    email and answers with the line that states the fact, as the email writes it (`Start time: 15:00`). It succeeds
    on about two questions in three.

    Why this one: each step is a copy a 5M model can learn, token for token (measured in docs/warm-start.md). The
    entity goes from the question into the keywords (` Glacier`, the question's token: `"Glacier"` would be spelt
    `G`, `lac`, `ier`); the id from the one search result into `read_email`, with no other id in context to confuse
    it with (with five results listed, cpu-tiny never learnt to pick the first); the email's line into `answer`,
    after the label it named before reading. Naming it there is a short step, a search reply after the question; at
    the answer, after the email, cpu-tiny chose a label of that email but not the asked one. (Named on the first
    turn, the label moved the keywords by a few tokens, and cpu-tiny lost them.) Its mistakes are choices, not
    missing skills: reading before answering, every time, is the headroom RL can take (it succeeds on about 85% of
    the questions it does not give up on).
    """
    return _mediocre(history, rng, look_again=False)


def second_look(history: list[Message], rng: random.Random) -> Message:
    """`mediocre`, with one more try when the email it read does not state the fact (it read the wrong match): it
    searches again with the line's label added to the keywords (`[" Atlas", " design", " review", " Start time"]`,
    the label copied from its own `Looking for "Start time".`), reads that search's best match and answers from both
    emails. Where `mediocre` gives up after reading (about one question in five), this one is right on about three
    in four; it still gives up one time in five without reading, the choice GRPO should unlearn. cpu-tiny did not
    learn to imitate it: the second search's keywords are a copy from two places far back, which it wrote broken
    (13% held out, against `mediocre`'s 34%; docs/warm-start.md)."""
    return _mediocre(history, rng, look_again=True)


def _mediocre(history: list[Message], rng: random.Random, look_again: bool) -> Message:
    call_id = f"call_{len(history)}"
    parsed = parse_question(_question(history))
    if parsed is None:
        return tool_call_message("answer", {"text": "I don't know.", "source_ids": []}, call_id)
    entity, label = parsed
    exchanges = tool_exchanges(history)
    searches = [reply for name, _, reply in exchanges if name == "search_inbox"]
    if not searches:
        # " Glacier", not "Glacier": the question's own token (in `["Glacier"` a tokenizer spells it `G`, `lac`, `ier`)
        keywords = [f" {word}" for word in entity.split()[:5]]
        return tool_call_message("search_inbox", {"keywords": keywords, "max_results": 1}, call_id)
    read = {args["id"]: reply for name, args, reply in exchanges if name == "read_email" and reply.startswith("ID:")}
    listed = [email_id for email_id, _ in search_results(searches[-1])]
    if not read:
        if not listed or rng.random() < EARLY_ANSWER_RATE:
            return tool_call_message("answer", {"text": NO_ANSWER, "source_ids": []}, call_id)
        message = tool_call_message("read_email", {"id": listed[0]}, call_id)
        message["content"] = f'Looking for "{label}".'
        return message
    answer = answer_from(read, label, set(search_words(entity)), call_id, line=True)
    if not look_again or not gave_up([answer]):
        return answer
    if len(searches) == 1:  # the email it read does not state the fact: search again, the line's label added
        keywords = [f" {word}" for word in entity.split()[:5]] + [f" {label}"]
        return tool_call_message("search_inbox", {"keywords": keywords, "max_results": 1}, call_id)
    if listed and listed[0] not in read:
        return tool_call_message("read_email", {"id": listed[0]}, call_id)
    return answer


def random_valid(history: list[Message], rng: random.Random) -> Message:
    """A valid call every turn, chosen at random: search with words of the question, read an id some search
    listed, and, more likely the longer the episode runs, answer with a word from an email it read."""
    call_id = f"call_{len(history)}"
    exchanges = tool_exchanges(history)
    seen = list(
        dict.fromkeys(i for name, _, reply in exchanges if name == "search_inbox" for i, _ in search_results(reply))
    )
    turn = sum(message.get("role") == "assistant" for message in history)
    if seen and rng.random() < 0.1 + 0.1 * turn:
        read = [reply for name, _, reply in exchanges if name == "read_email"]
        text = rng.choice(read[-1].split()) if read else "I don't know."
        return tool_call_message("answer", {"text": text, "source_ids": [rng.choice(seen)]}, call_id)
    if seen and rng.random() < 0.6:
        return tool_call_message("read_email", {"id": rng.choice(seen)}, call_id)
    words = re.findall(r"[A-Za-z0-9]+", _question(history))
    keywords = rng.sample(words, rng.randint(1, min(3, len(words))))
    return tool_call_message("search_inbox", {"keywords": keywords, "max_results": rng.randint(1, 10)}, call_id)


InboxSearch.strategies = {"random": random_valid, "mediocre": mediocre, "second_look": second_look, "expert": expert}
