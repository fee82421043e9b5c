"""Head-only warm-up (``methods.warmup.steps``): the backbone's learning rate is 0, then ``train.lr``, also after a resume."""

from types import SimpleNamespace

import pytest
import torch

from dmlkit.config import load_config
from dmlkit.engine.warmup_config import WarmupConfig
from dmlkit.methods.warmup import HeadWarmup, Warmup


def fake_trainer(step, warmup_steps=3, lr=0.1):
    body, head = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([{"name": "body", "params": [body], "lr": lr}, {"name": "head", "params": [head], "lr": lr}])
    cfg = SimpleNamespace(train=SimpleNamespace(lr=lr), methods=SimpleNamespace(warmup=WarmupConfig(warmup_steps)))
    return SimpleNamespace(optimizer=opt, state=SimpleNamespace(step=step), cfg=cfg), body, head


def warmup_callbacks(trainer):
    method = Warmup.from_config(trainer.cfg)
    return method.callbacks() if method is not None else []


def test_backbone_is_still_during_warmup_and_learns_after():
    trainer, body, head = fake_trainer(0)
    (cb,) = warmup_callbacks(trainer)
    cb.on_train_start(trainer)
    for step in range(1, 6):
        trainer.optimizer.zero_grad()
        (body.sum() + head.sum()).backward()
        trainer.optimizer.step()
        trainer.state.step = step
        cb.on_batch_end(trainer, {}, {})
        if step < 3:
            assert torch.equal(body.detach(), torch.ones(2)), step
    assert torch.allclose(head.detach(), torch.ones(2) - 0.1 * 5)
    assert torch.allclose(body.detach(), torch.ones(2) - 0.1 * 2)  # steps 4 and 5 moved the backbone


@pytest.mark.parametrize("step, lr", [(2, 0.0), (3, 0.1), (7, 0.1)])
def test_resume_sets_the_rate_of_the_step(step, lr):
    trainer, _, _ = fake_trainer(step)
    for group in trainer.optimizer.param_groups:
        group["lr"] = 0.5  # whatever the checkpoint held
    HeadWarmup(3, 0.1).on_train_start(trainer)
    assert trainer.optimizer.param_groups[0]["lr"] == lr
    assert trainer.optimizer.param_groups[1]["lr"] == 0.5  # the head keeps its own rate


def test_config_and_bad_value():
    assert load_config("configs/proxy_nca_pp.yaml").methods.warmup.steps == 253
    assert warmup_callbacks(fake_trainer(0, warmup_steps=0)[0]) == []
    with pytest.raises(ValueError, match="methods.warmup.steps must be an int >= 0"):
        load_config("configs/proxy_nca_pp.yaml", ["methods.warmup.steps=-1"])
