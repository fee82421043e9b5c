"""The pooling alternatives of thesis Sec. 5.3.5 (DeLF-style attention, NetVLAD) against
brute-force definitions, degenerate inputs, bad input, and the embedder built with them."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dmlkit.models.config import ModelConfig, build_embedder
from dmlkit.pooling import AttentionPool, NetVLAD, attention_pool, create_pooling, gap, netvlad
from dmlkit.pooling.netvlad import MAX_CLUSTERS

D64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_attention_pool_brute_force_and_gap_case():
    x = torch.randn(2, 3, 2, 3, generator=_gen(0), dtype=D64)
    a = torch.rand(2, 1, 2, 3, generator=_gen(1), dtype=D64)
    expected = torch.zeros(2, 3, dtype=D64)
    for b, c, u, v in itertools.product(range(2), range(3), range(2), range(3)):
        expected[b, c] += a[b, 0, u, v] * x[b, c, u, v] / 6
    assert torch.allclose(attention_pool(x, a), expected)
    assert torch.allclose(attention_pool(x, torch.ones_like(a)), gap(x))


def test_attention_module_weights_are_softplus_of_scores():
    layer = AttentionPool(4, hidden_dim=5).double()
    x = torch.randn(2, 4, 3, 3, generator=_gen(2), dtype=D64)
    hidden = torch.relu(
        torch.einsum("oc,bchw->bohw", layer.score[0].weight[:, :, 0, 0], x) + layer.score[0].bias[None, :, None, None]
    )
    scores = torch.einsum("oc,bchw->bohw", layer.score[2].weight[:, :, 0, 0], hidden) + layer.score[2].bias
    weights = torch.log1p(torch.exp(scores))
    assert torch.allclose(layer.attention(x), weights)
    assert (layer.attention(x) > 0).all()
    assert torch.allclose(layer(x), (weights * x).mean(dim=(2, 3)))


def _netvlad_brute(x, centroids, weight, bias, normalize_input):
    b, c, h, w = x.shape
    k = centroids.shape[0]
    out = torch.zeros(b, k * c, dtype=x.dtype)
    for i in range(b):
        feats = [x[i, :, u, v] for u in range(h) for v in range(w)]
        if normalize_input:
            feats = [f / max(float(f.norm()), 1e-12) for f in feats]
        blocks = []
        for kk in range(k):
            acc = torch.zeros(c, dtype=x.dtype)
            for f in feats:
                logits = torch.stack([weight[j] @ f + bias[j] for j in range(k)])
                acc += torch.softmax(logits, 0)[kk] * (f - centroids[kk])
            blocks.append(acc / max(float(acc.norm()), 1e-12))
        v = torch.cat(blocks)
        out[i] = v / max(float(v.norm()), 1e-12)
    return out


@pytest.mark.parametrize("normalize_input", [True, False])
def test_netvlad_brute_force(normalize_input):
    x = torch.randn(2, 3, 2, 2, generator=_gen(3), dtype=D64)
    cen = torch.randn(4, 3, generator=_gen(4), dtype=D64)
    wgt = torch.randn(4, 3, generator=_gen(5), dtype=D64)
    bias = torch.randn(4, generator=_gen(6), dtype=D64)
    got = netvlad(x, cen, wgt, bias, normalize_input)
    assert torch.allclose(got, _netvlad_brute(x, cen, wgt, bias, normalize_input))


def test_netvlad_module_normalisation_and_size():
    layer = create_pooling("netvlad", dim=6, num_clusters=5, generator=_gen(7))
    assert isinstance(layer, NetVLAD) and layer.output_dim(6) == 30
    out = layer(torch.randn(3, 6, 4, 4, generator=_gen(8)))
    assert out.shape == (3, 30)
    assert torch.allclose(out.norm(dim=1), torch.ones(3), atol=1e-6)
    blocks = out.view(3, 5, 6).norm(dim=2)  # intra-normalised, then the whole vector: 1/sqrt(K) per block
    assert torch.allclose(blocks, torch.full((3, 5), 1 / math.sqrt(5)), atol=1e-6)


@pytest.mark.parametrize("name,params", [("attention", {}), ("netvlad", {"num_clusters": 4})])
@pytest.mark.parametrize("kind", ["zeros", "identical"])
def test_no_nan_for_degenerate_maps(name, params, kind):
    x = torch.zeros(2, 6, 3, 3) if kind == "zeros" else torch.randn(2, 6, 1, 1).expand(2, 6, 3, 3).clone()
    x.requires_grad_()
    layer = create_pooling(name, dim=6, **params)
    out = layer(x)
    out.square().sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters() if p.grad is not None)
    if name == "attention" and kind == "identical":  # identical features: output parallel to the feature
        assert torch.allclose(torch.nn.functional.cosine_similarity(out, x[:, :, 0, 0], dim=1), torch.ones(2))


def test_bad_input():
    with pytest.raises(ValueError, match="local feature map"):
        create_pooling("attention", dim=4)(torch.randn(2, 4, 9))
    with pytest.raises(ValueError, match="channels"):
        create_pooling("attention", dim=4)(torch.randn(2, 5, 3, 3))
    with pytest.raises(ValueError, match="local feature map"):
        create_pooling("netvlad", dim=4)(torch.randn(2, 4))
    with pytest.raises(ValueError, match="channels"):
        create_pooling("netvlad", dim=4)(torch.randn(2, 5, 3, 3))
    with pytest.raises(ValueError, match="num_clusters"):
        create_pooling("netvlad", dim=4, num_clusters=0)
    with pytest.raises(ValueError, match="num_clusters"):
        create_pooling("netvlad", dim=4, num_clusters=MAX_CLUSTERS + 1)
    with pytest.raises(ValueError, match="hidden_dim"):
        create_pooling("attention", dim=4, hidden_dim=0)
    with pytest.raises(ValueError, match=r"\(B, 1, h, w\)"):
        attention_pool(torch.randn(2, 4, 3, 3), torch.rand(2, 3, 3))


@pytest.mark.parametrize(
    "name,params",
    [("gsp", {"num_prototypes": 8, "iters": 20}), ("attention", {"hidden_dim": 16}), ("netvlad", {"num_clusters": 4})],
)
def test_embedder_builds_and_trains_with_pooling(name, params):
    cfg = ModelConfig(backbone="resnet20", pooling=name, pooling_params=params, embedding_dim=16)
    model = build_embedder(cfg, in_channels=3)
    assert model.pooled_dim == model.pooling.output_dim(model.local_dim)
    out = model(torch.randn(4, 3, 16, 16, generator=_gen(9)))
    assert out.shape == (4, 16) and torch.allclose(out.norm(dim=1), torch.ones(4), atol=1e-5)
    out.sum().backward()
    grads = [p.grad for p in model.pooling.parameters()]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
