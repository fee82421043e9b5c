"""Which parameters weight decay leaves alone: modules name them in ``no_weight_decay()``.

``train.weight_decay`` applies to every optimiser group, except the parameters that a module
names in ``no_weight_decay()`` (a set of its own parameter names, timm's convention): free
embeddings that no architecture constrains, such as CCP's proxies (``ProxyBank``), GSP's
prototypes or the zero-shot class embeddings. With Adam the decay is coupled: ``wd * p`` is
added to the gradient and then rescaled by Adam, so a parameter that gets little loss gradient
shrinks by about ``lr`` per step (CCP's proxies drifted to norms 0.27-0.95 in 400 steps).
``exclude_from_weight_decay`` moves such parameters into a group of their own,
``<group>_no_decay``, with ``weight_decay: 0``; the trainer applies it to the groups a run
brings, so a component opts in by defining the method, whatever method or loss owns it.
"""

from __future__ import annotations

from torch import nn

__all__ = ["exclude_from_weight_decay", "no_decay_ids", "split_no_decay"]


def no_decay_ids(*roots: nn.Module) -> set[int]:
    """``id`` of every parameter under ``roots`` that its module names in ``no_weight_decay()``."""
    ids: set[int] = set()
    for root in roots:
        for module in root.modules():
            names = getattr(module, "no_weight_decay", None)
            if not callable(names):
                continue
            params = dict(module.named_parameters())
            for name in names():
                if name not in params:
                    raise ValueError(
                        f"{type(module).__name__}.no_weight_decay() names '{name}', which is not one of its parameters "
                        f"({', '.join(params) or 'none'}); return the names of its own parameters"
                    )
                ids.add(id(params[name]))
    return ids


def split_no_decay(group: dict, skip: set[int]) -> list[dict]:
    """``group`` as it is, or in two: its parameters in ``skip`` go to ``<name>_no_decay`` with ``weight_decay: 0``.

    A group that sets its own ``weight_decay`` is kept as it is.
    """
    if "weight_decay" in group or not any(id(p) in skip for p in group["params"]):
        return [group]
    kept = [p for p in group["params"] if id(p) not in skip]
    free = [p for p in group["params"] if id(p) in skip]
    parts = [{**group, "params": kept}] if kept else []
    return [*parts, {**group, "name": f"{group.get('name', 'group')}_no_decay", "params": free, "weight_decay": 0.0}]


def exclude_from_weight_decay(groups: list[dict], *roots: nn.Module) -> list[dict]:
    """``groups`` with the parameters that modules under ``roots`` exclude split off at ``weight_decay: 0``."""
    skip = no_decay_ids(*roots)
    return [part for group in groups for part in split_no_decay(group, skip)]
