"""Data parallelism: 2 processes x B/2 (gloo, DDP) give the loss and gradients of 1 process x B.

One spawn of two CPU processes runs every case (pair loss with its miner, contrastive, proxy loss,
SFT-augmented loss, CCP proxies + projection term on the parameters, cross-batch memory) for two SGD
steps; the reference is the same code in this process on the whole batch without a process group. The
second step checks that parameters, proxies, SFT centres, the CCP snapshot and the XBM memory stayed the
same as the single-process ones (hence the same on every process) after an update.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from dmlkit.distributed import (
    GlobalBatchLoss,
    ShardedBatchSampler,
    all_gather_with_grad,
    gather_shards,
    shard_indices,
)

B, D_IN, D_EMB, CLASSES = 16, 6, 4, 5
CASES = ["multi_similarity", "contrastive", "proxy_anchor", "sft", "ccp", "xbm"]


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, D_IN, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 0, 4, 4, 1, 2, 3, 4, 0])
    return x, y


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.lin = nn.Linear(D_IN, D_EMB).double()
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(D_EMB, D_IN, generator=g))
            self.lin.bias.copy_(torch.randn(D_EMB, generator=g) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.lin(x), dim=1)


class _PlusRegularizer(nn.Module):
    """A global-batch loss plus a term on the model's parameters (CCP's projection term, Eq. 3.2.11)."""

    def __init__(self, loss: nn.Module, reg: nn.Module) -> None:
        super().__init__()
        self.loss, self.reg = loss, reg

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss(embeddings, labels) + self.reg()


def _objective(case: str, net: nn.Module) -> nn.Module:
    from dmlkit.augment import build_augmented_loss
    from dmlkit.augment.config import SFTConfig
    from dmlkit.losses import create_loss, create_miner

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        if case == "multi_similarity":
            loss: nn.Module = GlobalBatchLoss(create_loss("multi_similarity"), create_miner("multi_similarity"))
        elif case == "contrastive":
            loss = GlobalBatchLoss(create_loss("contrastive"))
        elif case == "proxy_anchor":
            loss = GlobalBatchLoss(create_loss("proxy_anchor", num_classes=CLASSES, embedding_size=D_EMB))
        elif case == "xbm":  # the memory is filled with the global batch: step 2 sees step 1's embeddings
            loss = GlobalBatchLoss(create_loss("xbm", embedding_size=D_EMB, memory_size=64, start_iteration=0))
        elif case == "ccp":  # proxies of a ProxyBank as references, plus lam/2 ||theta - theta*||^2
            from dmlkit.proxies import ProjectionRegularizer, ProxyBank, ProxyPairLoss

            bank = ProxyBank(CLASSES, 2, D_EMB, seed=5)
            pair = ProxyPairLoss(create_loss("multi_similarity"), bank, create_miner("multi_similarity"))
            loss = _PlusRegularizer(GlobalBatchLoss(pair), ProjectionRegularizer(net, lam=0.5))
        else:
            sft = build_augmented_loss(
                SFTConfig(name="sft", lam=0.5), create_loss("multi_similarity"), CLASSES, D_EMB, seed=4
            )
            loss = GlobalBatchLoss(sft)
    return loss.double()


def _run(case: str, x: torch.Tensor, y: torch.Tensor, ddp: bool) -> dict[str, torch.Tensor]:
    """Two SGD steps; returns both losses, the step-2 gradients and the parameters/buffers after step 1."""
    net = Net()
    model: nn.Module = nn.parallel.DistributedDataParallel(net) if ddp else net
    objective = _objective(case, net)
    opt = torch.optim.SGD(list(model.parameters()) + list(objective.parameters()), lr=0.5)
    out: dict[str, torch.Tensor] = {}
    for step in (1, 2):
        opt.zero_grad()
        loss = objective(model(x), y)
        loss.backward()
        out[f"loss{step}"] = loss.detach()
        if step == 1:
            opt.step()
    for name, p in list(net.named_parameters()) + list(objective.named_parameters()):
        out[f"grad/{name}"] = p.grad.detach().clone()
        out[f"param/{name}"] = p.detach().clone()
    for name, b in objective.named_buffers():
        out[f"buffer/{name}"] = b.detach().clone()
    return out


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        x, y = _data()
        sampler = ShardedBatchSampler([list(range(B))], rank, world)
        (local,) = list(sampler)
        results = {case: _run(case, x[local], y[local], ddp=True) for case in CASES}
        # evaluation-style gather: shards by stride, back in dataset order
        idx = shard_indices(B, rank, world)
        results["gathered"] = {"x": gather_shards(x[idx], idx, B)}
        # uneven local sizes: gradient goes to the right slice
        n_local = 2 + rank
        v = torch.arange(n_local * 2, dtype=torch.float64).reshape(n_local, 2).requires_grad_()
        g = all_gather_with_grad(v, scale_grad_for_ddp=False)
        (g * torch.arange(g.numel(), dtype=torch.float64).reshape(g.shape)).sum().backward()
        results["uneven"] = {"value": g.detach(), "grad": v.grad}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(2, str(tmp / "init"), str(tmp)), nprocs=2, join=True)
    return [torch.load(tmp / f"rank{r}.pt", weights_only=True) for r in range(2)]


@pytest.mark.parametrize("case", CASES)
def test_two_processes_give_the_single_process_loss_and_gradients(two_process_results, case):
    x, y = _data()
    ref = _run(case, x, y, ddp=False)
    assert ref["loss1"] > 0 and ref["loss2"] > 0
    for r, results in enumerate(two_process_results):
        got = results[case]
        assert set(got) == set(ref)
        for key in ref:
            torch.testing.assert_close(got[key], ref[key], rtol=1e-9, atol=1e-12, msg=f"rank {r}, {case}: {key}")


def test_sft_generated_features_in_the_two_process_run(two_process_results):
    centres = [v for k, v in two_process_results[0]["sft"].items() if k.endswith("centers.initialized")]
    assert centres and centres[0].all()  # every class got a centre, so step 2 used generated features


def test_without_the_ddp_scale_the_gradient_is_not_the_single_process_one(two_process_results):
    """Guards the derivation: the factor N in the gather's backward is what makes DDP's mean right."""
    x, y = _data()
    ref = _run("contrastive", x, y, ddp=False)
    got = two_process_results[0]["contrastive"]
    # gradients are exact with the factor; halving them (no factor) would be visibly wrong
    assert not torch.allclose(got["grad/lin.weight"] / 2, ref["grad/lin.weight"], rtol=1e-3)


def test_evaluation_shards_are_gathered_in_dataset_order(two_process_results):
    x, _ = _data()
    for results in two_process_results:
        torch.testing.assert_close(results["gathered"]["x"], x, rtol=0, atol=0)


def test_uneven_sizes_gather_and_route_gradients(two_process_results):
    parts = [torch.arange(2 * n, dtype=torch.float64).reshape(n, 2) for n in (2, 3)]
    full = torch.cat(parts)
    weights = torch.arange(full.numel(), dtype=torch.float64).reshape(full.shape)
    for r, results in enumerate(two_process_results):
        torch.testing.assert_close(results["uneven"]["value"], full)
        start = 0 if r == 0 else 2
        torch.testing.assert_close(results["uneven"]["grad"], weights[start : start + 2 + r])


def test_sharded_sampler_slices_without_overlap_and_checks_divisibility():
    batches = [list(range(8)), list(range(8, 16))]
    shards = [list(ShardedBatchSampler(batches, r, 2)) for r in range(2)]
    for b, batch in enumerate(batches):
        assert shards[0][b] + shards[1][b] == batch
    with pytest.raises(ValueError, match="divisible"):
        list(ShardedBatchSampler([list(range(7))], 0, 2))
    with pytest.raises(ValueError, match="rank"):
        ShardedBatchSampler(batches, 2, 2)
    idx = [shard_indices(10, r, 3) for r in range(3)]
    assert sorted(torch.cat(idx).tolist()) == list(range(10))


def test_single_process_gather_is_the_identity():
    x = torch.randn(3, 2, requires_grad=True)
    assert all_gather_with_grad(x) is x
    with pytest.raises(ValueError, match="indices_tuple"):
        GlobalBatchLoss(nn.Identity())(x, torch.zeros(3), indices_tuple=(1,))


def test_fabric_options_follow_torchrun():
    from dmlkit.engine.config import TrainConfig
    from dmlkit.engine.launch import fabric_options, torchrun_world

    t = TrainConfig(accelerator="cpu", devices=1, precision="bf16-mixed")
    assert fabric_options(t, env={}) == {"accelerator": "cpu", "devices": 1, "precision": "bf16-mixed"}
    two_nodes = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}
    assert torchrun_world(two_nodes) == (4, 2)
    assert fabric_options(t, env=two_nodes) == {
        "accelerator": "cpu",
        "devices": 4,
        "num_nodes": 2,
        "precision": "bf16-mixed",
        "strategy": "ddp",
    }
    assert fabric_options(t, env={"WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})["devices"] == 1
    with pytest.raises(ValueError, match="multiple"):
        torchrun_world({"WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "4"})
    assert fabric_options(TrainConfig(devices=2, batch_size=64), env={})["strategy"] == "ddp"


@pytest.mark.slow
def test_torchrun_trains_on_two_processes_and_only_rank_zero_writes(tmp_path):
    import json

    from tests_helpers import TINY_OVERRIDES, torchrun

    run_dir = tmp_path / "ddp"
    sets = [a for o in TINY_OVERRIDES + ["plots=false"] for a in ("--set", o)]
    done = torchrun(["train", "configs/quickstart.yaml", *sets, "--run-dir", str(run_dir), "--quiet"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Starting with 2 processes" in done.stdout + done.stderr
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6, 8]  # written once, by rank 0
    assert [r["step"] for r in records if r["split"] == "val"] == [4, 8]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 8 and 0 <= summary["test"]["precision_at_1"] <= 1
    assert (run_dir / "last.pt").is_file() and not list(run_dir.glob(".*.tmp"))
    assert json.loads((run_dir / "environment.json").read_text())["world_size"] == 2


@pytest.mark.slow
@pytest.mark.faults
def test_a_two_process_run_killed_resumes_only_with_two_processes(tmp_path, capsys):
    import json

    from dmlkit.cli import main
    from tests_helpers import TINY_OVERRIDES, torchrun

    sets = [a for o in TINY_OVERRIDES + ["plots=false"] for a in ("--set", o)]
    full, cut = tmp_path / "full", tmp_path / "cut"
    done = torchrun(["train", "configs/quickstart.yaml", *sets, "--run-dir", str(full), "--quiet"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    killed = torchrun(
        ["train", "configs/quickstart.yaml", *sets, "--run-dir", str(cut), "--quiet"],
        {"DMLKIT_FAULT": "step:6"},
        timeout=600,
    )
    assert killed.returncode != 0 and not (cut / "summary.json").exists()
    last = (cut / "last.pt").read_bytes()
    assert main(["train", "--resume", str(cut), "--quiet"]) == 2  # one process: refused, nothing written
    assert "trained by 2 process(es) and this resume has 1" in capsys.readouterr().err
    assert (cut / "last.pt").read_bytes() == last
    resumed = torchrun(["train", "--resume", str(cut), "--quiet"], timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = (json.loads((d / "summary.json").read_text())["test"] for d in (full, cut))
    assert a == pytest.approx(b, abs=1e-6)
