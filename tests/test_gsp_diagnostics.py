"""GSP diagnostics: the entropy of the pooling weights, by hand and as logged by a run."""

import json
import math

import pytest
import torch

from dmlkit.assemble import build_trainer, resume_trainer
from dmlkit.config import load_config
from dmlkit.pooling import GSP, gsp_pooling_weights, weight_entropy
from tests_helpers import TINY_OVERRIDES, stop_after_validation


def test_entropy_by_hand():
    rho = torch.tensor([[0.25, 0.25, 0.0, 0.0], [0.25, 0.15, 0.05, 0.05]])  # residuals of n = 4 features, mu = 0.5
    w = gsp_pooling_weights(rho, mu=0.5)  # (1/4 - rho)/0.5
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.0, 0.2, 0.4, 0.4]]))
    h = weight_entropy(w)
    assert float(h[0]) == pytest.approx(math.log(2))
    assert float(h[1]) == pytest.approx(-(0.2 * math.log(0.2) + 2 * 0.4 * math.log(0.4)))


def test_mu_one_gsp_has_the_entropy_of_gap_and_selection_lowers_it():
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    gap_like = GSP(3, num_prototypes=2, mu=1.0).double()
    gap_like(x)
    torch.testing.assert_close(gap_like.last_entropy, torch.full((2,), math.log(16), dtype=torch.float64))
    selective = GSP(
        3, num_prototypes=2, mu=0.25, eps=20.0, iters=400, generator=torch.Generator().manual_seed(0)
    ).double()
    selective(x)
    assert gap_like.last_features == selective.last_features == 16
    assert (selective.last_entropy < math.log(16) - 0.5).all()  # a quarter of the mass, sharply chosen (1.47, 1.59)
    # each weight is at most 1/(mu n) (rho >= 0), so at convergence H >= log(mu n), a hard top-k of mu * n features
    assert (selective.last_entropy > math.log(4)).all()


def _gsp_config(max_steps):
    return load_config(
        "configs/quickstart.yaml",
        TINY_OVERRIDES
        + [
            f"train.max_steps={max_steps}",
            "train.log_every=1",
            "model.pooling=gsp",
            "model.local_dim=16",
            "model.head=none",
            "model.pooling_params={num_prototypes: 4, iters: 20, init: kcenter, memory_size: 32}",
        ],
    )


def test_a_gsp_run_logs_the_entropy_and_the_end_of_the_kcenter_warmup(tmp_path):
    cfg = _gsp_config(4)
    summary = build_trainer(cfg, tmp_path / "run", quiet=True).fit()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    n = 64  # resnet20 on 32 x 32 images: an 8 x 8 map
    # batches of 16: steps 1-2 pool with GAP (entropy log n) and fill the 32-row memory; GSP from step 3
    assert [r["gsp/entropy"] for r in train[:2]] == pytest.approx([math.log(n)] * 2)
    assert all(r["gsp/entropy"] < math.log(n) - 1e-4 for r in train[2:])
    gsp = summary["gsp"]
    assert gsp["kcenter_step"] == 2 and gsp["init"] == "kcenter"
    assert gsp["entropy"] == pytest.approx(train[-1]["gsp/entropy"], abs=1e-5)
    assert gsp["entropy_gap"] == pytest.approx(math.log(n)) and gsp["entropy_topk"] == pytest.approx(math.log(0.3 * n))


def test_a_resumed_gsp_run_summarises_the_whole_run(tmp_path):
    # the k-centre start (step 2) and the first half of the entropy history happen before the crash at step 4
    full = build_trainer(_gsp_config(8), tmp_path / "full", quiet=True).fit()["gsp"]
    crashed = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):
        build_trainer(_gsp_config(8), crashed, callbacks=[stop_after_validation(4)], quiet=True).fit()
    resumed = resume_trainer(crashed, quiet=True).fit()["gsp"]
    assert resumed["kcenter_step"] == full["kcenter_step"] == 2
    for key in ("entropy", "effective_features", "entropy_last_quarter", "effective_features_last_quarter"):
        assert resumed[key] == pytest.approx(full[key], abs=1e-5), key
