"""What only a GPU can check (marked ``cuda``: skipped without one; ``scripts/device_check.sh`` runs them).

* Every registered loss (with its default miner) and every pooling on CUDA, in float32 and under bf16 and
  fp16 autocast: value and gradient finite and close to the CPU float32 computation (the tolerances of
  ``test_half_precision_components``: value 1%, gradient 5%, pooled output 2%).
* A short training run on CUDA in ``32-true``, ``bf16-mixed`` and ``16-mixed``: it trains, evaluates (the
  exact search on the GPU), writes finite metrics and records the device in ``environment.json``.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from papers_batch import CLASSES, DIM, papers_batch, relative_error
from dmlkit.losses import create_loss, create_miner, list_losses
from dmlkit.losses.registry import default_miner
from dmlkit.pooling import create_pooling, list_poolings

pytestmark = pytest.mark.cuda
PRECISIONS = [
    pytest.param(None, id="fp32"),
    pytest.param(torch.bfloat16, id="bf16"),
    pytest.param(torch.float16, id="fp16"),
]


def _autocast(dtype: torch.dtype | None):
    return torch.autocast("cuda", dtype=dtype) if dtype is not None else torch.autocast("cuda", enabled=False)


@pytest.mark.parametrize("dtype", PRECISIONS)
@pytest.mark.parametrize("name", list_losses())
def test_every_loss_on_cuda_is_close_to_the_cpu_float32(name, dtype):
    x, labels = papers_batch()
    torch.manual_seed(0)
    loss_cpu = create_loss(name, num_classes=CLASSES, embedding_size=DIM)
    loss_gpu = copy.deepcopy(loss_cpu).cuda()
    miner = create_miner(default_miner(name)) if default_miner(name) else None
    e_cpu = x.clone().requires_grad_()
    v_cpu = loss_cpu(e_cpu, labels, miner(e_cpu, labels) if miner else None)
    v_cpu.backward()
    e_gpu = x.cuda().requires_grad_()
    labels_gpu = labels.cuda()
    with _autocast(dtype):
        v_gpu = loss_gpu(e_gpu, labels_gpu, miner(e_gpu, labels_gpu) if miner else None)
    v_gpu.float().backward()
    assert torch.isfinite(v_gpu) and torch.isfinite(e_gpu.grad).all()
    assert float(v_gpu.detach()) == pytest.approx(float(v_cpu.detach()), rel=0.01, abs=1e-4)
    assert relative_error(e_gpu.grad, e_cpu.grad) < 0.05


@pytest.mark.parametrize("dtype", PRECISIONS)
@pytest.mark.parametrize("name", list_poolings())
def test_every_pooling_on_cuda_is_close_to_the_cpu_float32(name, dtype):
    g = torch.Generator().manual_seed(1)
    features = torch.relu(torch.randn(8, 64, 7, 7, generator=g))
    torch.manual_seed(0)
    pool_cpu = create_pooling(name, dim=64)
    pool_gpu = copy.deepcopy(pool_cpu).cuda()
    direction = torch.randn(8, pool_cpu(features).shape[1], generator=g)
    f_cpu = features.clone().requires_grad_()
    out_cpu = pool_cpu(f_cpu)
    (out_cpu * direction).sum().backward()
    f_gpu = features.cuda().requires_grad_()
    with _autocast(dtype):
        out_gpu = pool_gpu(f_gpu)
    (out_gpu.float() * direction.cuda()).sum().backward()
    assert torch.isfinite(out_gpu).all() and torch.isfinite(f_gpu.grad).all()
    assert relative_error(out_gpu, out_cpu) < 0.02
    assert relative_error(f_gpu.grad, f_cpu.grad) < 0.05


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-mixed"])
def test_a_short_run_trains_and_evaluates_on_cuda(tmp_path, precision):
    from dmlkit.assemble import build_trainer
    from dmlkit.config import load_config

    cfg = load_config(
        "configs/quickstart.yaml",
        [
            "data.max_classes=60",
            "train.max_steps=6",
            "train.val_every=3",
            "plots=false",
            "eval.clustering=false",
            "train.accelerator=cuda",
            f"train.precision={precision}",
        ],
    )
    summary = build_trainer(cfg, tmp_path / "run", quiet=True).fit()
    assert summary["steps"] == 6
    test = summary["test"] if "test" in summary else summary
    assert 0.0 < test["mean_average_precision_at_r"] <= 1.0
    environment = json.loads((tmp_path / "run" / "environment.json").read_text())
    assert "cuda" in json.dumps(environment).lower()


@pytest.mark.parametrize("dtype", PRECISIONS)
def test_distance_weighted_sampling_on_cuda_draws_from_its_own_generator(dtype):
    """The batched miner on CUDA: valid triplets, as many per anchor as on the CPU, repeated by its seed, and torch's
    global CUDA generator left alone (PML's miner draws from it, class by class)."""
    from collections import Counter

    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(60, 128, generator=g), dim=1)
    labels = torch.arange(20).repeat_interleave(3)
    on_cpu = create_miner("distance_weighted", seed=3)(x, labels)
    state = torch.cuda.get_rng_state()
    with _autocast(dtype):
        a, p, n = create_miner("distance_weighted", seed=3)(x.cuda(), labels.cuda())
        again = create_miner("distance_weighted", seed=3)(x.cuda(), labels.cuda())
    assert torch.equal(torch.cuda.get_rng_state(), state)
    assert a.is_cuda and all(torch.equal(u, v) for u, v in zip((a, p, n), again))
    labels = labels.cuda()
    assert (labels[a] == labels[p]).all() and (a != p).all() and (labels[a] != labels[n]).all()
    assert Counter(a.tolist()) == Counter(on_cpu[0].tolist())
