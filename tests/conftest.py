"""Shared fixtures: the Multi30k sample in tests/data, the full copy (slow tests), a tiny recipe."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read by `datasets` at import: never touch the hub

MULTI30K = Path(os.environ.get("MULTI30K", Path(__file__).resolve().parents[2] / "shared/data/multi30k"))
SAMPLE = Path(__file__).resolve().parent / "data" / "multi30k"  # committed: see its README.md


def pytest_configure(config):
    """The suite runs on the CPU, where its expected values were made (a visible GPU would be
    every `device=None`'s choice, in bf16); `pytest -m gpu` runs the tests marked gpu on CUDA.
    Hidden through the environment, the GPU stays hidden from the commands the tests start.

    The tests compute on at most two threads, and every command they start on as many
    (OMP_NUM_THREADS, read by torch as a process starts, unless a test says otherwise): a value
    a test compares with a command's is then summed in the same order, whatever the machine's
    core count or the shell's setting."""
    threads = max(1, min(2, torch.get_num_threads()))
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if config.getoption("markexpr") != "gpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` skip, saying why, unless run with `-m gpu` on a machine with CUDA."""
    if torch.cuda.is_available():
        return
    reason = "needs a CUDA device" if config.getoption("markexpr") == "gpu" else \
        "`pytest -m gpu` runs it, on a machine with CUDA"
    skip = pytest.mark.skip(reason=f"marked gpu: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_makereport(item, call):
    """Ctrl-C stops the suite. A test training in this process holds SIGINT (training saves a
    checkpoint, then raises Interrupted), so pytest would see a failed test and go on: a test
    that ends in a SIGINT's Interrupted stops the session instead."""
    from translate.training.loop import Interrupted

    if call.excinfo is not None and call.excinfo.errisinstance(Interrupted) and \
            call.excinfo.value.signum == signal.SIGINT:
        item.session.shouldstop = "interrupted (Ctrl-C) while a test was training"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test session gets its own encoded-data cache; no test reads the hub."""
    monkeypatch.setenv("TRANSLATE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("TRANSLATE_DATA", raising=False)


@pytest.fixture
def one_gpu(monkeypatch):
    """A machine that shows one CUDA device (nothing here runs on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


@pytest.fixture(scope="session")
def multi30k() -> Path:
    """The full Multi30k copy outside the repository: for tests marked slow only."""
    if not (MULTI30K / "train.jsonl").is_file():
        pytest.fail(f"the Multi30k copy is missing at {MULTI30K} (set MULTI30K=PATH)")
    return MULTI30K


def read_jsonl(path: Path, n: int | None = None) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if n is not None and len(rows) >= n:
                break
    return rows


def untrained_model(data: Path, layers: int = 1, overrides: tuple[str, ...] = ()):
    """(recipe, tokenizer, model) for tests of shapes and files, not skill: a joint 200-piece
    tokenizer trained on 500 pairs of `data` and a d_model=32 Transformer of `layers` layers a
    side (and the recipe `overrides`, e.g. "model.positions=rope"), drawn with seed 0."""
    from translate.config import load_recipe
    from translate.models import build_model
    from translate.tokenizer import Tokenizer

    rows = read_jsonl(data / "train.jsonl", 500)
    cfg = load_recipe(None, ["tokenizer.vocab_size=200", "model.d_model=32", "model.heads=2",
                             "model.ffn_dim=64", f"model.encoder_layers={layers}",
                             f"model.decoder_layers={layers}", *overrides])
    tokenizer = Tokenizer.train([r["en"] for r in rows], [r["de"] for r in rows], cfg.tokenizer)
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    return cfg, tokenizer, model


def with_weights(attn: torch.nn.Module, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """One call of an attention module: its output, and the weights it attended with, as
    `translate.analysis.attention.record_attention` records them: (B, H, T, S) for
    MultiHeadAttention, (B, 1, S) for AdditiveAttention."""
    from translate.analysis.attention import record_attention

    with record_attention(attn) as recorded:
        out = attn(*args, **kwargs)
    [(weights,)] = recorded.values()  # one module, called once
    return out, weights


@pytest.fixture(scope="session")
def small_data(tmp_path_factory) -> Path:
    """A copy of the committed sample: 2000 usable train pairs (and 2 broken ones), 100-pair
    validation, test_2016_flickr and test_2017_flickr splits."""
    return Path(shutil.copytree(SAMPLE, tmp_path_factory.mktemp("data") / "multi30k"))


TINY_TRAIN = [
    "tokenizer.vocab_size=1000", "train.max_tokens=1500", "train.lr=3e-3", "train.warmup=30",
    "train.eval_every=100", "train.log_every=10", "train.eval_every_minutes=0",
    "train.max_minutes=0", "train.patience=0", "train.ema_decay=0.999",
    "decode.beam=1",  # tiny models decode greedy: a beam finds their short, empty outputs
    # one precision on every CPU: `auto` would train these tiny models in bf16 where the CPU
    # has AMX, 1.4-1.8x slower at their size (tests of `auto` itself set it)
    "train.precision=fp32",
]
TINY_OVERRIDES = [
    "model.d_model=64", "model.heads=4", "model.ffn_dim=128", "model.encoder_layers=2",
    "model.decoder_layers=2", "model.dropout=0.0", *TINY_TRAIN,
]
RNN_TINY_OVERRIDES = [
    "model.embed_dim=64", "model.encoder_hidden=64", "model.decoder_hidden=96",
    "model.attn_dim=64", "model.dropout=0.0", *TINY_TRAIN,
]
RECIPES = Path(__file__).resolve().parents[1] / "recipes/multi30k"


def train_tiny(recipe: Path, overrides: list[str], data: Path, steps: int, run_dir: Path):
    from translate.config import load_recipe
    from translate.training import train

    cfg = load_recipe(recipe, [*overrides, f"data.dataset={data}", f"train.max_steps={steps}"])
    return train(cfg, run_dir, device="cpu", progress=False)


def ready_to_step(trainer):
    """`trainer` set up for `next_step` calls outside `run()`: epoch 1, no progress bar."""
    import time

    from translate.training.progress import TrainingBar

    trainer.state.epoch = 1
    trainer.bar = TrainingBar(trainer.cfg, enabled=False)
    trainer.start = trainer.last_eval = time.perf_counter()
    return trainer


def tiny_trainer(recipe: Path, data: Path, run_dir: Path, *overrides: str):
    """A Trainer of `recipe` with TINY_OVERRIDES and `overrides` on the CPU, in a new `run_dir`,
    logging to its metrics.jsonl, ready for `take_steps`."""
    from translate.config import load_recipe
    from translate.metrics import MetricsLog
    from translate.training import build_trainer, prepare_data

    cfg = load_recipe(recipe, [*TINY_OVERRIDES, f"data.dataset={data}", *overrides])
    run_dir.mkdir()
    return ready_to_step(build_trainer(cfg, run_dir, prepare_data(cfg, run_dir),
                                       MetricsLog(run_dir / "metrics.jsonl"), device="cpu",
                                       progress=False))


def step(trainer, batches, tokens=None):
    """One optimizer step of `trainer` on `batches` (target tokens: theirs unless given)."""
    tokens = tokens if tokens is not None else sum(b.num_tgt_tokens for b in batches)
    return trainer.updater.step(batches, tokens, trainer.state)


def take_steps(trainer, steps: int):
    """`steps` optimizer steps of the first epoch's batches, their figures read."""
    order = trainer.batcher.epoch(trainer.state.epoch)
    for _ in range(steps):
        trainer.next_step(order)
    trainer.updater.settle(trainer.state)
    return trainer


def poison_loss(trainer, bad_calls: set[int]) -> None:
    """Make `trainer`'s loss infinite on its engine's calls numbered in `bad_calls` (1-based)."""
    real, calls = trainer.updater.batch_loss.loss, []

    def loss(*args):
        calls.append(1)
        value, nll = real(*args)
        return (value * float("inf"), nll) if len(calls) in bad_calls else (value, nll)

    trainer.updater.batch_loss.loss = loss  # the step's BatchLoss, shared with its CUDA graphs


@pytest.fixture(scope="session")
def recipe_path() -> Path:
    return RECIPES / "transformer.yaml"


@pytest.fixture(scope="session")
def rnn_recipe_path() -> Path:
    return RECIPES / "rnn_bahdanau.yaml"


@pytest.fixture(scope="session")
def trained_run(small_data, recipe_path, tmp_path_factory):
    """One tiny Transformer trained 300 steps on 2k real pairs, shared by the tests that need one."""
    return train_tiny(recipe_path, TINY_OVERRIDES, small_data, 300, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="session")
def trained_rnn_run(small_data, rnn_recipe_path, tmp_path_factory):
    """One tiny attention RNN trained 200 steps on 2k real pairs."""
    return train_tiny(rnn_recipe_path, RNN_TINY_OVERRIDES, small_data, 200,
                      tmp_path_factory.mktemp("rnn_run"))
