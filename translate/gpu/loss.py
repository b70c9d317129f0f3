"""`train.loss_chunk`: label-smoothed cross-entropy over a large vocabulary without the logits.

With a 32k vocabulary and 25k target tokens a step, the logits are 0.8G numbers: 1.6 GB in
bf16, 3.2 GB more in fp32 for the softmax, and their gradients as much again. This loss takes
the decoder's output states (N, D) and the output layer instead, and for `chunk` rows at a time
projects them to the vocabulary, normalises, adds up the loss and computes the gradient at once:

    logits = h W^T + b                                        (n, V), in the autocast dtype
    p = log softmax(logits)                                   (n, V) fp32, one chunk only
    loss_i = -(1 - eps) p_{i, y_i} - eps mean_j p_ij          (= translate.loss's definition)
    g = d loss / d logits = softmax - (1 - eps) onehot(y) - eps / V
    dL/dh = g W      dL/dW += g^T h      dL/db += sum_i g_i

The gradients with respect to the states (N, D) and the weights (V, D) are kept, and backward
only scales them by the loss's incoming gradient. Peak memory is a few (chunk, V) tensors
instead of several (N, V) ones; the work is the same three matmuls autograd would do. Positions
whose target is `ignore_index` count for nothing. tests/gpu/test_chunked_loss.py checks the
loss and every gradient against `translate.loss` on the projected logits.

Tests: tests/gpu/test_chunked_loss.py, tests/gpu/test_on_cuda.py.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn


class _ChunkedProjectionCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, target, epsilon, ignore_index, chunk, dtype):
        # hidden (N, D), weight (V, D), bias (V,) or None, target (N,)
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        N, V = hidden.size(0), weight.size(0)
        h, w = hidden.to(dtype), weight.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        grad_h = torch.zeros_like(hidden) if want_h else None  # (N, D)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if want_w else None  # (V, D), summed over the chunks in fp32
        grad_b = torch.zeros(V, dtype=torch.float32, device=weight.device) if want_b else None
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        nll = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, N, chunk):
            rows = slice(start, start + chunk)
            logits = h[rows] @ w.T if b is None else torch.addmm(b, h[rows], w.T)  # (n, V)
            log_probs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)  # (n, V)
            del logits
            y = target[rows]  # (n,)
            valid = (y != ignore_index).float()  # (n,)
            picked = log_probs.gather(1, y[:, None]).squeeze(1)  # (n,)
            nll = nll + (-picked * valid).sum()
            loss = loss + ((-picked - epsilon * (log_probs.mean(dim=-1) - picked)) * valid).sum()
            if not (want_h or want_w or want_b):
                continue
            g = log_probs.exp_().sub_(epsilon / V)  # (n, V), in place: softmax - eps / V
            g.scatter_add_(1, y[:, None], torch.full_like(picked, epsilon - 1.0)[:, None])
            g.mul_(valid[:, None])
            if want_b:
                grad_b += g.sum(dim=0)
            g = g.to(dtype)
            if want_h:
                grad_h[rows] = g @ w  # (n, D)
            if want_w:
                grad_w += (g.T @ h[rows]).float()  # (V, D)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        scaled = [None if g is None else g * grad_loss.to(g.dtype)
                  for g in (grad_h, grad_w, grad_b)]
        return (*scaled, None, None, None, None, None)


def chunked_cross_entropy(hidden: torch.Tensor, output: nn.Linear, target: torch.Tensor,
                          epsilon: float, ignore_index: int, chunk: int
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss and summed NLL of `output(hidden)`, `chunk` rows at a time.

    Args:
        hidden: (..., D) the states the output layer projects (a model's `features`).
        output: the (V, D) output layer; the matmuls run in autocast's dtype where it is on.
        target: (...) gold ids; `ignore_index` positions count for nothing.
        epsilon: label smoothing.
        chunk: rows projected at a time.

    Returns:
        The loss to minimise and the NLL, both () fp32 sums, as `translate.loss` gives them.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1 row, got {chunk}")
    device = hidden.device.type
    dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
             else hidden.dtype)
    bias: Optional[torch.Tensor] = output.bias
    with torch.autocast(device, enabled=False):
        return _ChunkedProjectionCE.apply(hidden.reshape(-1, hidden.size(-1)), output.weight,
                                          bias, target.reshape(-1), epsilon, ignore_index,
                                          chunk, dtype)
