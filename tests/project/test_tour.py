"""docs/tour.md cannot rot: every `file:symbol` it names exists, every stop shows code, a test
and a figure, every idea of the notes has its stop, every stop the notebook takes up names a
section the notebook has, and the script that draws its figures runs."""

import ast
import importlib.util
import json
import re
import shutil
from pathlib import Path

import torch

from helpers.files import read_jsonl
from helpers.models import untrained_model
from translate.analysis.attention import attention_maps
from translate.data.batch import pad
from translate.config import DecodeConfig

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[`(?P<path>[\w/.]+\.py):(?P<symbol>[\w.]+)`\]\((?P<target>[^)]+)\)")
IMAGE = re.compile(r"!\[[^\]]*\]\((?P<path>[^)]+)\)")
IDEAS = ("averaging the past", "queries, keys and values", "1/√d scale",
         "causal mask and the padding mask", "softmax and dropout", "one head, then many",
         "feed-forward", "residuals and pre-norm", "positions", "encoder", "masked self-attention",
         "cross-attention", "additive attention", "training step", "beam search", "kv cache",
         "remove the scale", "what changed since 2017", "from states to words")

# "- Try it: [the notebook, §2 “Predict: what does the 1/√d scale do?”](tour.ipynb) — predict ..."
TRY_IT = re.compile(r"^- Try it: \[the notebook, §(?P<section>\d+) “(?P<heading>[^”]+)”\]"
                    r"\(tour\.ipynb\) — \S", re.M)
TRIED = (0, 2, 3, 4, 5, 8, 15, 16, 17)  # the stops the notebook takes up


def defines(source: str, symbol: str) -> bool:
    """Whether the module `source` defines `symbol` (a name, or Class.member)."""
    body = ast.parse(source).body
    for part in symbol.split("."):
        found = None
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            else:
                continue
            if part in names:
                found = node
                break
        if found is None:
            return False
        body = getattr(found, "body", [])
    return True


def broken_links(tour: Path, root: Path, images: bool = True) -> list[str]:
    """The `file:symbol` links of `tour` that do not resolve under `root`, and (with `images`)
    its images that do not exist."""
    text = tour.read_text(encoding="utf-8")
    broken = []
    for link in LINK.finditer(text):
        path, symbol = link["path"], link["symbol"]
        file = root / path
        if link["target"] != f"../{path}" or not file.is_file() or \
                not defines(file.read_text(encoding="utf-8"), symbol):
            broken.append(f"{path}:{symbol}")
    for image in IMAGE.finditer(text) if images else ():
        if not (tour.parent / image["path"]).is_file():
            broken.append(image["path"])
    return broken


