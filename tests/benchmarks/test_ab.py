"""The A/B benchmarks' revisions: a git revision and a folder holding its copy (as carried to a
machine without the history) export the same package, every import renamed to it."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ab_decode", ROOT / "benchmarks" / "ab_decode.py")
ab_decode = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab_decode)


def files(package: Path) -> dict[str, str]:
    return {str(p.relative_to(package)): p.read_text(encoding="utf-8")
            for p in sorted(package.rglob("*.py"))}


def test_a_revision_and_its_folder_export_the_same_package(tmp_path):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                      capture_output=True).returncode:
        pytest.skip("not a git checkout")
    folder = tmp_path / "copy"
    folder.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD", "translate"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    ab_decode.export("HEAD", "rev_pkg", tmp_path)
    ab_decode.export(str(folder), "folder_pkg", tmp_path)
    by_rev, by_folder = files(tmp_path / "rev_pkg"), files(tmp_path / "folder_pkg")
    assert by_rev.keys() == by_folder.keys() and "models/attention.py" in by_rev
    for name, text in by_rev.items():
        assert text.replace("rev_pkg", "folder_pkg") == by_folder[name], name
    cli = by_folder["cli.py"]
    assert "from folder_pkg." in cli and "from translate." not in cli


def test_ab_train_reads_the_precision_todays_trainer_runs_in(recipe_path, small_data, tmp_path):
    """ab_train.py names the precision each revision trained in: today's Trainer keeps it in
    its batch loss, with `auto` resolved (this CPU's choice, whichever it is)."""
    import torch

    from helpers.training import tiny_trainer
    from translate.hardware import resolve_precision

    spec = importlib.util.spec_from_file_location("ab_train", ROOT / "benchmarks/ab_train.py")
    ab_train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab_train)  # it puts benchmarks/ on the path for ab_decode
    for precision in ("fp32", "auto"):
        trainer = tiny_trainer(recipe_path, small_data, tmp_path / precision,
                               f"train.precision={precision}")
        assert ab_train.resolved_precision(trainer) == resolve_precision(precision, torch.device("cpu"))
