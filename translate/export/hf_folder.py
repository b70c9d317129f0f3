"""The hf export folder beyond the model: its code, the record that seals it, the check that it
is still what the export wrote, and its model card.

    modeling_translate.py   translate/export/hf_modeling.py as it is: the model classes where no
                            transformers class holds the model, and the translation pipeline
    translate_export.json   the SHA-256 of each file that runs or points to code (SEALED)
    README.md               the model card: the hub's metadata, recipe, data, test BLEU, licence

transformers runs a folder's Python files when told to trust it (`trust_remote_code=True`): the
modeling file, and any file config.json's `auto_map` or `custom_pipelines`, or
tokenizer_config.json's `auto_map`, names, even in another repository ("repo--module.Class"),
and custom_generate/generate.py. `check_exported` refuses, before any of it runs, a folder whose
sealed files changed after the export, whose modeling file is not this translate's, that holds
other Python files, or whose maps name anything but the classes of its own modeling file.

Tests: tests/export/test_hf.py, tests/reliability/test_hf_export_input.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

from translate.files import UnsafeFileError, open_regular, read_regular
from translate.model_folder import slim_recipe

CODE = "modeling_translate.py"
TEMPLATE = Path(__file__).with_name("hf_modeling.py")  # copied, as it is, to CODE
MANIFEST = "translate_export.json"
SEALED = ("config.json", "generation_config.json", "tokenizer_config.json", CODE)
CLASSES = {"AutoConfig": "TranslateConfig",
           "AutoModelForSeq2SeqLM": "TranslateForConditionalGeneration"}
PIPELINE = {"translation": {"impl": f"{CODE[:-3]}.TranslationPipeline",
                            "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}}
MAX_JSON_BYTES = 1 << 20  # the sealed JSON files are a few kB


class ExportFolderError(ValueError):
    """An hf export folder that is not as the export wrote it; the message says what differs."""


def write_code(out: Path, remote: bool) -> None:
    """The modeling file into `out`, and config.json's maps to it: the model classes where
    `remote` (no transformers class holds the model), the translation pipeline always
    (transformers 5 has none of its own)."""
    (out / CODE).write_bytes(TEMPLATE.read_bytes())
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    if remote:
        config["auto_map"] = {auto: f"{CODE[:-3]}.{name}" for auto, name in CLASSES.items()}
    config["custom_pipelines"] = PIPELINE
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def seal(out: Path) -> None:
    """Record the SHA-256 of each SEALED file in `out`'s MANIFEST."""
    digests = {name: _sha256(read_regular(out / name)) for name in SEALED}
    (out / MANIFEST).write_text(json.dumps({"format": "translate hf export", "version": 1,
                                            "sha256": digests}, indent=2) + "\n",
                                encoding="utf-8")


def check_exported(folder: str | Path) -> None:
    """Refuse an hf export that runs any code but this translate's: call it before
    `from_pretrained(folder, trust_remote_code=True)`. Reads files, imports none.

    Raises:
        ExportFolderError: in one line, naming the file and what is wrong with it.
    """
    folder = Path(folder)
    manifest = _json(folder, MANIFEST)
    digests = manifest.get("sha256") if isinstance(manifest, dict) else None
    if not isinstance(digests, dict) or set(digests) != set(SEALED):
        raise ExportFolderError(f"{folder / MANIFEST} does not list the SHA-256 of "
                                f"{', '.join(SEALED)}; export the model again")
    for name in SEALED:
        if _sha256(_read(folder, name)) != digests[name]:
            raise ExportFolderError(f"{folder / name} changed after the export (its SHA-256 is "
                                    f"not the one {MANIFEST} records); export the model again")
    if _sha256(_read(folder, CODE)) != _sha256(TEMPLATE.read_bytes()):
        raise ExportFolderError(f"{folder / CODE} is not the modeling file this translate "
                                f"writes; export the model again")
    others = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.py")
                    if p.relative_to(folder).as_posix() != CODE)
    if others or (folder / "custom_generate").exists():
        name = others[0] if others else "custom_generate"
        raise ExportFolderError(f"{folder} holds code the export did not write ({name}), which "
                                f"transformers would run; export the model again")
    _check_maps(folder)


def _check_maps(folder: Path) -> None:
    """config.json's maps name this folder's modeling file and its classes alone; the
    tokenizer's name no code."""
    config = _json(folder, "config.json")
    auto_map = config.get("auto_map", {}) if isinstance(config, dict) else None
    wanted = {auto: f"{CODE[:-3]}.{name}" for auto, name in CLASSES.items()}
    if not isinstance(auto_map, dict) or any(wanted.get(k) != v for k, v in auto_map.items()):
        where = next((v for k, v in auto_map.items() if wanted.get(k) != v), auto_map) \
            if isinstance(auto_map, dict) else auto_map
        raise ExportFolderError(f"{folder / 'config.json'}: auto_map names {_short(where)}, not a "
                                f"class of its own {CODE}; export the model again")
    if config.get("custom_pipelines", PIPELINE) != PIPELINE:
        raise ExportFolderError(f"{folder / 'config.json'}: custom_pipelines names "
                                f"{_short(config['custom_pipelines'])}, not {CODE}'s "
                                f"TranslationPipeline; export the model again")
    tokenizer = _json(folder, "tokenizer_config.json")
    if not isinstance(tokenizer, dict) or "auto_map" in tokenizer:
        raise ExportFolderError(f"{folder / 'tokenizer_config.json'} names tokenizer code "
                                f"(auto_map), which the export never writes; export the model "
                                f"again")


