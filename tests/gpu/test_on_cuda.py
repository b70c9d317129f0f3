"""On a CUDA device: the tiny Transformer trains (bf16 autocast, fused AdamW, pinned batches) and
translates, the GPU computes what the CPU computes, and a training step never waits for the GPU
between log steps. Skipped without CUDA."""

import json
import math
from contextlib import contextmanager

import pytest
import torch

from helpers.training import TINY_OVERRIDES, poison_loss, ready_to_step, step
from translate.config import load_recipe
from translate.data.batch import collate
from translate.data.encode import encode_pairs
from translate.data.read import load_split
from translate.metrics import MetricsLog

pytestmark = pytest.mark.gpu
LOG_EVERY = 4


def cuda_trainer(recipe_path, data, run_dir, *overrides):
    """The tiny Transformer's Trainer on CUDA, logging every LOG_EVERY steps, ready to step."""
    from translate.training import build_trainer, prepare_data

    cfg = load_recipe(recipe_path, [*TINY_OVERRIDES, f"data.dataset={data}",
                                    f"train.log_every={LOG_EVERY}", "train.eval_every=0",
                                    "train.save_every=0", *overrides])
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    return ready_to_step(build_trainer(cfg, run_dir, prepare_data(cfg, run_dir), metrics,
                                       device="cuda", progress=False))


@contextmanager
def no_host_sync(enabled: bool = True):
    """Within the block any wait of the host for the GPU (a read, a blocking copy) raises."""
    torch.cuda.set_sync_debug_mode("error" if enabled else "default")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def train_records(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_steps_between_log_steps_never_wait_for_the_gpu(recipe_path, small_data, tmp_path,
                                                         precision):
    trainer = cuda_trainer(recipe_path, small_data, tmp_path, f"train.precision={precision}")
    updater = trainer.updater
    assert updater.defer_checks and updater.ema is not None and trainer.cfg.clip_norm > 0
    order = trainer.batcher.epoch(trainer.state.epoch)
    trainer.next_step(order)  # the first step sets up Adam's state (and the fp16 scale)
    while trainer.state.step < 3 * LOG_EVERY:
        with no_host_sync(enabled=(trainer.state.step + 1) % LOG_EVERY != 0):  # log steps read
            trainer.next_step(order)
    trainer.metrics.close()
    records = train_records(tmp_path)
    assert [r["step"] for r in records] == [4, 8, 12]
    assert all(math.isfinite(r["loss"]) and r["loss"] > 0 for r in records)


def test_a_nan_loss_on_cuda_is_skipped_on_the_device_and_counted_at_the_log(
        recipe_path, small_data, tmp_path):
    trainer = cuda_trainer(recipe_path, small_data, tmp_path, "train.precision=bf16")
    order = trainer.batcher.epoch(trainer.state.epoch)
    trainer.next_step(order)
    before = {k: v.clone() for k, v in trainer.updater.model.state_dict().items()}
    poison_loss(trainer, {1})
    with no_host_sync():
        trainer.next_step(order)  # step 2: infinite loss
    assert all(torch.equal(before[k], v) for k, v in trainer.updater.model.state_dict().items())
    assert trainer.state.step == 2 and trainer.state.bad_losses == 0  # counted, not yet read
    with no_host_sync():
        trainer.next_step(order)
    trainer.next_step(order)  # step 4 logs: steps 1, 3 and 4 averaged, step 2 counted as bad
    trainer.metrics.close()
    assert trainer.state.bad_losses == 1
    (record,) = train_records(tmp_path)
    assert record["step"] == 4 and math.isfinite(record["loss"])


def test_tiny_transformer_trains_and_translates_on_cuda(recipe_path, small_data, tmp_path):
    from translate.training import train

    cfg = load_recipe(recipe_path, [*TINY_OVERRIDES, f"data.dataset={small_data}",
                                    "train.max_steps=300", "train.precision=auto"])
    result = train(cfg, tmp_path / "run", device="cuda", progress=False)
    assert result.steps == 300 and result.best_dev_bleu > 0.5
    assert result.test_scores["test_2016_flickr"].bleu > 0.5
    lines = (tmp_path / "run" / "test_2016_flickr.hyp.de").read_text().splitlines()
    assert len(lines) == 100 and sum(bool(line) for line in lines) > 90


def test_cuda_and_cpu_compute_the_same_logits(trained_run):
    from translate.loading import load_checkpoint

    loaded = load_checkpoint(trained_run.best_checkpoint)
    src, tgt = load_split(loaded.recipe.data, "test_2016_flickr")
    pairs = encode_pairs(loaded.tokenizer, src[:16], tgt[:16])
    batch = collate(list(pairs.src), list(pairs.tgt))
    with torch.no_grad():
        cpu = loaded.model.eval()(batch.src, batch.tgt_in)
        gpu_batch = batch.to(torch.device("cuda"))
        gpu = loaded.model.cuda()(gpu_batch.src, gpu_batch.tgt_in).cpu()
    torch.testing.assert_close(gpu, cpu, atol=1e-3, rtol=1e-3)


def test_attention_on_cuda_never_takes_cudnn(recipe_path, small_data, tmp_path):
    """cuDNN builds a plan for every new (batch, length) shape (about a second a step): the
    Trainer's device choice turns it off, and a bf16 step's attention runs other kernels."""
    torch.backends.cuda.enable_cudnn_sdp(True)
    trainer = cuda_trainer(recipe_path, small_data, tmp_path, "train.precision=bf16")
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    order = trainer.batcher.epoch(trainer.state.epoch)
    with torch.profiler.profile() as prof:
        for _ in range(3):
            trainer.next_step(order)
        torch.cuda.synchronize()
    ops = {event.key for event in prof.key_averages()}
    assert not any("cudnn_attention" in op for op in ops)
    assert any(op.startswith("aten::_scaled_dot_product_") for op in ops), sorted(ops)


def test_the_recorded_step_makes_the_eager_update_and_never_waits(recipe_path, small_data,
                                                                   tmp_path):
    """train.cuda_graphs: each batch shape's first step records its graph; replaying the graphs
    makes the eager step's update (to rounding) and never waits for the GPU."""
    runs = {}
    for graphs in (False, True):
        run_dir = tmp_path / f"graphs-{graphs}"
        run_dir.mkdir()
        trainer = cuda_trainer(recipe_path, small_data, run_dir, "train.precision=bf16",
                               "train.engine=plain", "train.length_multiple=8",
                               f"train.cuda_graphs={str(graphs).lower()}")
        order = trainer.batcher.epoch(trainer.state.epoch)
        batches = [trainer.batcher.batch(order[i]) for i in range(4)]
        for rounds in range(3):  # the first round records; the others replay
            for batch in batches:
                with no_host_sync(enabled=rounds > 0):
                    step(trainer, [batch])
        runs[graphs] = trainer
    eager, recorded = runs[False], runs[True]
    shapes = {(b.src.shape, b.tgt_in.shape) for b in batches}
    assert recorded.updater.graphs.records and len(recorded.updater.graphs.slots) == len(shapes)
    assert all(slots.graph is not None for slots in recorded.updater.graphs.slots.values())
    losses = [torch.stack([f.sums for f in t.updater.pending]).cpu() for t in (eager, recorded)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-3, atol=0)
    for name, weight in eager.updater.model.state_dict().items():
        if name.endswith("k_proj.bias"):  # its gradient is rounding noise (see test_compile)
            continue
        torch.testing.assert_close(recorded.updater.model.state_dict()[name], weight, rtol=1e-3,
                                   atol=1e-4, msg=lambda m: f"{name}: {m}")


def host_syncs(run) -> int:
    """How many times `run()` made the host wait for the GPU."""
    import warnings

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in caught)


