"""Training numerics: a NaN or an inf in the loss or in the gradients skips the optimizer step, counts it, and
changes no weight; the next step trains as usual."""

import math

import pytest
import torch
from faults import changed, weights

FAULTS = [("loss", math.nan), ("loss", math.inf), ("gradients", math.nan), ("gradients", math.inf)]


@pytest.mark.parametrize(("where", "value"), FAULTS, ids=["nan-loss", "inf-loss", "nan-gradients", "inf-gradients"])
def test_a_non_finite_step_is_skipped_counted_and_leaves_the_weights_alone(
    where, value, make_trainer, tmp_path, fault_report
):
    trainer = make_trainer(tmp_path / "run", steps=2)
    poisoned = {"step": 0}  # only step 0; step 1 is clean and must train
    if where == "loss":
        original = trainer.loss

        def loss(batch):
            value_, stats = original(batch)
            return (value_ + value if trainer.step == poisoned["step"] else value_), stats

        trainer.loss = loss
    else:
        parameter = trainer.trainable[0]
        parameter.register_hook(lambda grad: torch.full_like(grad, value) if trainer.step == poisoned["step"] else grad)

    start = weights(trainer.model)
    after_step: list[tuple[int, int]] = []  # (tensors changed since the start, Adam moments kept) after each step
    trainer.callbacks.append(lambda t, row: after_step.append((changed(start, t.model), len(t.optimizer.state))))
    metrics = trainer.train().set_index("step")

    skipped, taken = metrics.loc[0, "skipped_nonfinite"], metrics.loc[0, "optimizer_steps"]
    fault_report.record(
        f"numerics: {'NaN' if math.isnan(value) else 'inf'} in the {where}",
        injected=skipped + taken,
        outcome=(
            f"step 0: {skipped} of {skipped + taken} optimizer steps skipped and logged as skipped_nonfinite, "
            f"{after_step[0][0]} weight tensors changed; step 1 trained ({metrics.loc[1, 'optimizer_steps']} "
            "optimizer steps)"
        ),
        lost=after_step[0][0] + after_step[0][1] + taken,
    )
    assert skipped == 2 and taken == 0, "both optimizer steps of step 0 are refused"
    assert after_step[0] == (0, 0), "no weight moved and Adam kept no moment of the poisoned gradients"
    assert metrics.loc[1, "skipped_nonfinite"] == 0 and metrics.loc[1, "optimizer_steps"] == 2
    assert after_step[1][0] > 0 and all(torch.isfinite(p).all() for p in trainer.model.parameters())
