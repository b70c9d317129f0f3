"""train.loss_chunk: the loss that projects the decoder's states a chunk at a time gives the
textbook loss's values and gradients, and a run trained with it the same weights."""

import pytest
import torch
from torch import nn

from helpers.files import read_jsonl
from helpers.training import take_steps, tiny_trainer
from translate.config import ConfigError
from translate.gpu.loss import chunked_cross_entropy
from translate.loss import label_smoothed_cross_entropy

N, D, V, PAD = 37, 16, 50, 0


def problem(bias: bool):
    torch.manual_seed(0)
    hidden = torch.randn(N, D, requires_grad=True)
    output = nn.Linear(D, V, bias=bias)
    target = torch.randint(1, V, (N,))
    target[[3, 4, 20, 36]] = PAD  # padding counts for nothing
    return hidden, output, target


def gradients(loss, hidden, output):
    params = [hidden, output.weight] + ([output.bias] if output.bias is not None else [])
    return torch.autograd.grad(loss, params)


@pytest.mark.parametrize("chunk", [1, 7, 64])
@pytest.mark.parametrize("bias", [False, True])
def test_values_and_gradients_equal_the_textbook_loss(chunk, bias):
    hidden, output, target = problem(bias)
    want, want_nll = label_smoothed_cross_entropy(output(hidden), target, 0.1, PAD)
    got, got_nll = chunked_cross_entropy(hidden, output, target, 0.1, PAD, chunk)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(got_nll, want_nll, rtol=1e-6, atol=1e-4)
    assert not got_nll.requires_grad
    for g, w in zip(gradients(got * 0.37, hidden, output), gradients(want * 0.37, hidden, output)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_bf16_autocast_projects_in_bf16_and_matches_the_textbook_loss():
    hidden, output, target = problem(False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = output(hidden)  # (N, V) bf16
        got, _ = chunked_cross_entropy(hidden, output, target, 0.1, PAD, 8)
    want, _ = label_smoothed_cross_entropy(logits, target, 0.1, PAD)
    assert logits.dtype == torch.bfloat16 and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    for g, w in zip(gradients(got, hidden, output), gradients(want, hidden, output)):
        torch.testing.assert_close(g, w, rtol=0.02, atol=2e-3)


def test_without_gradients_it_gives_the_loss_alone():
    hidden, output, target = problem(False)
    with torch.no_grad():
        loss, nll = chunked_cross_entropy(hidden, output, target, 0.0, PAD, 5)
        want = label_smoothed_cross_entropy(output(hidden), target, 0.0, PAD)[1]
    assert not loss.requires_grad
    torch.testing.assert_close(nll, want, rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(loss, nll)  # no smoothing: the loss is the NLL


def test_a_chunk_under_one_row_is_refused():
    hidden, output, target = problem(False)
    with pytest.raises(ValueError, match="chunk must be at least 1 row, got 0"):
        chunked_cross_entropy(hidden, output, target, 0.1, PAD, 0)


STEP_OVERRIDES = ["train.precision=fp32", "train.engine=plain", "train.eval_every=0",
                  "train.save_every=0", "train.log_every=1", "train.label_smoothing=0.1"]


def trainer_for(recipe_path, small_data, run_dir, *overrides):
    return tiny_trainer(recipe_path, small_data, run_dir, *STEP_OVERRIDES, *overrides)


def test_a_training_batch_gets_the_same_gradients(recipe_path, small_data, tmp_path):
    """The tiny Transformer (output layer tied to the embeddings) on a real batch: the
    trainer's loss and every gradient, with and without chunks, to fp32 rounding."""
    trainer = trainer_for(recipe_path, small_data, tmp_path / "run")
    model = trainer.updater.model.train()
    assert model.output.weight is model.tgt_embed.tokens.weight
    batch = trainer.batcher.batch(trainer.batcher.epoch(trainer.state.epoch)[0])
    found = []
    for chunk in (0, 50):
        trainer.updater.batch_loss.chunk = chunk
        loss, nll = trainer.updater.batch_loss(batch.src, batch.tgt_in, batch.tgt_out, 0.1)
        (loss / batch.num_tgt_tokens).backward()
        found.append((loss.item(), nll.item(), {n: p.grad.clone()
                                                for n, p in model.named_parameters()}))
        model.zero_grad(set_to_none=True)
    (loss0, nll0, grads0), (loss1, nll1, grads1) = found
    assert loss1 == pytest.approx(loss0, rel=1e-6) and nll1 == pytest.approx(nll0, rel=1e-6)
    for name, grad in grads0.items():
        torch.testing.assert_close(grads1[name], grad, rtol=1e-4, atol=1e-7, msg=name)


def test_training_with_chunks_logs_the_same_losses(recipe_path, small_data, tmp_path):
    """Four steps with and without chunks: the same losses and dev loss, weights apart by
    at most Adam's rounding-sized steps (a gradient of rounding noise, such as a key bias's,
    moves by up to the learning rate either way)."""
    from translate.training.validation import dev_loss

    runs = []
    for chunk in (0, 50):
        trainer = take_steps(trainer_for(recipe_path, small_data, tmp_path / f"c{chunk}",
                                         f"train.loss_chunk={chunk}"), 4)
        trainer.metrics.close()
        runs.append(trainer)
    plain, chunked = runs
    assert chunked.updater.batch_loss.chunk == 50 and plain.state.step == chunked.state.step == 4
    losses = [[r["loss"] for r in read_jsonl(t.run_dir / "metrics.jsonl")] for t in runs]
    assert len(losses[0]) == 4 and losses[1] == pytest.approx(losses[0], rel=1e-5)
    lr = plain.cfg.lr * 4 / plain.cfg.warmup  # the largest step's learning rate
    for (name, a), b in zip(plain.updater.model.state_dict().items(),
                            chunked.updater.model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=4 * lr, msg=name)
    dev = [dev_loss(t.updater.model, t.validation.dev.pairs, 2000, t.device, "fp32",
                    t.validation.engine, t.cfg.loss_chunk)
           for t in runs]
    assert dev[1] == pytest.approx(dev[0], rel=1e-4)


def test_chunks_with_torch_compile_are_refused(recipe_path, small_data, tmp_path):
    with pytest.raises(ConfigError, match="train.loss_chunk projects the decoder's states "
                                          "outside the compiled forward"):
        trainer_for(recipe_path, small_data, tmp_path / "run", "train.loss_chunk=64",
                    "train.compile=true")
