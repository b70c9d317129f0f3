"""The recipes. Multi30k's Transformer is the 2017 one (the tour's) with the ablations' adopted
changes and nothing else, and trains and scores both test splits. The WMT14 recipes load, build
the papers' model sizes (counted, and written out from the architecture), and every command in
their headers parses and keeps the batch the header states."""

import dataclasses
import shlex
from pathlib import Path

import pytest
import torch

from helpers.files import read_jsonl
from helpers.training import TINY_OVERRIDES, train_tiny
from translate.loading import load_checkpoint
from translate.cli import train
from translate.config import load_recipe
from translate.models import build_model, count_parameters

REPO = Path(__file__).resolve().parents[2]
WMT14 = REPO / "recipes/wmt14"
MULTI30K = REPO / "recipes/multi30k"
# What the ablations adopted on top of the 2017 recipe (docs/results.md, each against it at the
# same minutes on one machine), and the second test split scored when training ends.
ADOPTED = {"model.positions": "rope", "model.qk_norm": True, "model.cross_query_norm": "width",
           "train.lr": 3e-3,
           "train.warmup": 400, "data.test_splits": ("test_2016_flickr", "test_2017_flickr"),
           "train.pick": "dev"}  # the checkpoint dev prefers, of best.pt and the last 5's average


def test_the_multi30k_recipe_is_the_2017_one_with_the_adopted_changes_only():
    new, old = (load_recipe(MULTI30K / f"{name}.yaml") for name in ("transformer",
                                                                   "transformer_2017"))
    changed = {}
    for section in ("data", "tokenizer", "model", "train", "decode"):
        a, b = dataclasses.asdict(getattr(old, section)), dataclasses.asdict(getattr(new, section))
        changed.update({f"{section}.{k}": v for k, v in b.items() if a[k] != v})
    assert changed == ADOPTED
    assert (old.model.positions, old.model.qk_norm) == ("sinusoidal", False)  # the notes' model


def test_the_multi30k_recipe_trains_and_scores_both_test_splits(small_data, tmp_path):
    result = train_tiny(MULTI30K / "transformer.yaml", TINY_OVERRIDES, small_data, 100,
                        tmp_path / "run")
    loaded = load_checkpoint(result.best_checkpoint)
    assert (loaded.model.cfg.positions, loaded.model.cfg.qk_norm) == ("rope", True)
    assert loaded.model.src_embed.position_table() is None  # nothing added to the embeddings
    losses = [row["loss"] for row in read_jsonl(result.run_dir / "metrics.jsonl")
              if row["kind"] == "train"]
    assert losses[-1] < losses[0] - 1.0
    assert set(result.test_scores) == {"test_2016_flickr", "test_2017_flickr"}
    for split in result.test_scores:
        sources = read_jsonl(small_data / f"{split}.jsonl")
        hyps = (result.run_dir / f"{split}.hyp.de").read_text(encoding="utf-8").splitlines()
        assert len(hyps) == len(sources)


def transformer_parameters(D: int, F: int, V: int, encoder_layers: int, decoder_layers: int
                           ) -> int:
    """Our pre-norm Transformer's parameters with one V x D embedding tied everywhere: attention
    4 (D^2 + D) (Q, K, V, out with biases), feed-forward 2 D F + F + D, LayerNorm 2 D."""
    attention, feed_forward, norm = 4 * (D * D + D), 2 * D * F + F + D, 2 * D
    encoder = attention + feed_forward + 2 * norm
    decoder = 2 * attention + feed_forward + 3 * norm
    return V * D + encoder_layers * encoder + decoder_layers * decoder + 2 * norm  # final norms


@pytest.mark.parametrize("name, millions", [("transformer_base", 60.5),
                                            ("transformer_big", 209.1)])
def test_wmt14_recipes_build_the_papers_model_sizes(name, millions):
    recipe = load_recipe(WMT14 / f"{name}.yaml")
    m, tok = recipe.model, recipe.tokenizer
    assert tok.model_type == "bpe" and tok.vocab_size == 32000 and tok.joint and m.tie_embeddings
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = build_model(m, tok.vocab_size, tok.vocab_size, tok.joint)
    expected = transformer_parameters(m.d_model, m.ffn_dim, tok.vocab_size, m.encoder_layers,
                                      m.decoder_layers)
    assert count_parameters(model) == expected
    assert round(expected / 1e6, 1) == millions  # the size each header states
    assert recipe.data.splits == {"train": "train", "dev": "validation", "newstest2014": "test"}
    assert (recipe.decode.beam, recipe.decode.lenpen) == (4, 0.6)


def header_commands(path: Path) -> list[list[str]]:
    """The `translate` and `torchrun` commands in a recipe's opening comment, as argument lists
    (continued lines joined, trailing comments dropped)."""
    commands, pending = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = pending + line.lstrip("#").strip()
        pending = text[:-1] + " " if text.endswith("\\") else ""
        if not pending and text.startswith(("translate ", "torchrun ")):
            commands.append(shlex.split(text, comments=True))
    return commands


@pytest.mark.parametrize("name, batch", [("transformer_base", 25_000),
                                         ("transformer_big", 3584 * 128)])
def test_each_header_command_parses_and_keeps_the_stated_batch(name, batch):
    commands = header_commands(WMT14 / f"{name}.yaml")
    assert {c[0] for c in commands} == {"torchrun", "translate"}
    for command in commands:
        processes = int(command[command.index("--nproc_per_node") + 1]) \
            if command[0] == "torchrun" else 1
        assert command[command.index("translate") + 1] == "train", command
        ctx = train.make_context("train", command[command.index("train") + 1:])
        recipe = load_recipe(REPO / ctx.params["recipe"], ctx.params["overrides"])
        assert ctx.params["run_dir"].startswith("runs/wmt14-")
        # each process takes accum_steps batches of the step (World.share): the global batch
        assert recipe.train.max_tokens * recipe.train.accum_steps * processes == batch, command
