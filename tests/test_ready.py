"""The decoding set-up, made once (translate.ready): no module of the package resolves a device,
a precision or an engine anywhere else, every command and the Python API default alike, and the
API sets a run's model up as `translate decode` does."""

import ast
import inspect
from pathlib import Path

import pytest
import torch

from translate.engine import PLAIN
from translate.ready import Ready

PACKAGE = Path(__file__).resolve().parents[1] / "translate"
RESOLVERS = {"pick_device", "resolve_precision", "resolve_engine"}
# The modules that may call them, each with its reason; the modules defining them call none.
ALLOWED = {
    "translate/ready.py": "decoding's set-up, for every command, the API and the test decode",
    "translate/training/build.py": "training's own device, precision (`auto` chosen for "
                                   "training, not decoding) and engine",
}


def resolutions(source: str) -> list[str]:
    """Each call of a resolver in `source` (`pick_device(...)`, `hardware.pick_device(...)`),
    and each import of one (an alias would hide its calls), as "line: name"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in RESOLVERS:
                found.append(f"{node.lineno}: {name}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name in RESOLVERS]
    return found


def test_no_module_resolves_a_device_precision_or_engine_outside_its_one_place():
    stray = [f"{path.relative_to(PACKAGE.parent).as_posix()}:{where}"
             for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(PACKAGE.parent).as_posix() not in ALLOWED
             for where in resolutions(path.read_text(encoding="utf-8"))]
    assert stray == [], "set the model up with translate.ready.Ready instead"


def test_the_scan_sees_a_call_an_attribute_call_and_an_aliased_import():
    assert resolutions("from translate.hardware import pick_device\npick_device('cpu')\n") == [
        "1: import pick_device", "2: pick_device"]
    assert resolutions("engine.resolve_engine('auto', device)") == ["1: resolve_engine"]
    assert resolutions("from translate.hardware import resolve_precision as rp") == [
        "1: import resolve_precision"]
    assert resolutions("autocast(device, precision)") == []


SETUP = ("device", "precision", "engine")


def defaults(function) -> dict:
    """The defaults `function` gives the set-up arguments it takes."""
    parameters = inspect.signature(function).parameters
    return {name: parameters[name].default for name in SETUP if name in parameters}


def surfaces() -> list:
    """Every Python function that takes a device, precision or engine name from a user."""
    from translate import Translator
    from translate.analysis.attention import draw_attention
    from translate.analysis.beam_sweep import sweep_beams
    from translate.analysis.compare import compare, open_run
    from translate.decode_io import decode_file
    from translate.evaluation import score_checkpoint

    return [Translator.load, decode_file, score_checkpoint, sweep_beams, compare, open_run,
            draw_attention]


def test_every_python_surface_leaves_the_set_up_to_ready_load():
    """None everywhere: what None means is decided once, in Ready.load."""
    assert defaults(Ready.load) == {"device": None, "precision": None, "engine": None}
    for function in surfaces():
        assert defaults(function), function.__qualname__
        assert all(value is None for value in defaults(function).values()), \
            (function.__qualname__, defaults(function))


def test_the_server_leaves_the_set_up_to_ready_load_too():
    pytest.importorskip("uvicorn", reason="the serve extra is not installed")
    from translate.serve import load_translator, serve

    for function in (load_translator, serve):
        assert defaults(function) == {"device": None, "precision": None, "engine": None}


def test_the_command_line_defaults_as_the_api_does():
    """Each command's --device, --precision and --engine default to what Translator.load's
    arguments do, so that `translate decode RUN` and `Translator.load(RUN)` decode alike."""
    from translate import Translator
    from translate.cli import main

    api = defaults(Translator.load)
    seen = set()
    for name, command in main.commands.items():
        for param in command.params:
            if param.name in SETUP:
                assert param.default == api[param.name], (name, param.name, param.default)
                seen.add((name, param.name))
    for name in ("decode", "evaluate", "tune-beam", "serve"):
        assert {(name, p) for p in SETUP} <= seen, name
    assert {("compare", "device"), ("compare", "engine"), ("attention", "device")} <= seen


def test_the_names_each_list_is_written_once():
    """The recipe's schema and the options read the engine and precision names from where
    they are defined."""
    from dataclasses import fields

    from translate.cli_options import engine_option, precision_option
    from translate.config import TrainConfig
    from translate.config.names import ENGINE_NAMES, PRECISIONS, TRAINING_PRECISIONS

    choices = {f.name: f.metadata.get("choices") for f in fields(TrainConfig)}
    assert choices["engine"] is ENGINE_NAMES and choices["precision"] is TRAINING_PRECISIONS
    options = {}
    for option in (engine_option, precision_option):
        command = option(lambda **kwargs: None)
        options.update({p.name: tuple(p.type.choices) for p in command.__click_params__})
    assert options == {"engine": ENGINE_NAMES, "precision": PRECISIONS}


def test_a_ready_model_built_directly_decodes_as_it_is():
    model = torch.nn.Identity()
    ready = Ready(model, None, "cpu")
    assert ready.model is model and ready.device == torch.device("cpu")
    assert (ready.precision, ready.engine) == ("fp32", PLAIN)
    with pytest.raises(ValueError, match="not 'auto': Ready.prepare resolves auto and int8"):
        Ready(model, None, precision="auto")


def test_the_api_sets_a_run_up_as_the_command_line_does(trained_run):
    """The tests' runs train in fp32 (helpers/training.py): both decode in fp32 where `auto`
    would pick bf16 (a CPU with AMX, say), which the API did before the two were made one."""
    from translate import Translator

    translator = Translator.load(trained_run.run_dir)
    ready = Ready.load(trained_run.run_dir)  # as `translate decode`, `evaluate` and `serve` do
    assert ready.recipe.train.precision == "fp32"
    assert translator.precision == ready.precision == "fp32"
    assert (translator.device, translator.engine) == (ready.device, ready.engine)
    assert translator.step == ready.step == trained_run.best_step
