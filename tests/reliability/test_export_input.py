"""An exported model folder is checked as a checkpoint is: flipped bytes, swapped tensors, a
config.json whose paths leave the folder, a link out of it, missing digests and a recipe the
weights do not fit are each refused by `translate decode` in one line, the folder unchanged.
A folder exported before digests were recorded still loads."""

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from translate.checkpoint import read_checkpoint
from translate.cli import main
from translate.model_folder import write_model_folder


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "model"
    write_model_folder(read_checkpoint(trained_run.best_checkpoint), out, "fp32", "best.pt")
    return out


def contents(folder) -> dict:
    return {p.name: (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.iterdir())}


def edit_config(folder, change) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


def swap_two_tensors(folder) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    a, b = "encoder_layers.0.self_attn.q_proj.weight", "encoder_layers.0.self_attn.k_proj.weight"
    state[a], state[b] = state[b], state[a]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt", "aliases": "{}"})


def flip_a_byte(folder, name: str = "model.safetensors") -> None:
    raw = bytearray((folder / name).read_bytes())
    raw[-100] ^= 0x01
    (folder / name).write_bytes(bytes(raw))


CASES = {
    "flipped byte": (flip_a_byte, "model.safetensors: its SHA-256 is not the one recorded"),
    "swapped tensors": (swap_two_tensors, "its SHA-256 is not the one recorded"),
    "flipped tokenizer": (lambda f: flip_a_byte(f, "spm.model"),
                          "spm.model: its SHA-256 is not"),
    "weights outside": (lambda f: edit_config(f, lambda c: c.update(weights="../w.safetensors")),
                        "names the file '../w.safetensors'; an exported folder's files are "
                        "plain names inside it"),
    "absolute tokenizer": (lambda f: edit_config(f, lambda c: c["tokenizer"].update(
        src="/etc/passwd")), "names the file '/etc/passwd'"),
    "tokenizer not text": (lambda f: edit_config(f, lambda c: c["tokenizer"].update(src=[1])),
                           "names the file [1]"),
    "link out": (lambda f: (f / "spm.model").unlink() or (f / "spm.model").symlink_to(
        f.parent / "elsewhere.model"), "spm.model links out of the folder"),
    "no digests": (lambda f: edit_config(f, lambda c: c.pop("sha256")),
                   "no SHA-256 of its files"),
    "digests not a mapping": (lambda f: edit_config(f, lambda c: c.update(sha256="x")),
                              "no SHA-256 of its files"),
    "recipe the weights do not fit": (
        lambda f: edit_config(f, lambda c: c["recipe"]["model"].update(d_model=4096, heads=4)),
        "weights do not fit the recipe's transformer model"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_or_hostile_export_is_one_error_line(exported, tmp_path, case):
    damage, says = CASES[case]
    folder = shutil.copytree(exported, tmp_path / "model")
    (tmp_path / "elsewhere.model").write_bytes((exported / "spm.model").read_bytes())
    damage(folder)
    before = contents(folder)
    result = CliRunner().invoke(main, ["decode", str(folder)], input="A dog runs.\n")
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and says in errors[0], result.output
    assert "Traceback" not in result.output and contents(folder) == before


def test_a_folder_exported_before_digests_still_decodes(exported, tmp_path):
    folder = shutil.copytree(exported, tmp_path / "model")
    edit_config(folder, lambda c: (c.pop("sha256"), c.update(format_version=1)))
    result = CliRunner().invoke(main, ["decode", str(folder)], input="A dog runs.\n")
    assert result.exit_code == 0 and result.stdout.strip(), result.output
