"""An exported model folder is checked as a checkpoint is: flipped bytes, swapped tensors, a
config.json whose paths leave the folder or whose fields have the wrong type, a FIFO, a socket,
a folder or a link (to /dev/zero, out, nowhere) in place of a file, NaN weights, aliases to
nothing, missing digests and a recipe the weights do not fit are each refused by `translate
decode` in one line, the folder unchanged.
A folder exported before digests were recorded still loads; a current one edited to look like
it does not."""

import hashlib
import json
import os
import shutil
import socket
import threading
import time

import pytest
from click.testing import CliRunner
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from translate.checkpoint import read_checkpoint
from translate.cli import main
from translate.files import describe
from translate.model_folder import ModelFolderError, write_model_folder


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "model"
    write_model_folder(read_checkpoint(trained_run.best_checkpoint), out, "fp32", "best.pt")
    return out


def contents(folder) -> dict:
    return {p.name: (p.read_bytes() if describe(p) == "a regular file" else describe(p))
            for p in sorted(folder.iterdir())}


def edit_config(folder, change) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


def rewrite_weights(folder, change, digests: bool = True) -> None:
    """Change the stored tensors and metadata in place, then record the new file's SHA-256 (as
    a tool that rewrites the weights and the digests both would)."""
    weights = folder / "model.safetensors"
    with safe_open(str(weights), framework="pt") as f:
        metadata = f.metadata()
    state = load_file(weights)
    change(state, metadata)
    save_file(state, weights, metadata=metadata)
    if digests:
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()
        edit_config(folder, lambda c: c["sha256"].update({"model.safetensors": digest}))


def as_format_1(folder) -> None:
    """The folder as format 1 wrote it: no digests in config.json, no version in the weights."""
    rewrite_weights(folder, lambda state, meta: meta.pop("translate_format_version"), False)
    edit_config(folder, lambda c: (c.pop("sha256"), c.update(format_version=1)))


def cut_short(folder) -> None:
    raw = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(raw[:-1000])


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
        f.parent / "elsewhere.model"), "spm.model is a symbolic link to"),
    "no digests": (lambda f: edit_config(f, lambda c: c.pop("sha256")),
                   "no SHA-256 of its files"),
    "digests not a mapping": (lambda f: edit_config(f, lambda c: c.update(sha256="x")),
                              "no SHA-256 of its files"),
    "recipe the weights do not fit": (
        lambda f: edit_config(f, lambda c: c["recipe"]["model"].update(d_model=4096, heads=4)),
        "weights do not fit the recipe's transformer model"),
}


def refused_by_decode(folder, says: str) -> None:
    """`translate decode FOLDER` ends in one error line that says `says`, the folder unchanged."""
    before = contents(folder)
    result = CliRunner().invoke(main, ["decode", str(folder)], input="A dog runs.\n")
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and says in errors[0], result.output
    assert "Traceback" not in result.output and "unexpected" not in result.output
    assert contents(folder) == before


def field(name, value):
    return lambda c: c.update({name: value})