def _read(folder: Path, name: str) -> bytes:
    try:
        return read_regular(folder / name, what=name)
    except FileNotFoundError:
        raise ExportFolderError(f"{folder} is no hf export of translate: {name} is missing"
                                ) from None
    except UnsafeFileError as e:
        raise ExportFolderError(str(e)) from None


def _json(folder: Path, name: str):
    path = folder / name
    try:
        with open_regular(path, what=name) as f:
            text = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise ExportFolderError(f"{folder} is no hf export of translate: {name} is missing"
                                ) from None
    except UnsafeFileError as e:
        raise ExportFolderError(str(e)) from None
    try:
        if len(text) > MAX_JSON_BYTES:
            raise ValueError(f"over {MAX_JSON_BYTES} bytes")
        return json.loads(text)
    except ValueError as e:
        raise ExportFolderError(f"{path} is not JSON ({str(e).splitlines()[0]}); export the "
                                f"model again") from None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def write_card(out: Path, recipe: dict, remote_options: list[str], source: Path | None,
               step: int | None) -> None:
    """README.md: the hub's YAML header, then what the model is, the recipe that trained it,
    the data, its test BLEU (from the run's metrics.jsonl, where `source` is in a run folder),
    the licence and the code it runs.

    Args:
        recipe: the checkpoint's resolved recipe, as a dict.
        remote_options: the model options no transformers class holds (empty: a Pegasus).
        source: the exported checkpoint file or run folder, if known; step: its step.
    """
    data, model = recipe["data"], recipe["model"]
    src, tgt = data["src_lang"], data["tgt_lang"]
    hub = slim_recipe(recipe)["data"].get("dataset")  # a hub name, not a local path
    header = {"language": [src, tgt], "license": "mit",
              "tags": ["translation", "translate", model["arch"]],
              "library_name": "transformers", "pipeline_tag": "translation",
              **({"datasets": [hub]} if hub else {})}
    shown = {**recipe, "data": {**data, "dataset": hub or "DATA (a local folder)"}}
    lines = ["---", yaml.safe_dump(header, sort_keys=False).strip(), "---", "",
             f"# {src}→{tgt} {model['arch']}, trained with translate", "",
             f"A {model['arch']} ({model.get('encoder_layers')}+{model.get('decoder_layers')} "
             f"layers, width {model.get('d_model')}) that translates {src} into {tgt}.", "",
             "```python",
             "from transformers import pipeline",
             "",
             "translate = pipeline(\"translation\", model=\"FOLDER\", trust_remote_code=True)",
             "print(translate(\"A man rides a bike.\"))",
             "```", "",
             "## Code it runs", "", *_code_note(remote_options), "",
             "## Data", "",
             (f"[{hub}](https://huggingface.co/datasets/{hub})" if hub else
              "A local copy of the data (its path is not recorded)") +
             f", splits {', '.join(f'{k}: {v}' for k, v in data.get('splits', {}).items())}.", "",
             "## Test BLEU", "", *_bleu_lines(data.get("test_splits", []), source, step), "",
             "## Training", "",
             "Trained with `translate train recipe.yaml`, recipe.yaml being the recipe below "
             "(`--data PATH` for a local copy of the data):", "",
             "```yaml", yaml.safe_dump(shown, sort_keys=False).strip(), "```", "",
             "## Licence", "", "MIT, as translate itself.", ""]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")


def _code_note(remote_options: list[str]) -> list[str]:
    pipeline = (f"`{CODE}` also holds the translation pipeline (transformers 5 has none of its "
                f"own), so `pipeline(\"translation\", ...)` needs `trust_remote_code=True`.")
    if not remote_options:
        return ["The model loads as transformers' own PegasusForConditionalGeneration, with no "
                "remote code: `AutoModelForSeq2SeqLM.from_pretrained(FOLDER)`. " + pipeline]
    return [f"No transformers class computes this model ({', '.join(remote_options)}), so its "
            f"classes are in `{CODE}`, which imports torch and transformers alone: load it with "
            f"`AutoModelForSeq2SeqLM.from_pretrained(FOLDER, trust_remote_code=True)`, after "
            f"reading that file. " + pipeline,
            "", f"`{MANIFEST}` records the SHA-256 of `{CODE}` and the JSON files that point to "
            f"it; `translate.export.hf.check_exported(FOLDER)` refuses a folder that differs "
            f"from what the export wrote."]


def _bleu_lines(splits: list[str], source: Path | None, step: int | None) -> list[str]:
    """A line per test split: BLEU and its sacreBLEU signature where the run scored this
    checkpoint on it (its metrics.jsonl "test" records of this step), else "not recorded"."""
    run = source if source is None or source.is_dir() else source.parent
    records = _test_records(run / "metrics.jsonl") if run is not None else {}
    where = ("the export was not given the checkpoint's run folder" if run is None else
             f"no \"test\" record of step {step} in {run.name}/metrics.jsonl")
    lines = []
    for split in splits:
        r = records.get(split)
        lines.append(f"- {split}: BLEU {r['bleu']:.2f} (sacreBLEU signature "
                     f"`{r.get('bleu_signature', 'not recorded')}`)"
                     if r is not None and r.get("step") == step else
                     f"- {split}: not recorded ({where})")
    return lines or ["Not recorded: the recipe names no test splits."]


def _test_records(path: Path) -> dict[str, dict]:
    """Each split's last "test" record in a run's metrics.jsonl; none where it is unreadable."""
    records: dict[str, dict] = {}
    try:
        with open_regular(path, what="metrics log") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if isinstance(record, dict) and record.get("kind") == "test" and \
                        isinstance(record.get("bleu"), (int, float)):
                    records[str(record.get("split"))] = record
    except OSError:
        return {}
    return records
