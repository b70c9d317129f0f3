"""A corpus of hostile and careless input, a family at a time: recipes and `--set` values,
datasets in every format, mangled checkpoints, run folders, metrics logs, decode's options and
files. Every case must end in exit code 1 (2 for a usage error), exactly one `Error:` line that
says what is wrong, and no traceback; hypothesis strategies cover the spaces between the cases."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from translate.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from translate.loading import load_checkpoint
from translate.cli import main
from translate.config import ConfigError
from translate.data import DataError
from translate.data.read import load_split
from translate.run_folder import RunFolderError, locked

FUZZ = settings(max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
DEEP = "[" * 200 + "]" * 200


def write(path, content) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def jsonl(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


GOOD_ROW = {"en": "A dog runs.", "de": "Ein Hund rennt."}


@pytest.fixture(scope="module")
def w(trained_run, recipe_path, small_data, tmp_path_factory):
    """The hostile world: files named for what is wrong with them."""
    d = tmp_path_factory.mktemp("fuzz")
    good = read_checkpoint(trained_run.best_checkpoint)
    world = {"dir": d, "ckpt": str(trained_run.best_checkpoint), "recipe": str(recipe_path),
             "data": str(small_data), "run": str(trained_run.run_dir)}

    # recipes
    for name, text in {
        "bomb": BOMB, "deep": f"model: {DEEP}\n", "huge": "# x\n" * 300_000,
        "python_tag": "model: !!python/object/apply:os.system ['echo owned']\n",
        "data_number": "data: 5\n", "train_list": "train: [1, 2]\n", "decode_text": "decode: x\n",
        "tabs": "model:\n\td_model: 64\n", "two_docs": "model: {}\n---\ntrain: {}\n",
        "dup_anchor_alias": "model: *nowhere\n", "int_keys": "model:\n  1: 2\n  a: 3\n",
        "null_section": "model:\n", "bad_spec": "tokenizer:\n  spec: nope.yaml\n",
        "spec_is_list": "tokenizer:\n  spec: [1]\n",
    }.items():
        world[f"recipe:{name}"] = write(d / "recipes" / f"{name}.yaml", text)

    # datasets: one folder per defect, the defect in train.* (evaluate reads --split train)
    datasets = {
        "jsonl_null": ("train.jsonl", jsonl(GOOD_ROW, {"en": None, "de": "x"})),
        "jsonl_number": ("train.jsonl", jsonl({"en": 5, "de": "x"})),
        "jsonl_list": ("train.jsonl", jsonl({"en": ["a"], "de": "x"})),
        "jsonl_dict": ("train.jsonl", jsonl({"en": {"a": 1}, "de": "x"})),
        "jsonl_bool": ("train.jsonl", jsonl({"en": "a", "de": True})),
        "jsonl_missing": ("train.jsonl", jsonl(GOOD_ROW, {"en": "only English"})),
        "jsonl_array_row": ("train.jsonl", jsonl(GOOD_ROW, ["a", "b"])),
        "jsonl_string_row": ("train.jsonl", jsonl('"a sentence"')),
        "jsonl_invalid": ("train.jsonl", jsonl(GOOD_ROW, '{"en": "a", "de": ')),
        "jsonl_utf8": ("train.jsonl", jsonl(GOOD_ROW).encode() + b'{"en": "\xff", "de": "x"}\n'),
        "jsonl_nested_bad": ("train.jsonl", jsonl({"translation": {"en": "a", "de": None}})),
        "jsonl_nested_list": ("train.jsonl", jsonl({"translation": ["a", "b"]})),
        "json_null": ("train.json", json.dumps([GOOD_ROW, {"en": None, "de": "x"}])),
        "json_missing": ("train.json", json.dumps([{"fr": "a", "de": "b"}])),
        "json_not_rows": ("train.json", "42"),
        "csv_missing": ("train.csv", "en,fr\na,b\n"),
        "csv_quote": ("train.csv", 'en,de\n"A dog,Ein Hund\nA cat",Katze\nA bird,Ein Vogel\n'),
        "csv_fields": ("train.csv", "en,de\na,b,c,d\n"),
        "csv_utf8": ("train.csv", b"en,de\na,\xff\n"),
        "csv_no_header": ("train.csv", ""),
        "tsv_fields": ("train.tsv", "en\tde\na\tb\tc\n"),
        "tsv_missing": ("train.tsv", "en\tfr\na\tb\n"),
        "csv_short_row": ("train.csv", "en,de\na,b\nc\n"),
        "text_lengths": ("train.en", "a\nb\nc\n"),
        "text_utf8": ("train.en", b"a\nb\n"),
    }
    for name, (file, content) in datasets.items():
        world[f"data:{name}"] = str(d / "data" / name)
        write(d / "data" / name / file, content)
    write(d / "data" / "text_lengths" / "train.de", "x\n")
    write(d / "data" / "text_utf8" / "train.de", b"x\n\xfe\n")
    for name, table in {"parquet_int": pa.table({"en": [1, 2], "de": ["a", "b"]}),
                        "parquet_missing": pa.table({"en": ["a"], "fr": ["b"]}),
                        "parquet_null": pa.table({"en": ["a", None], "de": ["b", "c"]})}.items():
        (d / "data" / name).mkdir(parents=True)
        pq.write_table(table, d / "data" / name / "train.parquet")
        world[f"data:{name}"] = str(d / "data" / name)

    # checkpoints, each written with a checksum that matches its (mangled) contents
    recipe = good["recipe"]
    mangled = {
        "recipe_list": {**good, "recipe": [1, 2]},
        "recipe_int_keys": {**good, "recipe": {1: "x"}},
        "recipe_model_list": {**good, "recipe": {**recipe, "model": [1]}},
        "recipe_huge_d_model": {**good, "recipe": {**recipe, "model": {**recipe["model"],
                                                                      "d_model": 10 ** 6}}},
        "recipe_too_large": {**good, "recipe": {**recipe, "model": {
            **recipe["model"], "d_model": 60_000, "heads": 1}}},
        "recipe_arch": {**good, "recipe": {**recipe, "model": {"arch": "lstm9"}}},
        "recipe_dropout": {**good, "recipe": {**recipe, "model": {**recipe["model"],
                                                                  "dropout": 7}}},
        "recipe_beam_zero": {**good, "recipe": {**recipe, "decode": {"beam": 0}}},
        "recipe_unknown_section": {**good, "recipe": {**recipe, "extra": {}}},
        "model_list": {**good, "model": [1, 2]},
        "model_string_value": {**good, "model": {**good["model"], "output.weight": "x"}},
        "model_missing_key": {**good, "model": {k: v for k, v in good["model"].items()
                                                if "decoder" not in k}},
        "tokenizer_missing": {k: v for k, v in good.items() if k != "tokenizer"},
        "tokenizer_garbage": {**good, "tokenizer": {**good["tokenizer"],
                                                    "src": torch.arange(256, dtype=torch.uint8),
                                                    "tgt": torch.arange(256, dtype=torch.uint8)}},
        "tokenizer_float": {**good, "tokenizer": {"src": torch.zeros(3), "tgt": torch.zeros(3)}},
        "step_text": {**good, "step": "ten"},
        "no_model": {k: v for k, v in good.items() if k != "model"},
        "no_recipe": {k: v for k, v in good.items() if k != "recipe"},
    }
    for name, payload in mangled.items():
        world[f"ckpt:{name}"] = str(d / "ckpt" / f"{name}.pt")
        (d / "ckpt").mkdir(exist_ok=True)
        write_checkpoint(d / "ckpt" / f"{name}.pt", payload)
    raw = bytearray(trained_run.best_checkpoint.read_bytes())
    start = len(raw) // 2  # inside the tensors' data
    raw[start:start + 64] = bytes(64)
    world["ckpt:damaged"] = write(d / "ckpt" / "damaged.pt", bytes(raw))
    torch.save([1, 2, 3], d / "ckpt" / "a_list.pt")
    world["ckpt:a_list"] = str(d / "ckpt" / "a_list.pt")
    world["ckpt:zip_garbage"] = write(d / "ckpt" / "zip_garbage.pt", b"PK\x03\x04" + bytes(500))
    world["ckpt:empty"] = write(d / "ckpt" / "empty.pt", b"")
    world["ckpt:text"] = write(d / "ckpt" / "text.pt", "hello\n")
    world["ckpt:folder"] = str(d / "ckpt")

    # run folders
    runs = d / "runs"
    own = shutil.copytree(trained_run.run_dir, runs / "with_foreign")
    foreign = read_checkpoint(own / "best.pt")
    write_checkpoint(own / "step_999.pt", {**foreign, "run_id": "0" * 32})
    world["run:with_foreign"] = str(own)
    empty_run = runs / "no_checkpoints"
    empty_run.mkdir(parents=True)
    shutil.copy(trained_run.run_dir / "recipe.yaml", empty_run)
    world["run:no_checkpoints"] = str(empty_run)
    bad_id = shutil.copytree(trained_run.run_dir, runs / "bad_run_json")
    (bad_id / "run.json").write_text("{not json")
    world["run:bad_run_json"] = str(bad_id)
    world["run:locked"] = str(shutil.copytree(trained_run.run_dir, runs / "locked"))
    other_optimizer = shutil.copytree(trained_run.run_dir, runs / "other_optimizer")
    for path in other_optimizer.glob("last.pt"):  # the training state (step_N.pt: weights)
        data = read_checkpoint(path)
        state = data["optimizer"]["state"]
        for entry in state.values():
            entry["exp_avg"] = entry["exp_avg"].reshape(-1)[:3].clone()
        write_checkpoint(path, data)
    world["run:other_optimizer"] = str(other_optimizer)
    world["run:used"] = str(shutil.copytree(trained_run.run_dir, runs / "used"))

    # metrics logs
    for name, text in {
        "list_line": '[1, 2]\n', "number_line": "42\n", "string_line": '"valid"\n',
        "null_line": "null\n", "no_kind": '{"step": 1}\n', "kind_number": '{"kind": 5}\n',
        "valid_no_bleu": '{"kind": "valid", "step": 1, "elapsed": 2}\n',
        "valid_text_step": '{"kind": "valid", "step": "one", "elapsed": 2, "dev_bleu": 1}\n',
        "train_no_elapsed": '{"kind": "train", "step": 1, "tok_per_s": 2}\n'
                            '{"kind": "valid", "step": 1, "elapsed": 2, "dev_bleu": 1}\n',
        "only_train": '{"kind": "train", "step": 1, "elapsed": 2, "tok_per_s": 3}\n',
        "empty": "", "cut": '{"kind": "valid", "st',
    }.items():
        world[f"metrics:{name}"] = str(d / "metrics" / name)
        write(d / "metrics" / name / "metrics.jsonl", text)

    # plain files
    world["file:bad_utf8"] = write(d / "files" / "bad_utf8.txt", b"A dog.\nA \xffcat.\n")
    world["file:three"] = write(d / "files" / "three.txt", "a\nb\nc\n")
    world["file:two"] = write(d / "files" / "two.txt", "a\nb\n")
    world["file:empty"] = write(d / "files" / "empty.txt", "")
    world["folder"] = str(d / "files")
    return world


# Each case: (arguments from the world, the message the one Error: line holds[, exit code]).
RECIPE_CASES = {
    "bomb": "expands to more than 100,000 values",
    "deep": "nested deeper than 32 levels",
    "huge": "over the limit of 1,048,576",
    "python_tag": "not valid YAML (could not determine a constructor",
    "data_number": "section 'data' must be a mapping",
    "train_list": "section 'train' must be a mapping",
    "decode_text": "section 'decode' must be a mapping",
    "tabs": "not valid YAML",
    "two_docs": "not valid YAML",
    "dup_anchor_alias": "not valid YAML (found undefined alias",
    "int_keys": "unknown key(s) [1, 'a']",
    "bad_spec": "tokenizer spec not found: 'nope.yaml'",
    "spec_is_list": "tokenizer.spec: expected a file path",
}
SET_CASES = {
    "model.dropout=1.5": "model.dropout: must be in [0, 1), got 1.5",
    "model.dropout=1.0": "model.dropout: must be in [0, 1), got 1.0",
    "model.dropout=-0.1": "model.dropout: must not be negative",
    "model.attn_dropout=1": "model.attn_dropout: must be in [0, 1)",
    "model.activation_dropout=2": "model.activation_dropout: must be in [0, 1)",
    "model.dropout=.nan": "model.dropout: expected a finite number",
    "model.dropout=high": "model.dropout: expected a number",
    "train.label_smoothing=1": "train.label_smoothing: must be in [0, 1)",
    "train.ema_decay=1": "train.ema_decay: must be in [0, 1)",
    "train.warmup=0": "train.warmup: must be at least 1 (1: no warm-up)",
    "train.warmup=1.5": "train.warmup: expected an integer",
    "train.lr=0": "train.lr: must be above 0",
    "train.lr=.inf": "train.lr: expected a finite number",
    "train.lr=-1e-3": "train.lr: must not be negative",
    "train.betas=[]": "train.betas: expected two numbers in [0, 1)",
    "train.betas=[0.9]": "train.betas: expected two numbers in [0, 1)",
    "train.betas=[0.9, 1.0]": "train.betas: expected two numbers in [0, 1)",
    "train.betas=[a, b]": "train.betas: expected two numbers in [0, 1)",
    "train.betas=[0.9, 0.98, 0.99]": "train.betas: expected two numbers in [0, 1)",
    "train.betas=0.9": "train.betas: expected a list",
    "train.max_tokens=0": "train.max_tokens: must be at least 1",
    "train.max_tokens=1e12": "train.max_tokens: expected an integer",
    "train.max_tokens=1000000000000": "train.max_tokens: must be at most 16,777,216",
    "train.accum_steps=1000000000": "train.accum_steps: must be at most 65,536",
    "train.length_multiple=-8": "train.length_multiple: must not be negative",
    "train.length_multiple=4096": "train.length_multiple: must be at most 1,024",
    "train.length_multiple=8.5": "train.length_multiple: expected an integer",
    "train.precision=fp64": "train.precision: 'fp64' is not one of auto, fp32, bf16, fp16",
    "train.engine=turbo": "train.engine: 'turbo' is not one of auto, fast, plain",
    "train.max_steps=-1": "train.max_steps: must not be negative",
    "train.max_minutes=.nan": "train.max_minutes: expected a finite number",
    "train.seed=one": "train.seed: expected an integer",
    "train.seed=99999999999999999999999": "train.seed: must be at most 4,294,967,295",
    "data.splits.train=[1]": "data.splits.train: expected a split name, got [1]",
    "data.splits.dev=''": "data.splits.dev: expected a split name",
    "data.test_splits=[1]": "data.test_splits[0]: expected a split name, got 1",
    "train.monitor_splits=[null]": "train.monitor_splits[0]: expected a split name, got None",
    "train.compile=maybe": "train.compile: expected true/false",
    "train.cuda_graphs=maybe": "train.cuda_graphs: expected true/false",
    "train.cuda_graphs=2": "train.cuda_graphs: expected true/false",
    "train.monitor_splits=5": "train.monitor_splits: expected a list",
    "decode.max_len_a=1e300": "decode.max_len_a: must be at most 100.0",
    "decode.max_len_b=1000000000": "decode.max_len_b: must be at most 1,048,576",
    "decode.beam=0": "decode.beam: must be at least 1",
    "decode.beam=5000": "decode.beam: must be at most 1,024",
    "decode.lenpen=.nan": "decode.lenpen: expected a finite number",
    "model.d_model=1000000000000": "model.d_model: must be at most 65,536",
    "model.heads=0": "model.heads: must be at least 1",
    "model.encoder_layers=0": "model.encoder_layers: must be at least 1",
    "model.decoder_layers=100000": "model.decoder_layers: must be at most 1,000",
    "model.ffn_dim=-5": "model.ffn_dim: must be at least 1",
    "model.max_positions=0": "model.max_positions: must be at least 1",
    "model.arch=lstm": "model.arch 'lstm' is unknown",
    "model.arch=[1]": "model.arch [1] is unknown",
    "model.positions=rotary": "model.positions: 'rotary' is not one of sinusoidal, learned",
    "model.activation=swish": "model.activation: 'swish' is not one of relu, gelu",
    "model.tie_embeddings=2": "model.tie_embeddings: expected true/false",
    "tokenizer.vocab_size=10000000": "tokenizer.vocab_size: must be at most 1,000,000",
    "tokenizer.vocab_size=0": "tokenizer.vocab_size: must be at least 1",
    "tokenizer.model_type=word2vec": "tokenizer.model_type: 'word2vec' is not one of",
    "tokenizer.character_coverage=2": "tokenizer.character_coverage: must be at most 1.0",
    "tokenizer.joint=yes please": "tokenizer.joint: expected true/false",
    "data.max_len=0": "data.max_len: must be at least 1",
    "data.test_splits=5": "data.test_splits: expected a list",
    "data.splits=[a]": "data.splits: expected dict",
    "data.src_lang=[en]": "data.src_lang: expected str",
    "data.max_len_ratio=.inf": "data.max_len_ratio: expected a finite number",
    "nosuch.key=1": "unknown section(s) ['nosuch']",
    "train.nosuch=1": "unknown key(s) ['nosuch']",
    "model=5": "the key must be section.key",
    "model.d_model": "must look like section.key=value",
    f"model.d_model={DEEP}": "override model.d_model: nested deeper than 32 levels",
    "train.betas=[&a [1,1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], "
    "&c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], "
    "[*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]]": "expands to more than 100,000 values",
}
# Values only SentencePiece or the model can judge: checked when the run starts.
LATE_SET_CASES = {
    "tokenizer.vocab_size=3": "tokenizer.vocab_size (3) must be more than the 4 special pieces",
    "tokenizer.vocab_size=6": "SentencePiece cannot train a bpe model of 6 pieces on this "
                              "data (Vocabulary size is smaller than required_chars",
    "model.heads=3": "d_model (64) must be divisible by heads (3)",
}
DATA_CASES = {
    "jsonl_null": "train.jsonl: row 2: 'en' holds NoneType 'None', not text",
    "jsonl_number": "train.jsonl: row 1: 'en' holds int '5', not text",
    "jsonl_list": "train.jsonl: row 1: 'en' holds list",
    "jsonl_dict": "train.jsonl: row 1: 'en' holds dict",
    "jsonl_bool": "train.jsonl: row 1: 'de' holds bool",
    "jsonl_missing": "train.jsonl: line 2: need columns 'en' and 'de'",
    "jsonl_array_row": "train.jsonl: line 2 is not a JSON object",
    "jsonl_string_row": "train.jsonl: line 1 is not a JSON object",
    "jsonl_invalid": "train.jsonl: line 2 is not valid JSON",
    "jsonl_utf8": "train.jsonl: line 2 is not valid UTF-8",
    "jsonl_nested_bad": "train.jsonl: row 1: 'de' holds NoneType",
    "jsonl_nested_list": "need columns 'en' and 'de'",
    "json_null": "train.json: row 2: 'en' holds NoneType",
    "json_missing": "need columns 'en' and 'de'",
    "json_not_rows": "train.json: could not be read as json",
    "csv_missing": "need columns 'en' and 'de'",
    "csv_quote": "train.csv: read 2 rows from 3 lines after the header: a quoted field spans "
                 "lines",
    "csv_fields": "train.csv: line 2 has 4 fields, the header 2",
    "csv_utf8": "train.csv: line 2 is not valid UTF-8",
    "csv_no_header": "train.csv: could not be read as csv",
    "tsv_fields": "train.tsv: line 2 has 3 fields, the header 2",
    "tsv_missing": "need columns 'en' and 'de'",
    "csv_short_row": "train.csv: line 3 has 1 fields, the header 2",
    "text_lengths": "parallel files differ in length",
    "text_utf8": "train.de: line 2 is not valid UTF-8",
    "parquet_int": "train.parquet: row 1: 'en' holds int",
    "parquet_missing": "need columns 'en' and 'de'",
    "parquet_null": "train.parquet: row 2: 'en' holds NoneType",
}
CKPT_CASES = {
    "recipe_list": "not a translate checkpoint (its recipe is a list, not a mapping of sections)",
    "recipe_int_keys": "not a translate checkpoint (its recipe has sections not named by text)",
    "recipe_model_list": "section 'model' must be a mapping",
    "recipe_huge_d_model": "model.d_model: must be at most 65,536",
    "recipe_too_large": "GiB of memory: make it smaller",
    "recipe_arch": "model.arch 'lstm9' is unknown",
    "recipe_dropout": "model.dropout: must be in [0, 1), got 7.0",
    "recipe_beam_zero": "decode.beam: must be at least 1",
    "recipe_unknown_section": "unknown section(s) ['extra']",
    "model_list": "its model is not a mapping of names to tensors",
    "model_string_value": "its model is not a mapping of names to tensors",
    "model_missing_key": "weights do not fit the recipe's transformer model (missing decoder",
    "tokenizer_missing": "it has no SentencePiece models",
    "tokenizer_garbage": "its tokenizer cannot be read",
    "tokenizer_float": "it has no SentencePiece models",
    "step_text": "its step is 'ten', not a whole number",
    "no_model": "missing model or recipe",
    "no_recipe": "missing model or recipe",
    "damaged": "the file is damaged",
    "a_list": "missing model or recipe",
    "zip_garbage": "not a readable checkpoint",
    "empty": "the file is empty",
    "text": "is not a checkpoint",
    "folder": "is a folder without best.pt",
}
METRICS_CASES = {
    "list_line": "line 1 is not a metrics record",
    "number_line": "line 1 is not a metrics record",
    "string_line": "line 1 is not a metrics record",
    "null_line": "line 1 is not a metrics record",
    "no_kind": "line 1 is not a metrics record",
    "kind_number": "line 1 is not a metrics record",
    "valid_no_bleu": "line 1: its valid record has None under 'dev_bleu', not a number",
    "valid_text_step": "line 1: its valid record has 'one' under 'step', not a number",
    "train_no_elapsed": "line 1: its train record has None under 'elapsed'",
    "only_train": "no validation records",
    "empty": "no validation records",
    "cut": "line 1 is not valid JSON",
}

CASES: dict = {}
for name, message in RECIPE_CASES.items():
    CASES[f"recipe {name}"] = (lambda w, n=name: ["train", w[f"recipe:{n}"]], message)
for override, message in {**SET_CASES, **LATE_SET_CASES}.items():
    CASES[f"--set {override[:60]}"] = (  # the case's override last: it wins
        lambda w, o=override: ["train", w["recipe"], "--data", w["data"], "--run-dir",
                               str(w["dir"] / "set_runs" / str(abs(hash(o)))),
                               "--set", "model.d_model=64", "--set", "model.ffn_dim=128",
                               "--set", "tokenizer.vocab_size=200", "--set", o], message)
for name, message in DATA_CASES.items():
    CASES[f"evaluate on {name}"] = (lambda w, n=name: ["evaluate", w["ckpt"], "--data",
                                                       w[f"data:{n}"], "--split", "train"],
                                    message)
for name in ("jsonl_null", "jsonl_missing", "csv_quote", "text_utf8", "parquet_int"):
    CASES[f"train on {name}"] = (lambda w, n=name: ["train", w["recipe"], "--data",
                                                    w[f"data:{n}"], "--run-dir",
                                                    str(w["dir"] / "data_runs" / n)],
                                 DATA_CASES[name])
for name, message in CKPT_CASES.items():
    CASES[f"decode {name}"] = (lambda w, n=name: ["decode", w[f"ckpt:{n}"]], message)
# serve starts a server that runs until stopped if the checkpoint loads: only files that cannot
for name in ("recipe_list", "damaged", "model_list", "tokenizer_garbage", "recipe_huge_d_model"):
    commands = [["evaluate"], ["attention", "--text", "A dog."]]
    if name in ("recipe_list", "damaged", "model_list"):
        commands += [["export", "-o"], ["serve", "--port", "0"]]
    for command in commands:
        args = (lambda w, n=name, c=tuple(command): [c[0], w[f"ckpt:{n}"], *c[1:]]
                + ([str(w["dir"] / "exports" / f"{n}")] if c[-1] == "-o" else []))
        CASES[f"{command[0]} {name}"] = (args, CKPT_CASES[name])
for name, message in METRICS_CASES.items():
    CASES[f"curve {name}"] = (lambda w, n=name: ["curve", w[f"metrics:{n}"], "-o",
                                                 str(w["dir"] / "curve.png")], message)
for name in ("list_line", "valid_no_bleu", "empty"):
    CASES[f"compare {name}"] = (lambda w, n=name: ["compare", w[f"metrics:{n}"], "-o",
                                                   str(w["dir"] / "report")],
                                METRICS_CASES[name])
CASES.update({
    # run folders
    "resume with a foreign checkpoint": (lambda w: ["train", "--resume", w["run:with_foreign"],
                                                    "--set", "train.max_steps=400"],
                                         "step_999.pt belongs to another run"),
    "resume with no checkpoints": (lambda w: ["train", "--resume", w["run:no_checkpoints"]],
                                   "no readable checkpoint to resume from"),
    "resume a missing folder": (lambda w: ["train", "--resume", str(w["dir"] / "nope")],
                                "run folder not found"),
    "resume a file": (lambda w: ["train", "--resume", w["file:three"]], "Error:", 2),
    "resume with a broken run.json": (lambda w: ["train", "--resume", w["run:bad_run_json"],
                                                 "--set", "train.max_steps=400"],
                                      "run.json cannot be read"),
    "resume another optimizer": (lambda w: ["train", "--resume", w["run:other_optimizer"],
                                            "--set", "train.max_steps=400"],
                                 "cannot resume from it"),
    "resume with --overwrite": (lambda w: ["train", "--resume", w["run"], "--overwrite"],
                                "takes no RECIPE, --run-dir or --overwrite", 2),
    "train into a used folder": (lambda w: ["train", w["recipe"], "--run-dir", w["run:used"]],
                                 "already holds a run"),
    # decode's options and files
    "decode --beam 5000": (lambda w: ["decode", w["ckpt"], "--beam", "5000"],
                           "decode options.beam: must be at most 1,024"),
    "decode --beam over the vocabulary": (lambda w: ["decode", w["ckpt"], "--beam", "1024"],
                                          "more than the target vocabulary"),
    "decode --nbest over the vocabulary": (lambda w: ["decode", w["ckpt"], "--beam", "1024",
                                                      "--nbest", "1024"],
                                           "more than the target vocabulary"),
    "decode --nbest over the beam": (lambda w: ["decode", w["ckpt"], "--beam", "2", "--nbest",
                                                "3"], "--nbest (3) cannot exceed", 2),
    "decode --beam 0": (lambda w: ["decode", w["ckpt"], "--beam", "0"], "x>=1", 2),
    "decode --lenpen nan": (lambda w: ["decode", w["ckpt"], "--lenpen", "nan"],
                            "decode options.lenpen: expected a finite number"),
    "decode --lenpen -1": (lambda w: ["decode", w["ckpt"], "--lenpen", "-1"],
                           "decode options.lenpen: must not be negative"),
    "decode --max-tokens 0": (lambda w: ["decode", w["ckpt"], "--max-tokens", "0"], "x>=1", 2),
    "decode --chunk 0": (lambda w: ["decode", w["ckpt"], "--chunk", "0"], "x>=1", 2),
    "decode --device meta": (lambda w: ["decode", w["ckpt"], "--device", "meta"],
                             "--device 'meta' is not a device"),
    "decode --device cuda:x": (lambda w: ["decode", w["ckpt"], "--device", "cuda:x"],
                               "--device 'cuda:x' is not a device"),
    "decode --device xla": (lambda w: ["decode", w["ckpt"], "--device", "xla"],
                              "--device 'xla' is not a device"),
    "decode --device cuda:7": (lambda w: ["decode", w["ckpt"], "--device", "cuda:7"],
                               "CUDA is not available"),
    "decode --precision fp16 on the CPU": (lambda w: ["decode", w["ckpt"], "--precision",
                                                      "fp16", "--device", "cpu"],
                                           "precision fp16 needs a CUDA device"),
    "decode -i missing": (lambda w: ["decode", w["ckpt"], "-i", str(w["dir"] / "nope")],
                          "input file not found"),
    "decode -i folder": (lambda w: ["decode", w["ckpt"], "-i", w["folder"]], "input is a folder"),
    "decode -i invalid UTF-8": (lambda w: ["decode", w["ckpt"], "-i", w["file:bad_utf8"]],
                                "line 2 is not valid UTF-8"),
    "decode -o folder": (lambda w: ["decode", w["ckpt"], "-o", w["folder"]],
                         "output is a folder"),
    "decode -o in a missing folder": (lambda w: ["decode", w["ckpt"], "-o",
                                                 str(w["dir"] / "nope" / "x")],
                                      "the output's folder does not exist"),
    "decode -o is -i": (lambda w: ["decode", w["ckpt"], "-i", w["file:three"], "-o",
                                   w["file:three"]], "is the input file"),
    # evaluate --hyp/--ref
    "evaluate --ref invalid UTF-8": (lambda w: ["evaluate", "--hyp", w["file:two"], "--ref",
                                                w["file:bad_utf8"]], "line 2 is not valid UTF-8"),
    "evaluate lengths differ": (lambda w: ["evaluate", "--hyp", w["file:three"], "--ref",
                                           w["file:two"]], "three.txt has 3 lines, "),
    "evaluate empty --hyp": (lambda w: ["evaluate", "--hyp", w["file:empty"], "--ref",
                                        w["file:two"]], "is empty: nothing to score"),
    "evaluate --hyp alone": (lambda w: ["evaluate", "--hyp", w["file:two"]],
                             "give --hyp and --ref together", 2),
    "evaluate --ref missing": (lambda w: ["evaluate", "--hyp", w["file:two"], "--ref",
                                          str(w["dir"] / "nope")], "input file not found"),
    "evaluate nothing": (lambda w: ["evaluate"], "give a CHECKPOINT, or --hyp and --ref", 2),
    "evaluate --beam over the vocabulary": (lambda w: ["evaluate", w["ckpt"], "--data", w["data"],
                                                       "--split", "dev", "--beam", "1024"],
                                            "more than the target vocabulary"),
    # export and average
    "export into an existing folder": (lambda w: ["export", w["ckpt"], "-o", w["folder"]],
                                       "Error:"),
    "average a folder without step checkpoints": (lambda w: ["average", w["folder"]],
                                                  "holds 0 step checkpoint(s)"),
    "average a missing folder": (lambda w: ["average", str(w["dir"] / "nope")],
                                 "run folder not found"),
})


def test_the_corpus_covers_every_family_with_150_cases():
    assert len(CASES) >= 150, len(CASES)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_each_case_is_one_error_line(w, case):
    make_args, message, *code = CASES[case]
    result = CliRunner().invoke(main, make_args(w), input="A dog runs.\nTwo cats.\n")
    assert result.exit_code == (code[0] if code else 1), result.output
    assert not result.exception or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.output


def test_a_locked_run_folder_is_refused_with_its_holder(w):
    with locked(Path(w["run:locked"])):
        result = CliRunner().invoke(main, ["train", "--resume", w["run:locked"], "--set",
                                           "train.max_steps=400"])
    assert result.exit_code == 1, result.output
    assert f"is in use: process {os.getpid()} on" in result.output
    assert result.output.count("Error:") == 1


def test_an_unexpected_failure_is_one_line_and_verbose_shows_the_traceback(w, monkeypatch):
    import translate.evaluation as evaluation

    def bug(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(evaluation, "score_checkpoint", bug)
    quiet = CliRunner().invoke(main, ["evaluate", w["ckpt"]])
    assert quiet.exit_code == 1
    assert quiet.output == ("Error: KeyError: 'a bug' (unexpected: rerun with --verbose for the "
                            "traceback, and please report it)\n")
    loud = CliRunner().invoke(main, ["--verbose", "evaluate", w["ckpt"]])
    assert isinstance(loud.exception, KeyError)  # raised: Python prints its traceback
    monkeypatch.setenv("TRANSLATE_DEBUG", "1")
    assert isinstance(CliRunner().invoke(main, ["evaluate", w["ckpt"]]).exception, KeyError)


# -- hypothesis: rows of every format, checkpoint dicts ------------------------------------

VALUES = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
          | st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(max_size=3),
                                                                  st.integers(), max_size=2))
ROWS = st.lists(st.dictionaries(st.sampled_from(["en", "de", "fr", "translation"]), VALUES,
                                max_size=3), min_size=1, max_size=4)


@FUZZ
@given(rows=ROWS, fmt=st.sampled_from(["jsonl", "json"]))
def test_any_rows_give_pairs_or_a_data_error_naming_the_file(tmp_path, rows, fmt):
    from translate.config import DataConfig

    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # one per example
    path = folder / f"train.{fmt}"
    path.write_text(jsonl(*rows) if fmt == "jsonl" else json.dumps(rows), encoding="utf-8")
    try:
        src, tgt = load_split(DataConfig(dataset=str(folder)), "train")
    except DataError as e:
        assert str(path) in str(e) and "\n" not in str(e)
    else:
        assert len(src) == len(tgt) and all(isinstance(s, str) for s in src + tgt)


@FUZZ
@given(key=st.sampled_from(["recipe", "model", "tokenizer", "step", "format_version"]),
       value=VALUES)
def test_any_checkpoint_entry_gives_a_model_or_a_checkpoint_error(w, tmp_path, key, value):
    data = read_checkpoint(w["ckpt"])
    path = tmp_path / f"fuzz_{abs(hash(repr((key, value))))}.pt"
    write_checkpoint(path, {**data, key: value})
    try:
        load_checkpoint(path)
    except (CheckpointError, ConfigError, RunFolderError, ValueError) as e:
        assert "\n" not in str(e)


@FUZZ
@given(st.text(max_size=200))
def test_any_recipe_text_gives_a_recipe_or_a_config_error(tmp_path, text):
    from translate.config import load_recipe

    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_recipe(path)
    except ConfigError as e:
        assert str(e).startswith(str(path)) and "\n" not in str(e)


@FUZZ
@given(st.recursive(st.just("x") | st.just("*a"), lambda inner: st.lists(inner, max_size=4),
                    max_leaves=12))
def test_anchors_and_aliases_load_or_are_refused_fast(tmp_path, value):
    from translate.config import load_recipe

    path = tmp_path / "aliases.yaml"
    text = yaml.safe_dump({"train": {"monitor_splits": value}}).replace("'*a'", "*a")
    path.write_text("anchor: &a [1, 2]\n" + text if "*a" in text else text, encoding="utf-8")
    try:
        load_recipe(path)
    except ConfigError as e:
        assert "\n" not in str(e)
