"""docs/tour.ipynb runs top to bottom (with TOUR_TINY=1: toy-sized models, tens of seconds),
its four experiments each revealing an answer, and is kept in git without outputs."""

import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest
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
    monkeypatch.delenv("TOUR_MODEL", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO / "docs")}}).execute()
    text = "\n".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code"
                     for o in c.outputs)
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs
              if "image/png" in o.get("data", {})]
    assert "tiny: True" in text and "->" in text
    assert text.count("the answer:") == 4  # four experiments, each revealed after a prediction
    assert "without positions, the backwards output is the output backwards: True" in text
    assert "with them: False" in text
    assert "transformer  BLEU" in text and "rnn          BLEU" in text
    # the toy's alignment, four experiments' curves, four heads; the Transformer's heads, the
    # RNN's alignment
    assert len(images) == 8
    assert (tmp_path / "runs/transformer/best.pt").is_file()


@pytest.mark.slow
def test_the_notebook_installs_itself_in_a_fresh_venv_and_runs_at_its_own_sizes(multi30k,
                                                                                  tmp_path):
    """A fresh clone and a fresh virtual environment holding only Jupyter's kernel, as Colab or
    a new laptop has: the first cell installs PyTorch (the CPU build here) and the toolkit
    without a restart, and the notebook runs top to bottom at its own sizes, the toy
    experiments aligned."""
    import subprocess
    import sys

    clone, venv = tmp_path / "clone", tmp_path / "venv"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin/python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "ipykernel", "nbclient",
                    "nbformat"], check=True, timeout=900)
    script = (f"import nbformat; from nbclient import NotebookClient\n"
              f"nb = nbformat.read({str(clone / 'docs/tour.ipynb')!r}, as_version=4)\n"
              f"NotebookClient(nb, timeout=3600, kernel_name='python3', resources="
              f"{{'metadata': {{'path': {str(clone / 'docs')!r}}}}}).execute()\n"
              f"nbformat.write(nb, {str(tmp_path / 'ran.ipynb')!r})\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("TOUR_TINY", "TOUR_MODEL", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env.update(TOUR_RUNS=str(tmp_path / "runs"), MPLBACKEND="Agg",
               TRANSLATE_DATA=str(multi30k))
    start = time.perf_counter()
    subprocess.run([str(python), "-c", script], check=True, env=env, timeout=3600)
    minutes = (time.perf_counter() - start) / 60
    ran = nbformat.read(tmp_path / "ran.ipynb", as_version=4)
    text = "\n".join(o.get("text", "") for c in ran.cells if c.cell_type == "code"
                     for o in c.outputs)
    assert "tiny: False" in text and text.count("the answer:") == 4
    aligned = re.search(r"(\d+)% of answer positions aligned", text)
    assert aligned and int(aligned[1]) >= 90, text[:2000]
    print(f"the notebook from a fresh clone and venv: {minutes:.1f} minutes, install included")


@pytest.mark.slow
def test_the_set_up_cell_clones_and_installs_outside_a_clone(tmp_path):
    """Colab's case: the kernel starts in an empty folder of a fresh environment; the first cell
    clones the repository from $TRANSLATE_REPO_URL, installs the toolkit and imports it without a
    restart (the package, not the clone's top folder, which the kernel's folder would shadow it
    with were the clone named translate)."""
    import subprocess
    import sys

    venv, here = tmp_path / "venv", tmp_path / "content"
    here.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    cell = "".join(nbformat.read(NOTEBOOK, as_version=4).cells[1].source)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(TRANSLATE_REPO_URL=f"file://{REPO}", PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    ran = subprocess.run([str(venv / "bin/python"), "-c", cell], cwd=here, env=env, text=True,
                         capture_output=True, timeout=1800)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert re.search(r"translate \S+ from \S+/content/translate-clone, torch ", ran.stdout), \
        ran.stdout


FAKE_GIT = """#!{python}
import json, os, pathlib, sys

with open(os.environ["FAKE_GIT_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
clone = pathlib.Path(sys.argv[-1])  # a clone of the toolkit, as far as the cell can tell
(clone / ".git").mkdir(parents=True)
(clone / "translate").mkdir()
(clone / "setup.cfg").write_text("")
(clone / "translate/toy.py").write_text("")
"""


@pytest.fixture
def set_up_cell(tmp_path, monkeypatch):
    """The set-up cell, run in an empty folder (not a clone) with a fake `git` on PATH that
    records its arguments (`calls()`) and makes a clone-shaped folder."""
    bin_dir, here, log = tmp_path / "bin", tmp_path / "content", tmp_path / "git.log"
    bin_dir.mkdir()
    here.mkdir()
    git = bin_dir / "git"
    git.write_text(FAKE_GIT.format(python=sys.executable))
    git.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GIT_LOG", str(log))
    monkeypatch.chdir(here)
    cell = "".join(nbformat.read(NOTEBOOK, as_version=4).cells[1].source)

    def run(url):
        monkeypatch.setenv("TRANSLATE_REPO_URL", url)
        namespace = {}
        exec(compile(cell, "set-up cell", "exec"), namespace)
        return namespace["REPO"]

    run.calls = lambda: [json.loads(line) for line in log.read_text().splitlines()] \
        if log.exists() else []
    run.here = here
    return run


@pytest.mark.parametrize("url", ["--upload-pack=touch pwned", "-c", "-"])
def test_the_set_up_cell_refuses_an_address_git_would_take_for_an_option(set_up_cell, url):
    with pytest.raises(SystemExit, match=f"REPO_URL {re.escape(repr(url))} starts with '-', "
                                         f"which git would take for an option"):
        set_up_cell(url)
    assert set_up_cell.calls() == [] and list(set_up_cell.here.iterdir()) == []


def test_the_set_up_cell_clones_after_double_dash_once_and_then_reuses_the_clone(set_up_cell):
    url = "https://example.org/translate.git"
    assert set_up_cell(url) == set_up_cell.here / "translate-clone"
    assert set_up_cell.calls() == [["clone", "--depth", "1", "--", url, "translate-clone"]]
    assert set_up_cell(url) == set_up_cell.here / "translate-clone"  # run again: no new clone
    assert set_up_cell("") == set_up_cell.here / "translate-clone"
    assert len(set_up_cell.calls()) == 1


def test_the_set_up_cell_never_clones_over_a_folder_that_is_no_clone(set_up_cell):
    (set_up_cell.here / "translate-clone").mkdir()
    (set_up_cell.here / "translate-clone/notes.txt").write_text("mine\n")
    with pytest.raises(SystemExit, match="translate-clone exists and is no clone of the toolkit"):
        set_up_cell("https://example.org/translate.git")
    assert set_up_cell.calls() == []
    assert (set_up_cell.here / "translate-clone/notes.txt").read_text() == "mine\n"
