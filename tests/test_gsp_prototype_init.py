"""GSP prototypes started by greedy k-centre on a memory of GAP-pooled vectors (the author's code; Ch. 4's Algorithm 2)."""

import pytest
import torch

from dmlkit.pooling import GSP, gap


def _farthest_first(points: torch.Tensor, k: int) -> list[int]:
    """Brute-force farthest-first traversal from row 0, written independently of dmlkit.proxies.kcenter."""
    picks = [0]
    while len(picks) < k:
        best, best_d = None, -1.0
        for i in range(points.shape[0]):
            if i in picks:
                continue
            d = min(float(((points[i] - points[j]) ** 2).sum().sqrt()) for j in picks)
            if d > best_d:
                best, best_d = i, d
        picks.append(best)
    return picks


def _maps(seed: int, b: int = 4, dim: int = 5) -> torch.Tensor:
    """Feature maps whose GAP vectors have norms about 0.9 (seed 1) and 1.3 (seed 2): the unit-ball step matters."""
    return torch.randn(b, dim, 3, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 0.3 + 0.2 * (
        seed + 1
    )


def test_gap_warmup_fills_the_memory_then_prototypes_are_its_k_centres():
    layer = GSP(5, num_prototypes=3, mu=0.3, eps=5.0, iters=60, init="kcenter", memory_size=8, warmup_steps=1).double()
    layer.train()
    batches = [_maps(s) for s in range(3)]
    pooled, plan = layer.forward_with_plan(batches[0])  # skipped batch (warmup_steps=1): GAP, memory empty
    torch.testing.assert_close(pooled, gap(batches[0]))
    assert plan.abs().sum() == 0 and int(layer.memory.count) == 0 and layer.pools_with_gap
    layer.forward_with_plan(batches[1])
    assert int(layer.memory.count) == 4 and layer.pools_with_gap
    pooled, _ = layer.forward_with_plan(batches[2])  # fills the memory: still GAP for this batch, GSP from the next
    torch.testing.assert_close(pooled, gap(batches[2]))
    assert not layer.pools_with_gap
    memory = torch.cat([gap(batches[1]), gap(batches[2])])
    memory = memory / memory.norm(dim=1, keepdim=True).clamp(min=1.0)  # the costs' normalisation u / max(1, ||u||)
    torch.testing.assert_close(layer.memory.rows, memory)
    torch.testing.assert_close(layer.prototypes.data, memory[_farthest_first(memory, 3)])
    pooled, plan = layer.forward_with_plan(batches[0])
    assert not torch.allclose(pooled, gap(batches[0]))
    torch.testing.assert_close(plan.sum(dim=(1, 2)), torch.full((4,), 0.3, dtype=torch.float64))


def test_evaluation_does_not_fill_the_memory_and_a_checkpoint_keeps_the_state():
    layer = GSP(5, num_prototypes=2, init="kcenter", memory_size=4).double().eval()
    layer(_maps(0))
    assert int(layer.memory.count) == 0 and layer.pools_with_gap
    layer.train()(_maps(1))
    assert not layer.pools_with_gap
    fresh = GSP(5, num_prototypes=2, init="kcenter", memory_size=4).double()
    fresh.load_state_dict(layer.state_dict())
    assert not fresh.pools_with_gap
    torch.testing.assert_close(fresh.prototypes.data, layer.prototypes.data)


def test_random_init_pools_with_gsp_from_the_start():
    layer = GSP(5, num_prototypes=2).double()
    assert not layer.pools_with_gap and not hasattr(layer, "memory")
    assert not torch.allclose(layer(_maps(0)), gap(_maps(0)))


def test_bad_init_options():
    with pytest.raises(ValueError, match="kcenter"):
        GSP(5, init="kmeans")
    with pytest.raises(ValueError, match="raise memory_size"):
        GSP(5, num_prototypes=8, init="kcenter", memory_size=4)
    with pytest.raises(ValueError, match="warmup_steps"):
        GSP(5, init="kcenter", warmup_steps=-1)
    assert GSP(5).no_weight_decay() == ["prototypes"]
