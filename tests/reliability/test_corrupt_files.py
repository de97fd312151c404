"""Corrupted files: a truncated or garbled checkpoint, a bad line in the middle of metrics.jsonl or
trajectories.jsonl, a judge cache entry that is not JSON. Each gives an error or a warning that names the file (and
the line); nothing valid is dropped; a run never resumes from a damaged checkpoint."""

import copy
import json
import shutil

import pytest
from faults import file_digests, steps_lost
from run_training import llm_judge

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.grpo.trainer import CorruptCheckpoint
from agentic_rl_lab.judge import JudgeCache
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import collect_groups


@pytest.fixture(scope="module")
def finished_run(make_trainer, tmp_path_factory):
    """A run of 3 steps, so every log has a middle line, with its last two checkpoints (after steps 2 and 3). Each
    test damages a copy."""
    run = tmp_path_factory.mktemp("finished") / "run"
    make_trainer(run, steps=3).train()
    return run


def copy_of(run, tmp_path):
    return shutil.copytree(run, tmp_path / "run")


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def garble(data: bytes) -> bytes:
    """Flip 8 bytes in the middle: in the weights, a file that still loads, with other numbers in it."""
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 8]) + data[middle + 8 :]


@pytest.mark.parametrize("damage", [truncate, garble], ids=["truncated", "garbled"])
def test_a_damaged_checkpoint_is_refused_by_name_and_the_one_before_it_resumes(
    damage, finished_run, make_trainer, tmp_path, fault_report
):
    refused, changed, lost, named, trained = 0, 0, 0, [], []
    files = ["model/model.safetensors", "trainer_state.pt"]
    for name in files:
        run = copy_of(finished_run, tmp_path / name.replace("/", "-"))
        path = run / "checkpoints" / "step-000003" / name
        path.write_bytes(damage(path.read_bytes()))
        before = file_digests(run)
        with pytest.raises(CorruptCheckpoint, match="does not match the SHA-256") as error:
            make_trainer(run, steps=3).train()
        refused += str(path) in str(error.value) and "to resume from" in str(error.value)
        named.append(str(path.relative_to(run)))
        changed += sum(before[f] != digest for f, digest in file_digests(run).items())
        shutil.rmtree(path.parents[len(name.split("/")) - 1])  # the way out the error names: delete that checkpoint
        resumed = make_trainer(run, steps=3)
        resumed.callbacks.append(lambda trainer, row: trained.append(row["step"]))
        resumed.train()
        lost += steps_lost(run, steps=3)
    fault_report.record(
        f"corrupt: checkpoint file {damage.__name__}d",
        injected=len(files),
        outcome=(
            f"{refused} of {len(files)} resumes refused with CorruptCheckpoint naming the file ({', '.join(named)}) "
            f"and the checkpoint to fall back on; {changed} files changed by the refused resume; after deleting the "
            f"damaged checkpoint the reruns trained steps {trained} and logged steps 0-2 once each"
        ),
        lost=changed + lost,
    )
    assert refused == len(files) and changed == 0 and lost == 0
    assert trained == [2] * len(files), "each rerun resumed from step-000002 and trained only the last step"


@pytest.mark.parametrize("log", ["metrics.jsonl", "trajectories.jsonl"])
def test_a_bad_line_in_the_middle_of_a_log_stops_the_resume_naming_file_and_line(
    log, finished_run, make_trainer, tmp_path, fault_report
):
    run = copy_of(finished_run, tmp_path)
    lines = (run / log).read_text().splitlines(keepends=True)
    lines[1] = lines[1][: len(lines[1]) // 3] + "\n"  # line 2 of 3 (metrics) or 6 (trajectories): cut short
    (run / log).write_text("".join(lines))
    before = file_digests(run)
    with pytest.raises(ValueError, match=rf"{log}: line 2 is not (a )?valid"):
        make_trainer(run, steps=3).train()
    changed = sum(before[f] != digest for f, digest in file_digests(run).items())
    fault_report.record(
        f"corrupt: {log} middle line",
        injected=1,
        outcome=(
            f"ValueError naming {log} and line 2; {changed} files changed, so every valid line is kept; the run does "
            "not resume until the line is repaired"
        ),
        lost=changed,
    )
    assert changed == 0


def test_a_judge_cache_entry_that_is_not_json_is_named_asked_again_and_replaced(judge_server, tmp_path, fault_report):
    env = GuessNumber()
    groups = collect_groups(env, ScriptedPolicy(env, "mediocre", seed=0), [0, 1, 2], 3, progress=False)
    directory = tmp_path / "judge-cache"
    first = [llm_judge(judge_server.url, cache=JudgeCache(directory)).score(g) for g in copy.deepcopy(groups)]
    entries = sorted(directory.glob("*/*.json"))
    damaged = entries[1]
    damaged.write_text('{"text": "{\\"scores\\": [{\\"trajectory_id\\"')  # cut mid-entry
    asked_before = len(judge_server.requests)
    cache = JudgeCache(directory)
    with pytest.warns(UserWarning, match=rf"{damaged}: unreadable judge cache entry") as caught:
        second = [llm_judge(judge_server.url, cache=cache).score(g) for g in copy.deepcopy(groups)]
    asked = len(judge_server.requests) - asked_before
    rewards = [[t.reward for t in g.trajectories] for g in first]
    same = sum(r == [t.reward for t in g.trajectories] for r, g in zip(rewards, second))
    lost = (len(entries) - 1 - cache.hits) + (len(groups) - same)
    fault_report.record(
        "corrupt: judge cache entry not JSON",
        injected=1,
        outcome=(
            f"{len(caught)} warning naming the entry's file; {asked} request to the judge model for it, "
            f"{cache.hits} of {len(entries) - 1} intact entries served from the cache; {same} of {len(groups)} groups "
            "got the same rewards; the entry was rewritten"
        ),
        lost=lost,
    )
    assert asked == 1 and lost == 0
    assert json.loads(damaged.read_text())["text"], "the new answer replaced the damaged entry"