def test_the_gpu_engines_beam_search_reads_the_device_every_few_steps(trained_run, small_data):
    """translate.gpu.search: a handful of host reads per batch against the textbook search's
    several a step, and the same translations."""
    from translate import gpu, search
    from translate.loading import load_checkpoint
    from translate.data.batch import pad
    from translate.search import output_limits

    loaded = load_checkpoint(trained_run.run_dir)
    model = loaded.model.cuda().eval()
    lines = [json.loads(line)["en"] for line in (small_data / "validation.jsonl").open()][:32]
    src = pad([torch.tensor(ids) for ids in loaded.tokenizer.encode_src(lines)]).cuda()
    limits = output_limits(src, 1.5, 10, 200)
    found, syncs = {}, {}
    for name, beam_search in (("textbook", search.beam_search), ("gpu", gpu.beam_search)):
        syncs[name] = host_syncs(lambda: found.__setitem__(
            name, beam_search(model, src, 5, limits)))
    assert [[h.tokens for h in hs] for hs in found["gpu"]] == \
        [[h.tokens for h in hs] for hs in found["textbook"]]
    longest = int(limits.max()) + 1
    assert syncs["gpu"] <= 2 * (longest // gpu.search.CHECK_EVERY + 1) + 8, syncs
    assert syncs["gpu"] * 3 < syncs["textbook"], syncs


def test_the_chunked_loss_on_cuda_needs_a_fraction_of_the_memory():
    """A 32k vocabulary, 8k target tokens, bf16: the loss and gradients of the whole logits, in
    a fraction of their peak memory."""
    from torch import nn

    from translate.gpu.loss import chunked_cross_entropy
    from translate.loss import label_smoothed_cross_entropy

    torch.manual_seed(0)
    N, D, V = 8192, 512, 32_000
    hidden = torch.randn(N, D, device="cuda", requires_grad=True)
    output = nn.Linear(D, V, bias=False).cuda()
    target = torch.randint(1, V, (N,), device="cuda")
    found = {}
    for name in ("whole", "chunked"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if name == "whole":
                loss, _ = label_smoothed_cross_entropy(output(hidden), target, 0.1, 0)
            else:
                loss, _ = chunked_cross_entropy(hidden, output, target, 0.1, 0, 1024)
        grads = torch.autograd.grad(loss / N, [hidden, output.weight])
        torch.cuda.synchronize()
        found[name] = (loss.item(), grads, torch.cuda.max_memory_allocated() - start)
    (whole, grads_w, peak_w), (chunked, grads_c, peak_c) = found.values()
    assert chunked == pytest.approx(whole, rel=1e-3)
    for g, w in zip(grads_c, grads_w):
        torch.testing.assert_close(g, w.to(g.dtype), rtol=0.05, atol=1e-4)
    assert peak_c < peak_w / 3, (peak_c, peak_w)
