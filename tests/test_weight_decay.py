"""Weight decay leaves alone the parameters a module names in ``no_weight_decay()`` (engine/weight_decay.py)."""

import pytest
import torch
from torch import nn

from dmlkit.engine.weight_decay import exclude_from_weight_decay


class Prototypes(nn.Module):
    """A free embedding (like GSP's prototypes or CCP's proxies) next to an ordinary weight."""

    def __init__(self):
        super().__init__()
        self.prototypes = nn.Parameter(torch.ones(3, 2))
        self.scale = nn.Parameter(torch.ones(2))

    def no_weight_decay(self):
        return {"prototypes"}


def test_named_parameters_get_no_weight_decay_under_coupled_adam():
    model = nn.Sequential(nn.Linear(2, 2), Prototypes())
    groups = exclude_from_weight_decay([{"name": "head", "params": list(model.parameters()), "lr": 0.1}], model)
    assert [g["name"] for g in groups] == ["head", "head_no_decay"]
    assert groups[1]["params"] == [model[1].prototypes] and groups[1]["weight_decay"] == 0.0 and groups[1]["lr"] == 0.1
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.Adam(groups, weight_decay=0.1)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # no loss gradient: only weight decay can move a parameter
    opt.step()
    moved = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert moved == {"0.weight", "0.bias", "1.scale"}  # Adam turns the decay alone into an lr-sized step


def test_groups_that_set_their_own_decay_or_hold_no_such_parameter_are_kept():
    model = Prototypes()
    own = {"name": "mine", "params": [model.prototypes], "weight_decay": 0.5}
    plain = {"name": "plain", "params": [model.scale]}
    assert exclude_from_weight_decay([own, plain], model) == [own, plain]


def test_a_name_that_is_not_a_parameter_is_refused():
    class Wrong(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def no_weight_decay(self):
            return {"prototypes"}

    with pytest.raises(ValueError, match="names 'prototypes', which is not one of its parameters"):
        exclude_from_weight_decay([{"params": [torch.nn.Parameter(torch.ones(1))]}], Wrong())
