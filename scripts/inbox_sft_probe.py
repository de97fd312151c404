"""Experiment: does cpu-tiny learn to copy on inbox_search, and after how many SFT steps?

A warm start that scores 0% says nothing about *why*. This trains like `agentic_rl_lab.warm_start` (the same
demonstrations and loss), in chunks, and after each chunk measures the skill the task needs and the model lacked:
copying from a tool reply. On held-out demonstrations (the lab inbox's test split, played by the demonstrator), with
teacher forcing, it counts how often the model's most likely next token is the demonstrator's on the tokens that
are copies: the id in `read_email`, the answer's text, and the cited ids. "fields" is the share of those arguments
with every token right. Each chunk's line goes to `--log` (JSON lines); a rerun resumes after the last chunk.

    python scripts/inbox_sft_probe.py --out runs/probe-a --batch-tokens 1536 --steps 6000
    python scripts/inbox_sft_probe.py --out runs/probe-a --play 64     # then play the test split with the model
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentic_rl_lab.envs.inbox_search import InboxSearch, gave_up
from agentic_rl_lab.sft import Example, _runs, demonstration_examples, play_demonstrations, sft_batches, sft_loss
from agentic_rl_lab.tiny import default_model_path
from agentic_rl_lab.warm_start import COPY_DRILL_BATCH_TOKENS, copy_drill, copying_accuracy, inbox_warm_start_envs

PROBE_BLOCK = 77  # a demonstration block no recipe uses


def copy_fields(tokenizer, example: Example, messages) -> list[tuple[str, list[int]]]:
    """(kind, token positions) of every copied argument in the assistant's turns of `example`."""
    fields = []
    turns = [m for m in messages if m.get("role") == "assistant"]
    for (start, end), message in zip(_runs(example.assistant_mask), turns):
        call = (message.get("tool_calls") or [{}])[0].get("function", {})
        arguments = json.loads(call.get("arguments", "{}")) if call else {}
        wanted = []
        if call.get("name") == "search_inbox":
            wanted = [("keyword", keyword) for keyword in arguments["keywords"]]
        elif call.get("name") == "read_email":
            wanted = [("read_id", arguments["id"])]
            if message.get("content"):  # the label it looks for, named before it reads (the demonstrator from v8)
                wanted.insert(0, ("plan", message["content"].split('"')[1]))
        elif call.get("name") == "answer" and arguments.get("source_ids"):
            wanted = [("answer_text", arguments["text"])] + [("cited_id", i) for i in arguments["source_ids"]]
            if message.get("content"):  # the email's line, quoted before the call (the demonstrator until v3)
                wanted.insert(0, ("quote", message["content"].split(": ", 1)[-1]))
        text, offsets = "", []
        for position in range(start, end):
            offsets.append(len(text))
            text += tokenizer.decode([example.input_ids[position]])
        searched_from = 0  # the fields in the order they are written
        for kind, value in wanted:
            at = text.find(json.dumps(value)[1:-1] if kind not in ("quote", "plan") else value, searched_from)
            if at < 0:
                continue
            searched_from = at + len(value)
            ends = offsets[1:] + [len(text)]
            positions = [start + k for k, (o, e) in enumerate(zip(offsets, ends)) if o < at + len(value) and e > at]
            fields.append((kind, positions))
    return fields


