"""Record the notebook's runs, so that every reveal of docs/tour.ipynb prints the reader's own
run beside them.

    python scripts/tour_record.py --seeds 1,2 --data ../shared/data/multi30k \
        -o docs/tour/recorded.json

Runs the notebook top to bottom once per seed (`TOUR_SEED`), at its own sizes, and keeps what
its last code cell prints: each experiment's figures (`reveal(...)`'s keyword arguments). With
`--toys-only` the English→German part (§9 on) is left out and the seeds keep the English→German
figures an earlier recording gave. The machine, the date and the toy models' seconds go with
them: a reader on a slower machine makes fewer steps in the same seconds.

Tests: tests/project/test_notebook.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from translate.hardware import cpu_name

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "docs/tour.ipynb"
RECORDED = REPO / "docs/tour/recorded.json"
OUTCOMES = re.compile(r"^outcomes: (\{.*\})$", re.M)
REAL_PART = "## 9."  # the English→German part's heading


def toys_only(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """`notebook` without its English→German part, its last code cell (the outcomes) kept."""
    cells = notebook.cells
    cut = next(i for i, c in enumerate(cells) if c.source.startswith(REAL_PART))
    last = max(i for i, c in enumerate(cells) if c.cell_type == "code")
    notebook.cells = cells[:cut] + [cells[last]]
    return notebook


def printed(notebook: nbformat.NotebookNode) -> str:
    """Everything the executed `notebook`'s code cells printed."""
    return "\n".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code"
                     for o in c.outputs)


def run_notebook(seed: int, runs: Path, data: str | None = None, tiny: bool = False,
                 toys: bool = False, timeout: int = 3600) -> tuple[nbformat.NotebookNode, dict]:
    """The notebook executed with `seed` (`tiny`: toy sizes, as the tests run it; `toys`: the
    toy part alone), its runs under `runs`; and the outcomes its last cell printed."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    if toys:
        notebook = toys_only(notebook)
    env = {"TOUR_SEED": str(seed), "TOUR_RUNS": str(runs), "TOUR_TINY": "1" if tiny else "0"}
    if data:  # the kernel runs in docs/: a relative folder is taken from here
        env["TRANSLATE_DATA"] = str(Path(data).resolve()) if Path(data).exists() else data
    saved = {key: os.environ.get(key) for key in [*env, "TOUR_MODEL"]}
    os.environ.update(env)
    os.environ.pop("TOUR_MODEL", None)
    try:  # the kernel inherits this process's environment
        NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(REPO / "docs")}}).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    found = OUTCOMES.findall(printed(notebook))
    if len(found) != 1:
        raise RuntimeError(f"the notebook printed {len(found)} outcome lines, not 1")
    return notebook, json.loads(found[0])


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                          capture_output=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--data", help="a local Multi30k folder (default: the notebook's choice)")
    parser.add_argument("--toys-only", action="store_true",
                        help="leave out the English→German part; keep its recorded figures")
    parser.add_argument("-o", "--out", type=Path, default=RECORDED)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    earlier = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    recorded = {"machine": f"{cpu_name()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
                "commit": commit(), "seconds": 20, "minutes": 4, "seeds": {}}
    for seed in seeds:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as runs:
            _, outcomes = run_notebook(seed, Path(runs), args.data, toys=args.toys_only)
        if args.toys_only:  # the English→German figures an earlier recording gave
            outcomes = {**earlier.get("seeds", {}).get(str(seed), {}), **outcomes}
        recorded["seeds"][str(seed)] = outcomes
        print(f"seed {seed}: {time.perf_counter() - start:.0f} s\n{json.dumps(outcomes, indent=1)}")
    args.out.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
