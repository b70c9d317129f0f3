"""On a CUDA device: the tiny Transformer trains (bf16 autocast, fused AdamW, pinned batches) and
translates, and the GPU computes what the CPU computes. Skipped without CUDA."""

import pytest
import torch

from conftest import TINY_OVERRIDES
from translate.config import load_recipe
from translate.data import collate, encode_pairs, load_split

pytestmark = pytest.mark.gpu


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
    from translate.checkpoint import load_checkpoint

    loaded = load_checkpoint(trained_run.best_checkpoint)
    src, tgt = load_split(loaded.recipe.data, "test_2016_flickr")
    pairs = encode_pairs(loaded.tokenizer, src[:16], tgt[:16])
    batch = collate(list(pairs.src), list(pairs.tgt))
    with torch.no_grad():
        cpu = loaded.model.eval()(batch.src, batch.tgt_in)
        gpu_batch = batch.to(torch.device("cuda"))
        gpu = loaded.model.cuda()(gpu_batch.src, gpu_batch.tgt_in).cpu()
    torch.testing.assert_close(gpu, cpu, atol=1e-3, rtol=1e-3)