def probe(model, tokenizer, examples: list[Example], fields) -> dict:
    """Teacher-forced accuracy of the argmax token on every copied field's tokens, by kind: all of them ("tokens"),
    whole fields right ("fields"), and the field's first token alone ("first"), the one an induction head cannot
    copy when the token before it differs from the source's."""
    right: dict[str, list[int]] = {}
    with torch.no_grad():
        for example, example_fields in zip(examples, fields):
            predicted = model(input_ids=torch.tensor([example.input_ids])).logits[0].argmax(-1).tolist()
            for kind, positions in example_fields:
                hits = [predicted[p - 1] == example.input_ids[p] for p in positions]
                counts = right.setdefault(kind, [0, 0, 0, 0, 0])  # right tokens, tokens, right fields, fields, firsts
                counts[0] += sum(hits)
                counts[1] += len(hits)
                counts[2] += all(hits)
                counts[3] += 1
                counts[4] += hits[0]
    return {
        kind: {
            "tokens": round(c[0] / max(1, c[1]), 3),
            "fields": round(c[2] / max(1, c[3]), 3),
            "first": round(c[4] / max(1, c[3]), 3),
            "n": c[3],
        }
        for kind, c in right.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--batch-tokens", type=int, default=1536)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--chunk", type=int, default=250)
    parser.add_argument("--loss-on", choices=["assistant", "episode"], default="episode")
    parser.add_argument("--drill-every", type=int, default=0, help="every this many steps, a copying-drill batch")
    parser.add_argument("--drill-steps", type=int, default=0, help="copying-drill steps first")
    parser.add_argument("--drill-lr", type=float, default=2e-3, help="learning rate of drill steps")
    parser.add_argument("--drill-gap", type=int, default=0, help="random tokens between a drill's two copies")
    parser.add_argument("--drill-alphabet", type=int, default=0, help="tokens a drill's sequence is drawn from")
    parser.add_argument("--drill-tokens", type=int, default=COPY_DRILL_BATCH_TOKENS, help="tokens per drill batch")
    parser.add_argument("--copy-weight", type=float, default=1.0, help="loss weight of the copied tokens")
    parser.add_argument("--init", type=Path, default=None, help="start from this model directory, not cpu-tiny")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--play", type=int, default=0, help="play this many test-split episodes with the model")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    log, checkpoint = args.out / "log.jsonl", args.out / "state.pt"
    base = default_model_path(progress=False)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(args.init or base, dtype=torch.float32)

    if args.play:
        from agentic_rl_lab.policies import HFPolicy
        from agentic_rl_lab.rollout import collect_groups
        from agentic_rl_lab.seeds import held_out_seeds

        if checkpoint.exists():
            model.load_state_dict(torch.load(checkpoint, weights_only=False)["model"])
        model.save_pretrained(args.out / "model")
        tokenizer.save_pretrained(args.out / "model")
        policy = HFPolicy.from_pretrained(args.out / "model", seed=0, temperature=0.6)
        env = InboxSearch(split="test")
        groups = collect_groups(env, policy, held_out_seeds(args.play), 1, batch_size=64, max_exceptions=args.play)
        trajectories = [t for g in groups for t in g.trajectories]
        turns = sum(t.num_turns for t in trajectories)
        bad = sum(len({e.turn for e in t.errors}) for t in trajectories)
        result = {
            "played": len(trajectories),
            "success_rate": sum(t.outcome.success for t in trajectories) / args.play,
            "format_valid_turn_rate": (turns - bad) / turns,
            "gave_up": statistics.mean(gave_up(t.messages) for t in trajectories),
        }
        print(json.dumps(result))
        with log.open("a") as f:
            f.write(json.dumps({"play": result}) + "\n")
        for t in trajectories[:3]:
            print([m.get("content") or m.get("tool_calls") for m in t.messages[2:]])
        return

    started = time.perf_counter()
    demos = play_demonstrations(inbox_warm_start_envs(), "mediocre", args.episodes, 0)
    strategy = InboxSearch.strategies["mediocre"]
    examples = demonstration_examples(tokenizer, demos, strategy, 16, "0")
    if args.loss_on == "episode":
        for example in examples:
            first = example.assistant_mask.index(True)
            example.assistant_mask = [p >= first for p in range(len(example.input_ids))]
    if args.copy_weight != 1.0:  # the copied tokens weigh --copy-weight in the loss's mean
        for example, demo in zip(examples, demos):
            for _, positions in copy_fields(tokenizer, example, demo.messages):
                for position in positions:
                    example.weights[position] = example.weights.get(position, 1.0) * args.copy_weight
    held_out = play_demonstrations([InboxSearch(split="test")], "mediocre", 60, PROBE_BLOCK)
    probe_examples = demonstration_examples(tokenizer, held_out, strategy, 0, "probe")
    probe_fields = [copy_fields(tokenizer, e, d.messages) for e, d in zip(probe_examples, held_out)]
    drills = copy_drill(tokenizer, 40_000, 5, args.drill_gap, args.drill_alphabet)
    drill_probe = copy_drill(tokenizer, 30, 6, args.drill_gap, args.drill_alphabet)
    print(f"prepared in {time.perf_counter() - started:.0f} s", flush=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.95), weight_decay=0.0)
    step = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    else:
        model.eval()
        with log.open("a") as f:
            f.write(json.dumps({"step": 0, "probe": probe(model, tokenizer, probe_examples, probe_fields)}) + "\n")
    while step < args.steps:
        batches = sft_batches(examples, args.batch_tokens, random.Random(step))  # reseeded per chunk: resumable
        drill_batches = sft_batches(drills, args.drill_tokens, random.Random(step + 1))
        model.train()
        losses, chunk_started = [], time.perf_counter()
        for _ in range(args.chunk):
            drilling = step < args.drill_steps or (args.drill_every and step % args.drill_every == args.drill_every - 1)
            for group in optimizer.param_groups:
                group["lr"] = (args.drill_lr if drilling else args.learning_rate) * min(1.0, (step + 1) / args.warmup)
            batch = next(drill_batches if drilling else batches)
            loss = sft_loss(model, batch, tokenizer.pad_token_id)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            step += 1
        model.eval()
        record = {
            "step": step,
            "loss": round(sum(losses) / len(losses), 4),
            "seconds": round(time.perf_counter() - chunk_started, 1),
            "probe": probe(model, tokenizer, probe_examples, probe_fields),
            "drill_accuracy": copying_accuracy(model, drill_probe),
        }
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, checkpoint)
        with log.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
