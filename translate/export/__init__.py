"""`translate export`: a trained model in the form its users run it.

    inference    model.safetensors, the SentencePiece model(s) and config.json
                 (translate.model_folder): what `translate decode`, `evaluate`, `Translator.load`
                 and the server load like a checkpoint, without its optimizer and training state
    ctranslate2  a CTranslate2 model folder and spm.model (translate.export.ct2)
    hf           a `transformers` folder (`save_pretrained`) with our search's settings, a fast
                 tokenizer (tokenizer.json), spm.model and a model card: the native Pegasus class
                 where it holds the model, else a modeling file of its own beside the weights
                 (`trust_remote_code=True`); what `AutoTokenizer` and `AutoModelForSeq2SeqLM`
                 load (translate.export.hf)

Every format holds the checkpoint's `model` weights: the EMA (or averaged) ones where training
kept them. The peer formats refuse, in one line, a Transformer with an option their converters
do not write (`peer.UNCONVERTED`: ctranslate2 holds rope and qk_norm, the latter where
cross-attention's queries are normalised over the width as CTranslate2's are,
`model.cross_query_norm: width`; hf holds every Transformer option); inference holds any.
The folder is written under a temporary name and renamed into place whole, so a failed export
leaves nothing behind.

    __init__.py  export(): the formats, their checks, the folder written whole
    ct2.py       the CTranslate2 conversion, and decoding its folder as ours
    hf.py        the transformers conversion (Pegasus or remote code) and its fast tokenizer
    hf_folder.py the hf folder's own files: the modeling file, the seal, the model card
    hf_modeling.py  the modeling file written beside the weights (torch and transformers only)
    peer.py      ExportError, and the models the peer formats' converters take
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from translate.export.peer import ExportError
from translate.loading import load_checkpoint
from translate.locate import locate
from translate.model_folder import DTYPES, write_model_folder
from translate.utils import NO_ROOM, install_hint

FORMATS = ("inference", "ctranslate2", "hf")
# format -> the packages it needs (protobuf: transformers reads spm.model with it)
NEEDS = {"ctranslate2": ("ctranslate2",), "hf": ("transformers", "google.protobuf")}


@dataclass
class Exported:
    out: Path
    fmt: str
    source: Path  # the checkpoint file (or exported folder) read
    source_bytes: int
    files: dict[str, int]  # file name -> bytes

    @property
    def bytes(self) -> int:
        return sum(self.files.values())

    def summary(self) -> str:
        lines = [f"exported {self.source} ({_mib(self.source_bytes)}) as {self.fmt} to "
                 f"{self.out} ({_mib(self.bytes)}, {self.bytes / self.source_bytes:.0%})"]
        lines += [f"  {name:24s} {_mib(size):>12s}" for name, size in self.files.items()]
        return "\n".join(lines)


def _mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() \
        else path.stat().st_size


def export(checkpoint: str | Path, fmt: str, out: str | Path, dtype: str | None = None,
           quantization: str | None = None) -> Exported:
    """Write the model of `checkpoint` (a .pt, a run folder's best.pt, an exported folder) as
    `fmt` into the new folder `out`.

    Args:
        dtype: inference and hf: fp32 (default), bf16 or fp16 weights (half the size).
        quantization: ctranslate2: one of ct2.QUANTIZATIONS (default float32).
    """
    out = Path(out)
    _check_options(fmt, out, dtype, quantization)
    model = locate(checkpoint)
    loaded = load_checkpoint(model)  # checks recipe, tokenizer and weights first
    source = model.checkpoint or model.path  # the .pt read, or the exported folder
    tmp = out.parent / f".{out.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if fmt == "inference":
            write_model_folder(loaded.data, tmp, dtype or "fp32", source.name)
        else:
            _write_peer(loaded, fmt, tmp, dtype, quantization, source)
        if out.exists():
            out.rmdir()  # empty, as checked
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out)
    except Exception as e:
        number = e.errno if isinstance(e, OSError) else _os_error(e)
        if number not in NO_ROOM:
            raise
        raise ExportError(f"could not write {out} ({os.strerror(number)}); nothing of it was "
                          f"written") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    return Exported(out, fmt, source, _size(source), files)


def _os_error(error: Exception) -> int | None:
    """The OS error number a library's own error reports ("... (os error 28)"), if any."""
    found = re.search(r"\(os error (\d+)\)", str(error))
    return int(found[1]) if found else None


def _check_options(fmt: str, out: Path, dtype: str | None, quantization: str | None) -> None:
    from translate.export.ct2 import QUANTIZATIONS

    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    if dtype is not None and (fmt == "ctranslate2" or not isinstance(dtype, str)
                              or dtype not in DTYPES):
        raise ExportError(f"--dtype takes {', '.join(DTYPES)} with --format inference or hf; "
                          f"ctranslate2 takes --quantization")
    if quantization is not None and (fmt != "ctranslate2" or quantization not in QUANTIZATIONS):
        raise ExportError(f"--quantization takes {', '.join(QUANTIZATIONS)} with --format "
                          f"ctranslate2; the other formats take --dtype")
    missing = [name for name in NEEDS.get(fmt, ()) if not _installed(name)]
    if missing:
        raise ExportError(f"--format {fmt} needs the {missing[0].split('.')[-1]} package: "
                          f"{install_hint('export')}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder; choose a new output folder")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package ("google") is missing
        return False


def _write_peer(loaded, fmt: str, out: Path, dtype: str | None, quantization: str | None,
                source: Path):
    """A CTranslate2 or transformers folder, with the SentencePiece model(s) beside it;
    `source` is the exported checkpoint, named in the hf model card."""
    tokenizer, data = loaded.tokenizer, loaded.recipe.data
    if fmt == "ctranslate2":
        from translate.export.ct2 import to_ctranslate2, vocabulary

        to_ctranslate2(loaded.model, vocabulary(tokenizer.src), vocabulary(tokenizer.tgt), out,
                       quantization)
    else:
        from transformers.utils import logging as hf_logging

        from translate.export.hf import save_hf

        hf_logging.disable_progress_bar()  # a bar for writing one small file
        save_hf(loaded.model, tokenizer, loaded.recipe, out, DTYPES[dtype or "fp32"],
                source=source, step=loaded.step)
    tokenizer.save(out, data.src_lang, data.tgt_lang)