FIELDS = {  # config.json's fields of the wrong type or out of range -> what the refusal says
    "version as text": (field("format_version", "2"), "format_version must be a whole number "
                                                      "from 1 to 2, got '2'"),
    "version as float": (field("format_version", 2.0), "format_version must be a whole number"),
    "version as bool": (field("format_version", True), "got True"),
    "version as list": (field("format_version", [2]), "got [2]"),
    "version null": (field("format_version", None), "got None"),
    "version 0": (field("format_version", 0), "got 0"),
    "version negative": (field("format_version", -1), "got -1"),
    "version missing": (lambda c: c.pop("format_version"), "format_version must be a whole"),
    "version newer": (field("format_version", 3), "format version 3 is newer than this "
                                                  "translate reads (2); upgrade translate"),
    "version huge": (field("format_version", 10**30), "is newer than this translate reads"),
    "step as text": (field("step", "x"), "step must be a whole number from 0 to "),
    "step negative": (field("step", -5), "got -5"),
    "step as bool": (field("step", True), "step must be a whole number from 0 to "
                                          "9223372036854775807, got True"),
    "step as float": (field("step", 1.5), "got 1.5"),
    "step huge": (field("step", 10**30), "got 1000000000000000000000000000000"),
    "step missing": (lambda c: c.pop("step"), "missing field 'step' for format_version 2"),
    "unknown field": (field("extra", 1), "unknown field 'extra' for format_version 2"),
    "dtype unknown": (field("dtype", "fp64"), "dtype is 'fp64', not fp32 or bf16 or fp16"),
    "dtype as number": (field("dtype", 16), "dtype is 16"),
    "dtype as list": (field("dtype", ["fp32"]), "dtype is ['fp32'], not fp32 or bf16 or fp16"),
    "source null": (field("source", None), "source is None, not text"),
    "source as number": (field("source", 5), "source is 5, not text"),
    "averaged as text": (field("averaged", "a.pt"), "averaged is 'a.pt', not a list"),
    "averaged of numbers": (field("averaged", [1, 2]), "averaged is [1, 2], not a list"),
    "recipe as text": (field("recipe", "x"), "recipe is 'x', not a mapping of sections"),
    "recipe as list": (field("recipe", []), "recipe is [], not a mapping"),
    "recipe field as text": (lambda c: c["recipe"]["model"].update(d_model="512"), "d_model"),
    "recipe field as bool": (lambda c: c["recipe"]["decode"].update(beam=True), "beam"),
    "weights null": (field("weights", None), "weights names the file None"),
    "weights empty": (field("weights", ""), "weights names the file ''"),
    "weights in a subfolder": (field("weights", "a/model.safetensors"), "names the file "
                                                                        "'a/model.safetensors'"),
    "tokenizer as text": (field("tokenizer", "spm.model"), "tokenizer must map src, tgt and "
                                                           "special_ids, got 'spm.model'"),
    "tokenizer without tgt": (lambda c: c["tokenizer"].pop("tgt"), "tokenizer must map src"),
    "other special ids": (lambda c: c["tokenizer"]["special_ids"].update(pad=3),
                          "tokenizer.special_ids is"),
    "digest missing": (lambda c: c["sha256"].pop("spm.model"), "sha256 lacks 'spm.model'"),
    "digest of another file": (lambda c: c["sha256"].update({"x.bin": "0" * 64}),
                               "sha256 names 'x.bin'"),
    "digest not hex": (lambda c: c["sha256"].update({"spm.model": "z" * 64}),
                       "sha256.spm.model is 'zzz"),
    "digest as number": (lambda c: c["sha256"].update({"spm.model": 5}), "sha256.spm.model is 5"),
}


def write_config(text):
    return lambda folder: (folder / "config.json").write_bytes(
        text if isinstance(text, bytes) else text.encode())


CONFIG_TEXTS = {
    "100,000 deep": (write_config("[" * 100_000 + "]" * 100_000), "nested deeper than 32 levels"),
    "deep in the recipe": (lambda f: edit_config(f, lambda c: c["recipe"]["model"].update(
        d_model=json.loads("[" * 40 + "]" * 40))), "nested deeper than 32 levels"),
    "a number of 5,000 digits": (write_config('{"format": "translate", "step": ' + "9" * 5000
                                              + "}"), "config.json: not valid JSON (Exceeds"),
    "a key twice": (lambda f: write_config((f / "config.json").read_text()[:-2]
                                           + ', "format_version": 1}')(f),
                    "not valid JSON (the key 'format_version' is given twice)"),
    "not UTF-8": (write_config(b'{"format": "\xff"}'), "config.json: not UTF-8 (invalid start "
                                                        "byte at byte 12)"),
    "over 1 MiB": (write_config('{"format": "translate", "pad": "' + "x" * (1 << 20) + '"}'),
                   "bytes, over the limit of 1,048,576 for a config.json"),
    "a list": (write_config("[]"), "not a translate model folder"),
    "NaN step": (lambda f: edit_config(f, field("step", float("nan"))), "got nan"),
    "Infinity step": (lambda f: edit_config(f, field("step", float("inf"))),
                      "step must be a whole number from 0 to 9223372036854775807, got inf"),
}


def set_alias(alias, name):
    def change(state, metadata):
        aliases = json.loads(metadata["aliases"])
        aliases[alias] = name
        metadata["aliases"] = json.dumps(aliases)
    return change


