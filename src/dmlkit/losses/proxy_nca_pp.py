"""ProxyNCA++ (Teh et al., ECCV 2020) as the thesis' baseline configures it (Sec. 3.3.2.1).

The loss is PML's ``ProxyNCALoss`` (softmax over all proxies of the negative squared
distances between L2-normalised embeddings and proxies, positive proxy in the
denominator) with the temperature of ProxyNCA++ written as a temperature:
``softmax_scale = 1 / temperature``.  Default ``temperature = 0.1`` -- thesis
Sec. 3.3.2.1, ProxyNCA++: "We set its temperature parameter to 0.1 for all datasets".

The other two ingredients of ProxyNCA++ are training settings, not loss settings:
"fast proxies" are ``train.loss_lr = 100 * train.lr`` (the objective's parameters get
their own learning rate) and the one-epoch warm-up of the embedding layer is
``methods.warmup.steps`` (see ``configs/proxy_nca_pp.yaml``).
"""

from __future__ import annotations

import math
from typing import Any

from pytorch_metric_learning import losses as pml_losses

from dmlkit.losses.registry import register_loss
from dmlkit.validation import is_real


@register_loss("proxy_nca_pp", builds=pml_losses.ProxyNCALoss)
def proxy_nca_pp(
    num_classes: int, embedding_size: int, temperature: float = 0.1, **options: Any
) -> pml_losses.ProxyNCALoss:
    """ProxyNCA++ (Teh et al. 2020): ProxyNCA with temperature scaling, ``softmax_scale = 1/temperature``.

    Default ``temperature = 0.1`` (thesis Sec. 3.3.2.1). Use with ``train.loss_lr = 100 * train.lr``
    (fast proxies, thesis: "learning rate multiplier of 100 for the proxies").
    """
    if not is_real(temperature) or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"proxy_nca_pp temperature must be a finite number > 0 (thesis: 0.1), got {temperature!r}")
    if "softmax_scale" in options:
        raise ValueError("proxy_nca_pp takes temperature (softmax_scale = 1/temperature); do not pass softmax_scale")
    return pml_losses.ProxyNCALoss(num_classes, embedding_size, softmax_scale=1.0 / temperature, **options)
