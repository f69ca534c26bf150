import numpy as np
import pytest
import torch

from models.quantile import MonotoneQuantileHead, pinball_loss
from models.windows import DEFAULT_QUANTILES

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _reference_loss(pred, target, quantiles):
    """Plain loops over the textbook definition, no vectorisation shared with the code."""
    total, n = 0.0, 0
    for b in range(pred.shape[0]):
        for h in range(pred.shape[1]):
            for j, q in enumerate(quantiles):
                e = float(target[b, h]) - float(pred[b, h, j])
                total += max(q * e, (q - 1) * e)
                n += 1
    return total / n


def test_pinball_matches_plain_reference():
    rng = np.random.default_rng(3)
    pred = rng.normal(size=(7, 5, 9)).astype(np.float32)
    target = rng.normal(size=(7, 5)).astype(np.float32)
    q = list(DEFAULT_QUANTILES)
    expected = _reference_loss(pred, target, q)
    got_torch = pinball_loss(torch.from_numpy(pred), torch.from_numpy(target), torch.tensor(q))
    assert got_torch.item() == pytest.approx(expected, rel=1e-5)
    assert pinball_loss(pred, target, q) == pytest.approx(expected, rel=1e-9)


def test_pinball_is_asymmetric():
    q = torch.tensor([0.9])
    under = pinball_loss(torch.zeros(1, 1, 1), torch.ones(1, 1), q)  # forecast too low
    over = pinball_loss(torch.full((1, 1, 1), 2.0), torch.ones(1, 1), q)  # too high
    assert under.item() == pytest.approx(0.9)
    assert over.item() == pytest.approx(0.1)


def test_numpy_loss_broadcasts_climatology_and_skips_nan():
    target = np.array([[0.0, 1.0], [np.nan, 2.0]])
    clim = np.array([[0.0], [1.0]])  # [H, Q] with one quantile
    loss = pinball_loss(clim, target, [0.5])
    assert loss == pytest.approx((0 + 0 + 0.5) / 3)


def test_head_quantiles_never_cross():
    torch.manual_seed(0)
    head = MonotoneQuantileHead(8, 9)
    x = torch.randn(256, 5, 8) * 50  # far outside the training range
    out = head(x)
    assert out.shape == (256, 5, 9)
    assert (out.diff(dim=-1) >= 0).all()
    assert (out.diff(dim=-1) > 0).any()


def test_head_with_one_quantile():
    out = MonotoneQuantileHead(4, 1)(torch.randn(3, 4))
    assert out.shape == (3, 1)