def poison(value):
    def change(state, metadata):
        state["decoder_layers.1.ffn.fc1.weight"][0, 0] = value
    return change


WEIGHTS = {  # weights rewritten, their digest recorded anew -> what the refusal says
    "a NaN": (poison(float("nan")), "its weight decoder_layers.1.ffn.fc1.weight holds NaN or "
                                    "infinite values"),
    "an Inf": (poison(float("inf")), "decoder_layers.1.ffn.fc1.weight holds NaN or infinite"),
    "a -Inf": (poison(float("-inf")), "holds NaN or infinite values"),
    "alias to a missing name": (set_alias("output.weight", "nothing.weight"),
                                "the alias 'output.weight' names 'nothing.weight', which the "
                                "file does not store"),
    "alias cycle": (lambda s, m: (set_alias("a.weight", "b.weight")(s, m),
                                  set_alias("b.weight", "a.weight")(s, m)),
                    "the alias 'a.weight' names 'b.weight', which the file does not store"),
    "alias over a stored tensor": (set_alias("src_embed.tokens.weight", "output.weight"),
                                   "the alias 'src_embed.tokens.weight' is a stored tensor too"),
    "aliases not a mapping": (lambda s, m: m.update(aliases="[1]"),
                              "its metadata \"aliases\" is not a mapping of tensor names"),
    "aliases not JSON": (lambda s, m: m.update(aliases="{"), "(metadata \"aliases\"): not "
                                                              "valid JSON"),
    "aliases deep": (lambda s, m: m.update(aliases="[" * 10_000 + "]" * 10_000),
                     "nested deeper than 32 levels"),
    "weights of a later format": (lambda s, m: m.update(translate_format_version="3"),
                                  "format_version 2, but model.safetensors was written by "
                                  "format 3: config.json was edited"),
}


def test_a_checkpoint_with_nan_weights_or_past_fp16_is_not_exported(trained_run, tmp_path):
    data = read_checkpoint(trained_run.best_checkpoint)
    data["model"] = {**data["model"], "encoder_norm.weight": data["model"][
        "encoder_norm.weight"] * 1e6}
    with pytest.raises(ModelFolderError, match="--dtype fp16: its weight encoder_norm.weight "
                                               "holds NaN or infinite values; it is past fp16"):
        write_model_folder(data, tmp_path / "fp16", "fp16")
    data["model"]["encoder_norm.weight"] = data["model"]["encoder_norm.weight"] * float("nan")
    with pytest.raises(ModelFolderError, match="the checkpoint: its weight encoder_norm.weight "
                                               "holds NaN"):
        write_model_folder(data, tmp_path / "nan", "fp32")
    assert not (tmp_path / "nan").exists()


@pytest.mark.parametrize("options, says", [
    ({"fmt": "onnx"}, "unknown format 'onnx'; valid: inference, ctranslate2, hf"),
    ({"fmt": None}, "unknown format None"),
    ({"dtype": ["bf16"]}, "--dtype takes fp32, bf16, fp16 with --format inference or hf"),
    ({"dtype": "fp64"}, "--dtype takes fp32, bf16, fp16"),
    ({"quantization": "int8"}, "--quantization takes int8, "),
])
def test_export_options_of_the_wrong_type_are_refused_by_name(trained_run, tmp_path, options,
                                                              says):
    from translate.export import ExportError, export

    with pytest.raises(ExportError) as refused:
        export(trained_run.run_dir, **{"fmt": "inference", "out": tmp_path / "out", **options})
    assert says in str(refused.value) and not (tmp_path / "out").exists()


def in_place_of(name: str, kind: str, tmp_path):
    def damage(folder):
        file = folder / name
        outside = tmp_path / f"outside-{name}"
        shutil.copyfile(file, outside)
        file.unlink()
        if kind == "fifo":
            os.mkfifo(file)
        elif kind == "folder":
            file.mkdir()
        elif kind == "socket":
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(str(file))  # the socket file stays when it closes
        else:
            file.symlink_to({"link to /dev/zero": "/dev/zero", "link out": outside,
                             "dangling link": tmp_path / "nowhere"}[kind])
    return damage


