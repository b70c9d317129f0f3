import math

import torch

from translate.loss import label_smoothed_cross_entropy


def test_smoothing_spreads_epsilon_over_the_vocabulary_and_skips_padding():
    logits = torch.tensor([[[2.0, 0.0, -1.0, 0.5], [0.0, 0.0, 0.0, 0.0]]])  # (1, 2, V=4)
    target = torch.tensor([[2, 0]])  # the second position is padding (index 0)
    loss, nll = label_smoothed_cross_entropy(logits, target, 0.1, ignore_index=0)
    log_p = torch.log_softmax(logits[0, 0], -1)
    assert math.isclose(float(nll), float(-log_p[2]), rel_tol=1e-6)
    # (1 - eps) on the gold token, eps spread evenly over all V tokens
    expected = -(0.9 * log_p[2] + 0.1 * log_p.mean())
    assert math.isclose(float(loss), float(expected), rel_tol=1e-6)
