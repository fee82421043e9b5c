"""The studies' one bare training loop (dmlkit_lab.studies.loop): step order, step count, schedule, bad losses."""

from __future__ import annotations

import math

import pytest
import torch

from dmlkit_lab.studies.loop import StepsDone, cosine_to_zero, train_steps


def test_steps_count_from_first_step_and_call_the_hooks_in_order() -> None:
    """The loop is the plain zero_grad / backward / step sequence: the same weights as the sequence written out."""
    w, ref = torch.nn.Parameter(torch.tensor([1.0])), torch.nn.Parameter(torch.tensor([1.0]))
    optimizer, ref_optimizer = torch.optim.Adam([w], lr=0.1), torch.optim.Adam([ref], lr=0.1)
    seen, clamps = [], []

    def step_loss(batch: float, step: int) -> torch.Tensor:
        seen.append((batch, step))
        return (w * batch).sum()

    done = train_steps(step_loss, [2.0, 3.0, 4.0], optimizer, after_step=lambda: clamps.append(w.item()), first_step=5)
    assert done.next_step == 8 and seen == [(2.0, 5), (3.0, 6), (4.0, 7)]
    expected = []
    for batch in (2.0, 3.0, 4.0):
        ref_optimizer.zero_grad(set_to_none=True)
        (ref * batch).sum().backward()
        ref_optimizer.step()
        expected.append(ref.item())
    assert clamps == expected  # after_step sees each step's weight, bit for bit
    assert done.last_loss.item() == 4.0 * torch.tensor(expected[1]).item()
    assert train_steps(step_loss, [], optimizer, first_step=8) == StepsDone(8, None)


def test_the_cosine_schedule_decays_every_group_to_zero() -> None:
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([{"params": [a], "lr": 1.0}, {"params": [b], "lr": 0.1}], lr=0.5, weight_decay=0.01)
    schedule = cosine_to_zero(optimizer, 4)
    rates = []
    for _ in range(4):
        train_steps(lambda batch, step: (a + b).sum(), [None], optimizer, schedule=schedule)
        rates.append([g["lr"] for g in optimizer.param_groups])
    expected = [0.5 * (1 + math.cos(math.pi * s / 4)) for s in (1, 2, 3, 4)]
    assert [r[0] for r in rates] == pytest.approx(expected) and [r[1] for r in rates] == pytest.approx(
        [0.1 * e for e in expected]
    )
    assert optimizer.param_groups[0]["weight_decay"] == 0.01


def test_a_non_finite_loss_stops_with_the_step_and_leaves_the_global_random_state_alone() -> None:
    w = torch.nn.Parameter(torch.ones(1))
    state = torch.random.get_rng_state()
    with pytest.raises(ValueError, match="gsp: non-finite loss at step 3; lower the learning rate"):
        train_steps(
            lambda batch, step: (w * batch).sum(),
            [1.0, float("nan")],
            torch.optim.Adam([w], lr=0.1),
            first_step=2,
            name="gsp",
        )
    assert torch.equal(torch.random.get_rng_state(), state)
