"""GSP + GMP (thesis Sec. 5.3.4.1): the GSP-pooled vector plus the channel-wise maximum of the same features."""

import torch

from dmlkit.pooling import GSP, GSPGMP, create_pooling, gsp_gmp


def _maps(seed: int, b: int = 4, dim: int = 5) -> torch.Tensor:
    return torch.randn(b, dim, 3, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_gsp_gmp_is_gsp_plus_the_channel_maximum():
    x = _maps(1)
    gsp = GSP(5, num_prototypes=3, iters=60).double()
    both = create_pooling("gsp_gmp", 5, num_prototypes=3, iters=60).double()
    assert isinstance(both, GSPGMP)
    both.load_state_dict(gsp.state_dict())
    channel_max = torch.stack([x[b].reshape(5, -1).max(dim=1).values for b in range(x.shape[0])])
    pooled, plan = both.forward_with_plan(x)
    torch.testing.assert_close(pooled, gsp(x) + channel_max)
    torch.testing.assert_close(plan, gsp.forward_with_plan(x)[1])
    fn_pooled, _ = gsp_gmp(x.flatten(2).transpose(1, 2), gsp.prototypes, 0.3, 5.0, 60)
    torch.testing.assert_close(fn_pooled, pooled)