def stops(text: str) -> dict[str, str]:
    """{heading: body} of the numbered sections."""
    parts = re.split(r"^## (\d+\. .+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def notebook_headings(notebook: Path) -> set[str]:
    """The level-2 headings ("## 2. ...") of the notebook's markdown cells."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return {line.rstrip() for cell in cells if cell["cell_type"] == "markdown"
            for line in "".join(cell["source"]).splitlines() if line.startswith("## ")}


def test_every_name_and_figure_the_tour_gives_exists():
    tour = REPO / "docs/tour.md"
    assert broken_links(tour, REPO) == []
    assert len(LINK.findall(tour.read_text(encoding="utf-8"))) >= 40


def test_the_tour_opens_with_the_notebook_and_the_page():
    head = (REPO / "docs/tour.md").read_text(encoding="utf-8").split("\n## ", 1)[0]
    assert "(tour.ipynb)" in head and "(usage.md#serving)" in head and "translate serve" in head


def test_every_stop_shows_code_a_test_and_a_figure_and_every_idea_has_one():
    sections = stops((REPO / "docs/tour.md").read_text(encoding="utf-8"))
    assert len(sections) >= 15
    for heading, body in sections.items():
        paths = [m["path"] for m in LINK.finditer(body)]
        assert any(p.startswith("translate/") for p in paths), f"{heading}: no code"
        assert any(p.startswith("tests/") for p in paths), f"{heading}: no test"
        assert IMAGE.search(body), f"{heading}: no figure"
    headings = " ".join(sections).lower()
    assert [idea for idea in IDEAS if idea not in headings] == []


def test_every_stop_the_notebook_takes_up_names_a_section_it_has():
    """Each stop of TRIED has a Try-it line, and the section each Try-it line names, its §
    number and heading, is a level-2 heading of docs/tour.ipynb."""
    sections = stops((REPO / "docs/tour.md").read_text(encoding="utf-8"))
    named = {int(heading.split(".")[0]): [f"## {m['section']}. {m['heading']}"
                                          for m in TRY_IT.finditer(body)]
             for heading, body in sections.items()}
    assert [stop for stop in TRIED if not named.get(stop)] == []
    headings = notebook_headings(REPO / "docs/tour.ipynb")
    assert {stop: [h for h in names if h not in headings]
            for stop, names in named.items() if set(names) - headings} == {}


def test_every_stop_has_a_figure_of_its_own():
    """At least 16 stops, and no figure serves two of them."""
    sections = stops((REPO / "docs/tour.md").read_text(encoding="utf-8"))
    assert len(sections) >= 16
    owners: dict[str, list[str]] = {}
    for heading, body in sections.items():
        for image in {m["path"] for m in IMAGE.finditer(body)}:
            owners.setdefault(image, []).append(heading)
    assert {image: headings for image, headings in owners.items() if len(headings) > 1} == {}


def test_a_renamed_function_breaks_the_tour(tmp_path):
    """Renaming a function the tour names (in a copy) is caught, naming the link."""
    for folder in ("translate", "tests"):
        shutil.copytree(REPO / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "data"))
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / "docs/tour.md", tmp_path / "docs")
    assert broken_links(tmp_path / "docs/tour.md", tmp_path, images=False) == []
    module = tmp_path / "translate/models/attention.py"
    module.write_text(module.read_text().replace("def causal_mask(", "def future_mask("))
    assert broken_links(tmp_path / "docs/tour.md", tmp_path, images=False) == [
        "translate/models/attention.py:causal_mask"]


def test_the_tour_figures_draw(small_data, tmp_path):
    """scripts/tour_figures.py still draws its figures of one sentence (from an untrained
    model: the drawing is checked here, not what it shows), and stop 0's of the notes' numbers."""
    spec = importlib.util.spec_from_file_location("tour_figures", REPO / "scripts/tour_figures.py")
    tour = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tour)
    _, tok, model = untrained_model(small_data, layers=2)
    model.eval()
    rows = read_jsonl(small_data / "train.jsonl", 40)
    sentence, short = rows[0]["en"], min((r["en"] for r in rows), key=len)
    maps = attention_maps(model, tok, sentence, DecodeConfig(max_len_b=6))
    src_ids = tok.encode_src([sentence])[0]
    batches = [pad([torch.tensor(ids) for ids in tok.encode_src([r["en"] for r in rows[:8]])])]
    tour.qkv_figure(model, maps, src_ids, tmp_path)
    tour.softmax_figure(model, maps, src_ids, tmp_path)
    tour.masks_figure(model, tok, maps, sentence, short, tmp_path)
    tour.split_figure(maps, tmp_path)
    tour.heads_figure(maps, tmp_path)
    tour.encoder_figure(maps, tmp_path)
    tour.roles_figure(maps, tmp_path)
    tour.words_figure(model, tok, maps, src_ids, tmp_path)
    tour.ffn_figure(model, batches, src_ids, maps.src_pieces, tmp_path)
    tour.scale_figure(model, batches, tmp_path)
    tour.notes_figure(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "encoder.png", "ffn.png", "heads.png", "masks.png", "notes.png", "qkv.png", "roles.png",
        "scale.png", "softmax.png", "split.png", "words.png"]
