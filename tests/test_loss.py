import torch
import torch.nn.functional as F

from translate.loss import label_smoothed_cross_entropy


def test_matches_torch_cross_entropy_value_and_gradient():
    torch.manual_seed(0)
    logits = torch.randn(4, 7, 30, requires_grad=True)
    target = torch.randint(1, 30, (4, 7))
    target[0, 5:] = 0  # padding
    loss, nll = label_smoothed_cross_entropy(logits, target, 0.1, ignore_index=0)
    loss.backward()
    ours = logits.grad.clone()
    logits.grad = None
    ref = F.cross_entropy(logits.view(-1, 30), target.view(-1), ignore_index=0,
                          label_smoothing=0.1, reduction="sum")
    ref.backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(ours, logits.grad)
    plain = F.cross_entropy(logits.view(-1, 30), target.view(-1), ignore_index=0, reduction="sum")
    torch.testing.assert_close(nll, plain.detach())
    assert torch.all(ours[0, 5:] == 0)
