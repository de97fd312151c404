"""Disk: checkpoint and log writes that fail because the file system is full. The error names the file, the last
checkpoint stays loadable, and a rerun resumes with every step logged once.

The disk fills for real, in the kernel: `RLIMIT_FSIZE` makes a write that would grow a file past the limit write
what fits and then fail with EFBIG ("File too large"), wherever it comes from (Python, torch's C++ writer, the Rust
safetensors writer). Unlike a read-only folder, it works when the tests run as root.
"""

import contextlib
import re
import resource
import signal

import pytest
from faults import steps_lost

from agentic_rl_lab.grpo import trainer as trainer_module


@contextlib.contextmanager
def disk_full_past(limit: int):
    """No file may grow past `limit` bytes until the block ends (SIGXFSZ, which would kill the process, is ignored)."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def named_file(error, run_dir):
    """The file a trainer's write error names, relative to the run folder."""
    return re.search(r"could not write (\S+)", str(error)).group(1).removeprefix(f"{run_dir}/")


def checkpoints(run_dir):
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def test_a_checkpoint_write_on_a_full_disk_names_the_file_and_keeps_the_last_checkpoint(
    make_trainer, tmp_path, fault_report
):
    run = tmp_path / "run"
    make_trainer(run, steps=1).train()
    trainer = make_trainer(run, steps=2)
    save = trainer.save_checkpoint

    def save_on_a_full_disk():
        with disk_full_past(1 << 20):  # the weights alone are 20 MB
            return save()

    trainer.save_checkpoint = save_on_a_full_disk
    with pytest.raises(OSError, match=r"could not write \S+/\.tmp-step-000002/model .*File too large") as failure:
        trainer.train()
    left = checkpoints(run)
    previous = make_trainer(run, steps=2)
    previous._resume()  # checks every file against its checksum, then loads it
    make_trainer(run, steps=2).train()
    lost = steps_lost(run, steps=2) + (previous.step != 1)
    fault_report.record(
        "disk full: checkpoint write",
        injected=1,
        outcome=(
            f"OSError naming {named_file(failure.value, run)}; left {left}, step-000001 loads; "
            f"the rerun resumed at step {previous.step} and logged steps 0-1 once each"
        ),
        lost=lost,
    )
    assert left == ["step-000001"], "no half-written checkpoint is left behind"
    assert previous.step == 1 and lost == 0
    assert checkpoints(run) == ["step-000001", "step-000002"]


@pytest.mark.parametrize("log", ["metrics.jsonl", "trajectories.jsonl"])
def test_a_log_write_on_a_full_disk_names_the_file_and_the_rerun_resumes(
    log, make_trainer, tmp_path, fault_report, monkeypatch
):
    run = tmp_path / "run"
    make_trainer(run, steps=1).train()
    trainer = make_trainer(run, steps=2)
    writer = "_append_line" if log == "metrics.jsonl" else "append_groups"
    write = getattr(trainer_module, writer)

    def write_on_a_full_disk(path, *args):
        if path.name != log:
            return write(path, *args)
        with disk_full_past(path.stat().st_size + 40):  # the disk fills 40 bytes into the step's first line
            return write(path, *args)

    monkeypatch.setattr(trainer_module, writer, write_on_a_full_disk)
    with pytest.raises(OSError, match=rf"could not write \S+/{log} .*File too large"):
        trainer.train()
    torn = not (run / log).read_bytes().endswith(b"\n")
    monkeypatch.setattr(trainer_module, writer, write)
    trained = []
    with pytest.warns(UserWarning, match=rf"{log}: (removed an incomplete last line|line \d+ is incomplete)"):
        resumed = make_trainer(run, steps=2)
        resumed.callbacks.append(lambda trainer, row: trained.append(row["step"]))
        resumed.train()
    lost = steps_lost(run, steps=2)
    fault_report.record(
        f"disk full: {log} write",
        injected=1,
        outcome=(
            f"OSError naming {log}; the torn line it left was dropped with a warning; the rerun trained steps "
            f"{trained} from step-000001 and logged steps 0-1 once each"
        ),
        lost=lost,
    )
    assert torn, "the disk filled in the middle of a line"
    assert lost == 0 and trained == [1] and checkpoints(run) == ["step-000001", "step-000002"]
