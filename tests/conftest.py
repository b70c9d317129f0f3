"""pytest's hooks and the shared fixtures: the Multi30k sample in tests/data, the full copy (slow
tests), a tiny recipe and runs trained on it. What a test imports lives in tests/helpers/."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read by `datasets` at import: never touch the hub

from helpers.files import MULTI30K, SAMPLE, read_jsonl  # noqa: E402
from helpers.training import RECIPES, RNN_TINY_OVERRIDES, TINY_OVERRIDES, train_tiny  # noqa: E402


def pytest_configure(config):
    """The suite runs on the CPU, where its expected values were made (a visible GPU would be
    every `device=None`'s choice, in bf16); `pytest -m gpu` runs the tests marked gpu on CUDA.
    Hidden through the environment, the GPU stays hidden from the commands the tests start.

    The tests compute on at most two threads, and every command they start on as many
    (OMP_NUM_THREADS, read by torch as a process starts, unless a test says otherwise): a value
    a test compares with a command's is then summed in the same order, whatever the machine's
    core count or the shell's setting. Under pytest-xdist (`-n N`) the workers share the cores:
    each computes on its share of them, so that no two workers' threads spin on one core."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    threads = max(1, min(2, torch.get_num_threads() // workers))
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if config.getoption("markexpr") != "gpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def pytest_collection_modifyitems(config, items):
    """Every test in tests/reliability/ is marked `reliability` (as are the files beside their
    rooms that mark themselves); tests marked `gpu` skip, saying why, unless run with `-m gpu`
    on a machine with CUDA."""
    for item in items:
        if "reliability" in item.path.parts:
            item.add_marker(pytest.mark.reliability)
    if torch.cuda.is_available():
        return
    reason = "needs a CUDA device" if config.getoption("markexpr") == "gpu" else \
        "`pytest -m gpu` runs it, on a machine with CUDA"
    skip = pytest.mark.skip(reason=f"marked gpu: {reason}")
    for item in items:
        if item.get_closest_marker("gpu"):  # the marker, not the word: tests/gpu/ is a folder
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


@pytest.fixture(scope="session")
def small_data(tmp_path_factory) -> Path:
    """A copy of the committed sample: 2000 usable train pairs (and 2 broken ones), 100-pair
    validation, test_2016_flickr and test_2017_flickr splits."""
    return Path(shutil.copytree(SAMPLE, tmp_path_factory.mktemp("data") / "multi30k"))


@pytest.fixture
def data(small_data, tmp_path) -> Path:
    """A copy of the sample this test may change (tests of the encoded-corpus cache)."""
    return Path(shutil.copytree(small_data, tmp_path / "data"))


@pytest.fixture(scope="module")
def tokenizer(small_data):
    """A joint 500-piece tokenizer trained on the sample's first 500 pairs."""
    from translate.config import TokenizerConfig
    from translate.tokenizer import Tokenizer

    rows = read_jsonl(small_data / "train.jsonl", 500)
    return Tokenizer.train([r["en"] for r in rows], [r["de"] for r in rows],
                           TokenizerConfig(vocab_size=500))


@pytest.fixture(scope="session")
def recipe_path() -> Path:
    """The 2017 Transformer recipe (the tour's): the shared tiny run is a model every export
    format holds. tests/project/test_recipes.py trains the adopted one (transformer.yaml)."""
    return RECIPES / "transformer_2017.yaml"


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
