import pytest
import torch

from translate.fast.loss import label_smoothed_cross_entropy as fast_loss
from translate.loss import label_smoothed_cross_entropy as plain_loss


def test_hand_written_backward_equals_the_textbook_loss_value_and_gradient():
    torch.manual_seed(0)
    logits = torch.randn(4, 7, 30, requires_grad=True)
    target = torch.randint(1, 30, (4, 7))
    target[0, 5:] = 0  # padding
    loss, nll = fast_loss(logits, target, 0.1, ignore_index=0)
    loss.backward()
    ours = logits.grad.clone()
    logits.grad = None
    ref, ref_nll = plain_loss(logits, target, 0.1, ignore_index=0)
    ref.backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(nll, ref_nll)
    torch.testing.assert_close(ours, logits.grad)
    assert torch.all(ours[0, 5:] == 0)


def test_a_second_backward_through_the_loss_is_refused():
    """Backward turns the saved log-probabilities into the gradient in place: a graph kept
    for a second backward (retain_graph) would read them spent, so autograd refuses."""
    logits = torch.randn(6, 30, requires_grad=True)
    loss, _ = fast_loss(logits, torch.randint(1, 30, (6,)), 0.1, ignore_index=0)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_bf16_logits_give_the_fp32_loss_of_their_values_and_a_bf16_gradient():
    torch.manual_seed(0)
    logits = torch.randn(5, 6, 30).bfloat16().requires_grad_(True)
    target = torch.randint(1, 30, (5, 6))
    loss, nll = fast_loss(logits, target, 0.1, ignore_index=0)
    loss.backward()
    wide = logits.detach().float().requires_grad_(True)
    ref, ref_nll = plain_loss(wide, target, 0.1, ignore_index=0)
    ref.backward()
    assert loss.dtype == torch.float32 and logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(nll, ref_nll)
    torch.testing.assert_close(logits.grad, wide.grad.bfloat16())
