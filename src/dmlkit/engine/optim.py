"""Optimiser with per-part learning rates (backbone, new layers on top of it, loss parameters such as proxies) and schedules."""

from __future__ import annotations

import torch
from torch import nn

from dmlkit.engine.config import OPTIMIZERS, SCHEDULES, TrainConfig


def _new_layer_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Parameters of the layers on top of the backbone: ``model.new_layers()`` when the model lists them
    (the embedder: 1x1 local projection, pooling, head), else ``model.head``'s."""
    new_layers = getattr(model, "new_layers", None)
    head = getattr(model, "head", None)
    modules = list(new_layers()) if callable(new_layers) else ([head] if head is not None else [])
    seen: dict[int, nn.Parameter] = {}
    for module in modules:
        for p in module.parameters():
            seen.setdefault(id(p), p)
    return list(seen.values())


def parameter_groups(model: nn.Module, objective: nn.Module, cfg: TrainConfig, claimed: list[dict] = ()) -> list[dict]:
    """The backbone at ``lr``; the new layers (1x1 local projection, pooling, head) at ``head_lr``; objective
    parameters (e.g. a classifier) at ``loss_lr``.

    ``claimed``: groups that methods made for parameters they own (CCP's proxies); they are
    appended as they are, and their parameters are left out of the other groups.
    """
    taken = {id(p) for group in claimed for p in group["params"]}
    new = [p for p in _new_layer_parameters(model) if p.requires_grad]
    new_ids = {id(p) for p in new}
    body = [p for p in model.parameters() if id(p) not in new_ids and p.requires_grad]
    groups = [{"name": "body", "params": body, "lr": cfg.lr}]
    if new:
        groups.append({"name": "head", "params": new, "lr": cfg.head_lr or cfg.lr})
    loss_params = [p for p in objective.parameters() if p.requires_grad and id(p) not in taken]
    if loss_params:
        groups.append({"name": "loss", "params": loss_params, "lr": cfg.loss_lr or cfg.lr})
    return [*groups, *claimed]


def build_optimizer(groups: list[dict], cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas))
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas))
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    raise ValueError(f"unknown train.optimizer '{cfg.optimizer}'; valid values are: {', '.join(OPTIMIZERS)}")


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig):
    """``plateau`` steps on the validation score (mode max); ``step`` steps every training step."""
    if cfg.schedule == "none":
        return None
    if cfg.schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=cfg.plateau_factor, patience=cfg.plateau_patience
        )
    if cfg.schedule == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=cfg.step_size, gamma=cfg.step_gamma)
    raise ValueError(f"unknown train.schedule '{cfg.schedule}'; valid values are: {', '.join(SCHEDULES)}")
