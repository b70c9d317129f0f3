"""The fast engine's loss: label-smoothed cross-entropy with a hand-written backward.

PyTorch's `F.cross_entropy(..., label_smoothing=eps)` builds several (N, V) temporaries for the
smoothing term and its gradient; with an 8k vocabulary that was about a third of a CPU training
step (benchmarks/train_speed.py). The loss here reads the logits twice forward and writes one
(N, V) gradient backward, and is checked against `translate.loss` in tests/fast/test_loss.py.

    loss_i = lse_i - (1 - eps) * x_{i, y_i} - eps * mean_j x_ij        (= PyTorch's definition)
    d loss_i / d x_ij = softmax(x_i)_j - (1 - eps) * [j == y_i] - eps / V
"""

from __future__ import annotations

import torch


class _LabelSmoothedCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, epsilon, ignore_index):  # (N, V), (N,)
        logits = logits.float()
        lse = torch.logsumexp(logits, dim=-1)  # (N,)
        valid = target != ignore_index  # (N,)
        picked = logits.gather(1, target[:, None]).squeeze(1)  # (N,)
        nll = (lse - picked) * valid
        loss = nll - epsilon * (logits.mean(dim=-1) - picked) * valid
        ctx.save_for_backward(logits, lse, target, valid)
        ctx.epsilon = epsilon
        ctx.mark_non_differentiable(nll)
        return loss.sum(), nll.sum()

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        logits, lse, target, valid = ctx.saved_tensors
        eps, V = ctx.epsilon, logits.size(-1)
        grad = torch.sub(logits, lse[:, None]).exp_()  # (N, V) softmax
        grad.sub_(eps / V)
        grad.scatter_add_(1, target[:, None], torch.full_like(lse[:, None], eps - 1.0))
        grad.mul_((grad_loss * valid)[:, None])
        return grad, None, None, None


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                                 ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss and summed plain NLL over non-ignored targets.

    Args:
        logits: (..., V) scores (any float dtype; computed in fp32).
        target: (...) gold ids; positions equal to `ignore_index` count for nothing.
    """
    V = logits.size(-1)
    return _LabelSmoothedCE.apply(logits.reshape(-1, V), target.reshape(-1), epsilon, ignore_index)
