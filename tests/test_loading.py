"""The loading room (translate.loading), counted: `translate decode`, `translate evaluate` and
`Translator.load` on a run folder, a .pt and an exported folder decide what the path names
once, open each of the model's files once, check its digest, schema, fit and finiteness once,
and resolve the device, the precision and the engine once. Spies wrap each function wherever
a module of the package holds it, and count; the opens are counted at the system call."""

from __future__ import annotations

import io
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers.cli import cli
from helpers.files import read_jsonl

# module -> the functions whose calls are counted: each one decision or check of a load
SPIED = {
    "translate.locate": ("locate",),  # what the path names
    "translate.checkpoint": ("_check_schema", "content_digest"),  # a .pt's schema, checksum
    "translate.model_folder": ("_check_config",),  # an export's schema
    "translate.files": ("read_trusted",),  # an export's files, each with its SHA-256
    "translate.weights": ("check_weights_fit", "check_finite"),
    "translate.loading": ("check_outputs_finite",),
    "translate.hardware": ("pick_device", "resolve_precision"),
    "translate.engine": ("resolve_engine",),
}
KINDS = ("run folder", "checkpoint", "exported model")


class Counts:
    """Calls of the spied functions by name, and opens of each file under `folder`."""

    def __init__(self, folder: Path):
        self.folder = folder.resolve()
        self.calls: Counter[str] = Counter()
        self.opened: Counter[str] = Counter()

    def open_of(self, path) -> None:
        if isinstance(path, (str, os.PathLike)):
            path = Path(os.path.abspath(path))
            if path.is_relative_to(self.folder):
                self.opened[path.name] += 1


def spy_everywhere(monkeypatch, counts: Counts) -> None:
    """Each spied function replaced, in its module and in every module of the package that
    imported it by name, by a wrapper that counts its calls."""
    originals = {}
    for module_name, names in SPIED.items():
        module = sys.modules[module_name]
        for name in names:
            original = getattr(module, name)

            def spy(*args, __original=original, __name=name, **kwargs):
                counts.calls[__name] += 1
                return __original(*args, **kwargs)

            originals[id(original)] = spy
    for module_name, module in list(sys.modules.items()):
        if module_name == "translate" or module_name.startswith("translate."):
            for attribute, value in list(vars(module).items()):
                if id(value) in originals and callable(value):
                    monkeypatch.setattr(module, attribute, originals[id(value)])
    real_open, real_io_open = os.open, io.open

    def os_open(path, *args, **kwargs):
        counts.open_of(path)
        return real_open(path, *args, **kwargs)

    def io_open(file, *args, **kwargs):
        counts.open_of(file)
        return real_io_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    monkeypatch.setattr("builtins.open", io_open)


@pytest.fixture(scope="module")
def models(trained_run, tmp_path_factory) -> dict[str, Path]:
    """A run folder, a .pt named on its own, and an exported folder, each of one trained model."""
    import translate.engine  # noqa: F401  (every spied module imported before spying)
    import translate.loading  # noqa: F401

    exported = tmp_path_factory.mktemp("export") / "model"
    assert cli("export", trained_run.run_dir, "-o", exported).exit_code == 0
    return {"run folder": trained_run.run_dir, "checkpoint": trained_run.best_checkpoint,
            "exported model": exported}


def model_folder(path: Path) -> Path:
    return path if path.is_dir() else path.parent


def expected_opens(kind: str, path: Path) -> dict[str, int]:
    """Each of the model's files a load reads, once."""
    if kind == "exported model":
        return {"config.json": 1, "model.safetensors": 1, "spm.model": 1}  # joint: one spm
    return {"best.pt": 1}


def expected_calls(kind: str) -> dict[str, int]:
    once = {"locate": 1, "check_weights_fit": 1, "check_finite": 1, "check_outputs_finite": 1,
            "pick_device": 1, "resolve_precision": 1, "resolve_engine": 1}
    if kind == "exported model":  # config.json, the weights, spm.model
        return {**once, "_check_config": 1, "read_trusted": 3}
    return {**once, "_check_schema": 1, "content_digest": 1}


def assert_counted(counts: Counts, kind: str, path: Path) -> None:
    calls = {name: counts.calls[name] for names in SPIED.values() for name in names
             if counts.calls[name]}
    assert calls == expected_calls(kind), kind
    assert dict(counts.opened) == expected_opens(kind, path), kind


@pytest.mark.parametrize("kind", KINDS)
def test_decode_loads_once(models, kind, tmp_path, small_data, monkeypatch):
    path = models[kind]
    source = tmp_path / "in.en"
    source.write_text("".join(row["en"] + "\n" for row in
                              read_jsonl(small_data / "test_2016_flickr.jsonl", 3)))
    counts = Counts(model_folder(path))
    spy_everywhere(monkeypatch, counts)
    result = cli("decode", path, "-i", source, "-o", tmp_path / "out.de", "--beam", "1",
                 "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "out.de").read_text().splitlines()) == 3
    assert_counted(counts, kind, path)


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_loads_once(models, kind, small_data, monkeypatch):
    path = models[kind]
    counts = Counts(model_folder(path))
    spy_everywhere(monkeypatch, counts)
    result = cli("evaluate", path, "--split", "test_2016_flickr", "--data", small_data,
                 "--beam", "1", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    assert '"bleu"' in result.output
    assert_counted(counts, kind, path)


@pytest.mark.parametrize("kind", KINDS)
def test_translator_load_loads_once(models, kind, monkeypatch):
    from translate import Translator

    path = models[kind]
    counts = Counts(model_folder(path))
    spy_everywhere(monkeypatch, counts)
    translator = Translator.load(path, device="cpu")
    assert isinstance(translator.translate("A dog runs.", beam=1), str)
    assert_counted(counts, kind, path)


def test_the_spies_see_a_second_load(models, monkeypatch):
    """The counts are real: two loads of a run folder count every decision twice."""
    from translate import Translator

    path = models["run folder"]
    counts = Counts(path)
    spy_everywhere(monkeypatch, counts)
    Translator.load(path, device="cpu")
    Translator.load(path, device="cpu")
    assert counts.calls["locate"] == counts.calls["check_finite"] == 2
    assert counts.opened["best.pt"] == 2


def test_one_function_decides_what_a_path_names():
    """No module but translate.locate asks whether a path is an exported folder or a run's."""
    root = Path(__file__).resolve().parents[1] / "translate"
    askers = sorted(str(f.relative_to(root)) for f in root.rglob("*.py")
                    if "is_model_folder(" in f.read_text(encoding="utf-8"))
    assert askers == ["locate.py", "model_folder.py"]  # the decider, and where it is defined
