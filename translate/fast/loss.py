"""The fast engine's loss: label-smoothed cross-entropy with a hand-written backward.

PyTorch's `F.cross_entropy(..., label_smoothing=eps)` builds several (N, V) temporaries for the
smoothing term and its gradient; with an 8k vocabulary that was about a third of a CPU training
step (benchmarks/train_speed.py). The loss here makes one (N, V) tensor: forward, the
log-probabilities (one fused `log_softmax`, where `logsumexp` takes four passes and a temporary),
which backward turns into the gradient in place. Checked against `translate.loss` in
tests/fast/test_fast_loss.py.

    p_ij = log softmax(x_i)_j
    loss_i = -(1 - eps) * p_{i, y_i} - eps * mean_j p_ij            (= PyTorch's definition)
    d loss_i / d x_ij = softmax(x_i)_j - (1 - eps) * [j == y_i] - eps / V

Tests: tests/fast/test_fast_loss.py.
"""

from __future__ import annotations

import torch


class _LabelSmoothedCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, epsilon, ignore_index):  # (N, V), (N,)
        log_probs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)  # (N, V), cast inside
        valid = target != ignore_index  # (N,)
        picked = log_probs.gather(1, target[:, None]).squeeze(1)  # (N,)
        nll = -picked * valid
        loss = nll - epsilon * (log_probs.mean(dim=-1) - picked) * valid
        ctx.save_for_backward(log_probs, target, valid)
        ctx.epsilon = epsilon
        ctx.mark_non_differentiable(nll)
        return loss.sum(), nll.sum()

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        log_probs, target, valid = ctx.saved_tensors
        eps, V = ctx.epsilon, log_probs.size(-1)
        scale = (grad_loss * valid)[:, None]  # (N, 1)
        grad = log_probs.exp_()  # (N, V) softmax, in place: nothing reads them after this
        grad.sub_(eps / V).mul_(scale)
        grad.scatter_add_(1, target[:, None], (eps - 1.0) * scale)
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
