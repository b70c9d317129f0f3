"""docs/usage.md's table of which export format holds which model option is what the code does:
a tiny model of each row, exported in each format, is written where the table says "yes" and
refused in one line (ExportError) where it says "no"; for `hf`, "Pegasus" means a folder
transformers loads with no code from it, "own modeling file" one whose `auto_map` names its
modeling_translate.py. The table is read, not the code's answers written here: whatever
ct2.py or hf.py holds today is what the table must say."""

import importlib.util
import json
import re
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from helpers.files import read_jsonl
from translate.checkpoint import save_checkpoint
from translate.config import load_recipe
from translate.export import ExportError, export
from translate.models import TransformerConfig, build_model
from translate.tokenizer import Tokenizer

USAGE = Path(__file__).resolve().parents[2] / "docs/usage.md"
MARK = "<!-- table: export options -->"
NEEDS = {"inference": None, "ctranslate2": "ctranslate2", "hf": "transformers"}
TINY = {"transformer": ["model.d_model=32", "model.heads=2", "model.ffn_dim=64",
                        "model.encoder_layers=1", "model.decoder_layers=1"],
        "rnn": ["model.embed_dim=16", "model.encoder_hidden=16", "model.decoder_hidden=16",
                "model.attn_dim=16"]}


def table() -> tuple[list[str], list[tuple[list[str], dict[str, str]]]]:
    """The formats (the header's columns) and, per row, its recipe overrides (each `key:
    value` of the first cell; a key without a section is the model's) and each format's cell."""
    lines = USAGE.read_text(encoding="utf-8").split(MARK, 1)[1].lstrip("\n").splitlines()
    lines = lines[: next(i for i, line in enumerate(lines) if not line.startswith("|"))]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    formats = [c.strip("`") for c in cells[0][1:]]
    rows = []
    for row in cells[2:]:
        overrides = [f"{k if '.' in k else 'model.' + k}={v}"
                     for k, v in re.findall(r"`([\w.]+): (\w+)`", row[0])]
        rows.append((overrides, dict(zip(formats, row[1:]))))
    return formats, rows


def test_the_table_names_every_format_and_option():
    formats, rows = table()
    assert formats == list(NEEDS)
    assert len(rows) >= 10 and all(overrides for overrides, _ in rows)
    assert all(cell.split(",")[0] in ("yes", "no") for _, cells in rows for cell in cells.values())


@pytest.fixture(scope="module")
def texts(small_data):
    rows = read_jsonl(small_data / "train.jsonl", 500)
    return [r["en"] for r in rows], [r["de"] for r in rows]


def checkpoint(overrides: list[str], texts, path: Path) -> Path:
    """An untrained tiny model of the row's options, with a 200-piece tokenizer."""
    arch = "rnn" if "model.arch=rnn" in overrides else "transformer"
    cfg = load_recipe(None, ["tokenizer.vocab_size=200", *TINY[arch], *overrides])
    tokenizer = Tokenizer.train(*texts, cfg.tokenizer)
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                        tokenizer.joint)
    save_checkpoint(path, model, cfg, tokenizer, 1)
    return path


@pytest.mark.parametrize("row", range(len(table()[1])),
                         ids=[" ".join(o) for o, _ in table()[1]])
def test_each_row_of_the_table_is_what_the_code_does(row, texts, tmp_path):
    overrides, cells = table()[1][row]
    keys = {o.split("=")[0].split(".")[-1] for o in overrides if o.startswith("model.")}
    missing = keys - {f.name for f in fields(TransformerConfig)} - {"arch"}
    if missing:
        pytest.skip(f"TransformerConfig has no {', '.join(sorted(missing))} (yet)")
    ckpt = checkpoint(overrides, texts, tmp_path / "model.pt")
    for fmt, cell in cells.items():
        if NEEDS[fmt] and importlib.util.find_spec(NEEDS[fmt]) is None:
            continue  # the export extra is not installed
        out = tmp_path / fmt
        try:
            export(ckpt, fmt, out)
            held = True
        except ExportError as e:
            assert "\n" not in str(e)
            held = False
        assert held == cell.startswith("yes"), f"{fmt} {'holds' if held else 'refuses'} " \
                                               f"{overrides}; docs/usage.md says {cell!r}"
        if fmt == "hf" and held:
            remote = "auto_map" in json.loads((out / "config.json").read_text())
            assert remote == ("own modeling file" in cell), (overrides, cell)
