"""Hostile input to every command: one `Error:` line and a non-zero exit, or documented handling."""

import shutil

import pytest
import torch
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from translate.checkpoint import write_checkpoint
from translate.cli import main
from translate.config import ConfigError, TrainConfig, load_recipe

FUZZ = settings(max_examples=40, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def h(trained_run, small_data, recipe_path, tmp_path_factory):
    """A folder of hostile files, each named for what is wrong with it."""
    d = tmp_path_factory.mktemp("hostile")
    ckpt = trained_run.best_checkpoint
    good = torch.load(ckpt, weights_only=True)
    files = {
        "empty.txt": b"", "bad_utf8.txt": b"A dog.\nA cat \xff.\n", "empty.pt": b"",
        "truncated.pt": ckpt.read_bytes()[:50_000], "empty.yaml": b"",
        "list.yaml": b"- model\n", "wrong_type.yaml": b"model:\n  d_model: big\n",
        "unknown_key.yaml": b"train:\n  learning_rate: 0.1\n", "nul.yaml": b"model:\x00\n",
        "bad_utf8.yaml": b"model: \xff\n", "zero_accum.yaml": b"train:\n  accum_steps: 0\n",
        "mismatched/train.en": b"A dog.\nA cat.\n", "mismatched/train.de": b"Ein Hund.\n",
        "no_pairs/train.en": b"\n\n", "no_pairs/train.de": b"@@\n\n",
        "bad_metrics/metrics.jsonl": b'{"kind": "valid", "st', "a_file": b"x",
    }
    for name, content in files.items():
        (d / name).parent.mkdir(exist_ok=True)
        (d / name).write_bytes(content)
    (d / "folder").mkdir()
    other_vocab = {k: v[:500] if v.dim() and v.shape[0] == 1000 else v
                   for k, v in good["model"].items()}
    write_checkpoint(d / "other_vocab.pt", {**good, "model": other_vocab})
    rnn = {**good["recipe"], "model": {"arch": "rnn"}}
    write_checkpoint(d / "other_model.pt", {**good, "recipe": rnn})
    run = shutil.copytree(trained_run.run_dir, d / "run")  # a finished run, to resume
    return {"dir": d, "ckpt": str(ckpt), "data": str(small_data), "recipe": str(recipe_path),
            "run": str(run)}


def p(h, name):
    return str(h["dir"] / name)


CASES = {
    # decode: checkpoints
    "decode missing checkpoint": (lambda h: ["decode", p(h, "nope.pt")], "checkpoint not found"),
    "decode folder without best.pt": (lambda h: ["decode", p(h, "folder")], "without best.pt"),
    "decode empty checkpoint": (lambda h: ["decode", p(h, "empty.pt")], "the file is empty"),
    "decode truncated checkpoint": (lambda h: ["decode", p(h, "truncated.pt")],
                                    "truncated.pt: not a readable checkpoint"),
    "decode text as checkpoint": (lambda h: ["decode", p(h, "bad_utf8.txt")],
                                  "bad_utf8.txt is not a checkpoint: give a run folder or a .pt"),
    "decode spm.model as checkpoint": (lambda h: ["decode", h["run"] + "/spm.model"],
                                       "spm.model is not a checkpoint (it looks like a "
                                       "SentencePiece model)"),
    "decode unknown device": (lambda h: ["decode", h["ckpt"], "--device", "gpu"],
                              "--device 'gpu' is not a device: use cpu, cuda, cuda:N or mps"),
    "decode other vocabulary": (lambda h: ["decode", p(h, "other_vocab.pt")],
                                "transformer model (src_embed.tokens.weight: (500, 64) in the "
                                "file, (1000, 64) in the model)"),
    "decode other model type": (lambda h: ["decode", p(h, "other_model.pt")],
                                "weights do not fit the recipe's rnn model (missing "),
    # decode: input and output
    "decode missing input": (lambda h: ["decode", h["ckpt"], "-i", p(h, "nope")],
                             "input file not found"),
    "decode folder as input": (lambda h: ["decode", h["ckpt"], "-i", p(h, "folder")],
                               "input is a folder, not a file"),
    "decode invalid UTF-8": (lambda h: ["decode", h["ckpt"], "-i", p(h, "bad_utf8.txt")],
                             "line 2 is not valid UTF-8"),
    "decode folder as output": (lambda h: ["decode", h["ckpt"], "-i", p(h, "bad_utf8.txt"), "-o",
                                           p(h, "folder")], "output is a folder, not a file"),
    # evaluate
    "evaluate empty files": (lambda h: ["evaluate", "--hyp", p(h, "empty.txt"), "--ref",
                                        p(h, "empty.txt")], "empty.txt is empty: nothing to score"),
    "evaluate mismatched files": (lambda h: ["evaluate", "--hyp", p(h, "mismatched/train.en"),
                                             "--ref", p(h, "mismatched/train.de")],
                                  "has 2 lines"),
    "evaluate folder as --hyp": (lambda h: ["evaluate", "--hyp", p(h, "folder"), "--ref",
                                            p(h, "empty.txt")], "is a directory"),
    "evaluate unknown split": (lambda h: ["evaluate", h["ckpt"], "--data", h["data"], "--split",
                                          "nosuch"], "no file for split 'nosuch'"),
    "evaluate mismatched parallel data": (lambda h: ["evaluate", h["ckpt"], "--data",
                                                     p(h, "mismatched"), "--split", "train"],
                                          "parallel files differ in length"),
    # train: recipes and --set
    "train missing recipe": (lambda h: ["train", p(h, "nope.yaml")], "recipe not found"),
    "train folder as recipe": (lambda h: ["train", p(h, "folder")], "is a directory"),
    "train empty recipe": (lambda h: ["train", p(h, "empty.yaml")], "the recipe is empty"),
    "train list recipe": (lambda h: ["train", p(h, "list.yaml")], "a recipe is a mapping"),
    "train wrong type": (lambda h: ["train", p(h, "wrong_type.yaml")],
                         "model.d_model: expected an integer, got 'big'"),
    "train unknown key": (lambda h: ["train", p(h, "unknown_key.yaml")],
                          "unknown key(s) ['learning_rate']"),
    "train NUL in recipe": (lambda h: ["train", p(h, "nul.yaml")],
                            "not valid YAML (unacceptable character #x0000"),
    "train invalid UTF-8 recipe": (lambda h: ["train", p(h, "bad_utf8.yaml")], "not valid UTF-8"),
    "train zero accumulation": (lambda h: ["train", p(h, "zero_accum.yaml")],
                                "train.accum_steps: must be at least 1, got 0"),
    "train --set without =": (lambda h: ["train", h["recipe"], "--set", "model"],
                              "must look like section.key=value"),
    "train --set negative": (lambda h: ["train", h["recipe"], "--set", "train.lr=-1"],
                             "train.lr: must not be negative"),
    "train --set list arch": (lambda h: ["train", h["recipe"], "--set", "model.arch=[1]"],
                              "model.arch [1] is unknown"),
    # train: data and run folder
    "train missing data": (lambda h: ["train", h["recipe"], "--data", p(h, "nope"), "--run-dir",
                                      p(h, "r1")], "data folder not found"),
    "train mismatched parallel data": (lambda h: ["train", h["recipe"], "--data",
                                                  p(h, "mismatched"), "--run-dir", p(h, "r2")],
                                       "train.en has 2 lines"),
    "train no usable pairs": (lambda h: ["train", h["recipe"], "--data", p(h, "no_pairs"),
                                         "--run-dir", p(h, "r3")],
                              "the train split has no usable pairs (2 read"),
    "train run folder is a file": (lambda h: ["train", h["recipe"], "--run-dir", p(h, "a_file")],
                                   "is a file"),
    # train --resume
    "resume no run folder": (lambda h: ["train", "--resume", p(h, "folder")],
                             "no readable checkpoint to resume from"),
    "resume with a recipe": (lambda h: ["train", h["recipe"], "--resume", h["run"]],
                             "--resume RUN_DIR takes no RECIPE"),
    "resume changing the model": (lambda h: ["train", "--resume", h["run"], "--set",
                                             "model.d_model=32"],
                                  "--set 'model.d_model': a resumed run keeps its recipe"),
    "resume a finished run": (lambda h: ["train", "--resume", h["run"]],
                              "is at step 300, already train.max_steps (300)"),
    "resume past the time budget": (lambda h: ["train", "--resume", h["run"], "--set",
                                               "train.max_steps=400", "--set",
                                               "train.max_minutes=0.001"],
                                    "already train.max_minutes (0.001)"),
    "train nothing to do": (lambda h: ["train"], "give a RECIPE, or --resume RUN_DIR"),
    # compare, attention, curve
    "compare missing run": (lambda h: ["compare", p(h, "nope"), "-o", p(h, "report")],
                            "run folder not found"),
    "compare truncated log": (lambda h: ["compare", p(h, "bad_metrics"), "-o", p(h, "report")],
                              "line 1 is not valid JSON"),
    "attention empty text": (lambda h: ["attention", h["ckpt"], "--text", " "],
                             "the sentence to translate is empty"),
    "attention 100k characters": (lambda h: ["attention", h["ckpt"], "--text", "x" * 100_000],
                                  "over the model's limit"),
    "curve missing run": (lambda h: ["curve", p(h, "nope")], "no metrics log"),
    "curve folder as output": (lambda h: ["curve", h["run"], "-o", p(h, "folder")],
                               "is a directory"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_user_error_is_one_clear_line(h, case):
    make_args, message = CASES[case]
    result = CliRunner().invoke(main, make_args(h), input="A dog runs.\n")
    assert result.exit_code != 0
    assert not result.exception or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.output


def test_metrics_log_with_invalid_utf8_is_named(h, tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(b'{"kind": "valid"}\n\xff\n')
    result = CliRunner().invoke(main, ["curve", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output == f"Error: {tmp_path / 'metrics.jsonl'}: not valid UTF-8 (byte 18)\n"


def test_documented_input_handling(h, caplog):
    """Empty input: empty output. An empty line, a NUL byte or a 100k-character line keeps its
    place: one output line each (the long one cut to the model's limit, with a warning)."""
    runner = CliRunner()
    empty = runner.invoke(main, ["decode", h["ckpt"], "-i", p(h, "empty.txt")])
    assert empty.exit_code == 0 and empty.stdout == ""
    text = "A dog runs.\n\nA cat\x00 sleeps.\n" + "word " * 20_000 + "\n" + "x" * 100_000 + "\n"
    result = runner.invoke(main, ["decode", h["ckpt"]], input=text)
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert len(lines) == 6 and lines[-1] == "" and lines[1] == ""
    assert all(lines[i] for i in (0, 2, 3, 4))
    assert "line 5 has 100002 pieces, over the model's limit of 1023" in caplog.text


# -- property-based: the recipe / --set parser and decode's input --------------------------

KEYS = [f"train.{k}" for k in TrainConfig.__dataclass_fields__] + [
    "model.d_model", "model.arch", "model.dropout", "data.splits", "data.test_splits",
    "tokenizer.vocab_size", "tokenizer.spec", "decode.beam", "decode.lenpen", "nosuch.key", "train"]


@FUZZ
@given(st.text(max_size=60) | st.builds("{}={}".format, st.sampled_from(KEYS),
                                         st.text(max_size=30)))
def test_any_override_gives_a_recipe_or_a_config_error(override):
    try:
        load_recipe(None, [override])
    except ConfigError as e:
        assert str(e) and "\n" not in str(e)


@FUZZ
@given(st.dictionaries(st.sampled_from(["data", "model", "train", "decode", "tokenizer", "x"]),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                                    | st.text(max_size=10),
                                    lambda v: st.lists(v, max_size=3)
                                    | st.dictionaries(st.sampled_from(KEYS + ["arch"]), v,
                                                      max_size=3), max_leaves=6), max_size=4))
def test_any_recipe_file_gives_a_recipe_or_a_config_error(tmp_path, raw):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    try:
        load_recipe(path)
    except ConfigError as e:
        assert str(e).startswith(str(path)) and "\n" not in str(e)


@FUZZ
@given(st.integers(-10**6, 10**6))
def test_set_integer_round_trips(n):
    if n >= 0:
        assert load_recipe(None, [f"train.max_steps={n}"]).train.max_steps == n
    else:
        with pytest.raises(ConfigError, match=f"must not be negative, got {n}"):
            load_recipe(None, [f"train.max_steps={n}"])


@settings(max_examples=25, deadline=None, database=None)
@given(st.lists((st.binary(max_size=40) | st.text(max_size=40).map(str.encode))
                .map(lambda b: b.replace(b"\n", b"")), max_size=6))
def test_decode_keeps_one_line_per_input_line_or_names_the_bad_one(trained_run, lines):
    data = b"".join(line + b"\n" for line in lines)
    result = CliRunner().invoke(main, ["decode", str(trained_run.best_checkpoint)], input=data)
    bad = [i for i, line in enumerate(lines, 1) if not _is_utf8(line)]
    if bad:
        assert result.exit_code == 1
        assert f"Error: stdin: line {bad[0]} is not valid UTF-8" in result.output
    else:
        assert result.exit_code == 0, result.output
        assert result.stdout.count("\n") == len(lines)
        out = result.stdout.split("\n")[:-1]
        assert all(o == "" for o, i in zip(out, lines) if not i.decode().strip())


def _is_utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
