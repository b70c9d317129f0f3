"""docs/tour.ipynb runs top to bottom (with TOUR_TINY=1: toy-sized models, tens of seconds),
and is kept in git without outputs."""

import json
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "docs/tour.ipynb"


def test_the_notebook_is_kept_without_outputs():
    raw = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in raw["cells"] if c["cell_type"] == "code"]
    assert code and all(not c["outputs"] and c["execution_count"] is None for c in code)
    assert raw["metadata"]["kernelspec"]["name"] == "python3"


def test_the_notebook_runs_top_to_bottom(small_data, tmp_path, monkeypatch):
    monkeypatch.setenv("TOUR_TINY", "1")
    monkeypatch.setenv("TOUR_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("TRANSLATE_DATA", str(small_data))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    start = time.perf_counter()
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO / "docs")}}).execute()
    seconds = time.perf_counter() - start
    text = "\n".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code"
                     for o in c.outputs)
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs
              if "image/png" in o.get("data", {})]
    assert "tiny: True" in text and "->" in text
    assert "transformer  BLEU" in text and "rnn          BLEU" in text
    assert len(images) == 2  # the Transformer's heads, the RNN's alignment
    assert (tmp_path / "runs/transformer/best.pt").is_file()
    assert seconds < 240, seconds