KINDS = {"fifo": "{name} is a FIFO (named pipe), not a", "folder": "{name} is a folder, not a",
         "socket": "{name} is a socket, not a",
         "link to /dev/zero": "{name} is a symbolic link to /dev/zero, not a",
         "link out": "{name} is a symbolic link to {tmp}/outside-{name}, not a",
         "dangling link": "{name} is a symbolic link to {tmp}/nowhere (which does not exist)"}


@pytest.mark.parametrize("name", ["config.json", "spm.model", "model.safetensors"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_fifo_device_or_link_in_place_of_a_file_is_refused_at_once(exported, tmp_path, name,
                                                                     kind):
    folder = shutil.copytree(exported, tmp_path / "model")
    if kind == "socket" and len(str(folder / name)) > 100:
        pytest.skip("the path is too long for a Unix socket's address")
    in_place_of(name, kind, tmp_path)(folder)
    if kind == "fifo":  # should the loader wait on a writer, one comes in 20 s: a failure, no hang
        escape = threading.Timer(20, lambda: os.close(os.open(folder / name, os.O_RDWR)))
        escape.daemon = True
        escape.start()
    started = time.monotonic()
    refused_by_decode(folder, KINDS[kind].format(name=name, tmp=tmp_path))
    assert time.monotonic() - started < 10
    if kind == "fifo":
        escape.cancel()


def test_a_folder_exported_before_digests_still_decodes(exported, tmp_path):
    folder = shutil.copytree(exported, tmp_path / "model")
    as_format_1(folder)
    result = CliRunner().invoke(main, ["decode", str(folder)], input="A dog runs.\n")
    assert result.exit_code == 0 and result.stdout.strip(), result.output


DOWNGRADES = {  # a folder made to look older -> what the refusal says
    "version 1, digests kept": (lambda f: edit_config(f, field("format_version", 1)),
                                "holds \"sha256\", which format_version 1 did not record"),
    "version 1, digests deleted": (
        lambda f: edit_config(f, lambda c: (c.pop("sha256"), c.update(format_version=1))),
        "format_version 1, but model.safetensors was written by format 2: config.json was "
        "edited"),
    "version 2, digests deleted": (lambda f: edit_config(f, lambda c: c.pop("sha256")),
                                   "no SHA-256 of its files (\"sha256\"), which "
                                   "format_version 2 records"),
    "format 1 with a later field": (lambda f: (as_format_1(f), edit_config(
        f, field("extra", 1))), "unknown field 'extra' for format_version 1"),
    "format 1 missing a field": (lambda f: (as_format_1(f), edit_config(
        f, lambda c: c.pop("dtype"))), "missing field 'dtype' for format_version 1"),
    "format 1 cut short": (lambda f: (as_format_1(f), cut_short(f)),
                           "its header declares (was its copy cut short?)"),
    "format 1, its header length bogus": (
        lambda f: (as_format_1(f), (f / "model.safetensors").write_bytes(
            (1 << 60).to_bytes(8, "little") + b"{}")),
        "not safetensors weights (its header length, 1,152,921,504,606,846,976 bytes, does "
        "not fit its 10 bytes)"),
    "format 2 cut short": (cut_short, "model.safetensors: its SHA-256 is not the one recorded"),
}


def edited(change):
    return lambda folder: edit_config(folder, change)


def reweighted(change):
    return lambda folder: rewrite_weights(folder, change)


ALL = {**{f"damage: {case}": value for case, value in CASES.items()},
       **{f"field: {case}": (edited(change), says) for case, (change, says) in FIELDS.items()},
       **{f"config text: {case}": value for case, value in CONFIG_TEXTS.items()},
       **{f"weights: {case}": (reweighted(change), says)
          for case, (change, says) in WEIGHTS.items()},
       **{f"downgrade: {case}": value for case, value in DOWNGRADES.items()}}


@pytest.mark.parametrize("case", sorted(ALL))
def test_a_damaged_or_hostile_export_is_one_error_line(exported, tmp_path, case):
    damage, says = ALL[case]
    folder = shutil.copytree(exported, tmp_path / "model")
    (tmp_path / "elsewhere.model").write_bytes((exported / "spm.model").read_bytes())
    damage(folder)
    refused_by_decode(folder, says)
