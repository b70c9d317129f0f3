"""The package's import contracts (setup.cfg, [importlinter]): lower layers never import higher
ones, a step of the data path never imports a later one, the model code imports no tokenizer,
SentencePiece or fast engine, and only translate.engine imports the fast engine. And no import
circle between modules, imports inside functions included (grimp's graph, the one import-linter
checks the contracts on)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())"]  # `lint-imports`, with this interpreter


# Each import circle through a module's direct import, as "a -> b -> ... -> a"; grimp reads
# every import statement, those inside functions too.
CIRCLES = """
import grimp
graph = grimp.build_graph("translate", cache_dir=None)
for module in sorted(graph.modules):
    for imported in sorted(graph.find_modules_directly_imported_by(module)):
        back = graph.find_shortest_chain(importer=imported, imported=module)
        if back:
            print(" -> ".join((module, *back)))
"""


def lint(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the `translate` package and setup.cfg found in `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([*LINT, "--no-cache", "--config", str(root / "setup.cfg")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def package_copy(tmp_path) -> Path:
    """The package and its contracts copied where a test may edit them."""
    shutil.copytree(REPO / "translate", tmp_path / "translate",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "setup.cfg", tmp_path)
    return tmp_path


def import_circles(root: Path) -> list[str]:
    """The import circles between the modules of the `translate` package found in `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    result = subprocess.run([sys.executable, "-c", CIRCLES], cwd=root, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def add_import(module: Path, statement: str) -> None:
    with open(module, "a", encoding="utf-8") as f:
        f.write(f"\n{statement}  # noqa\n")


def test_the_package_keeps_its_import_contracts():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("lower, higher", [
    ("models/transformer.py", "translate.training"),
    ("data/read.py", "translate.cli"),
    ("tokenizer.py", "translate.analysis.compare"),
    ("search.py", "translate.evaluation"),
])
def test_a_lower_layer_importing_a_higher_one_breaks_the_layers(package_copy, lower, higher):
    module = ".".join(("translate", *Path(lower).with_suffix("").parts))
    add_import(package_copy / "translate" / lower, f"import {higher}")
    result = lint(package_copy)
    assert result.returncode == 1
    assert "Each layer imports only the layers below it BROKEN" in result.stdout
    assert f"{module} -> {higher}" in result.stdout


@pytest.mark.parametrize("earlier, later", [("read.py", "translate.data.clean"),
                                             ("encode.py", "translate.data.cache"),
                                             ("cache.py", "translate.data.batch")])
def test_a_step_of_the_data_path_importing_a_later_one_breaks_its_order(package_copy, earlier,
                                                                       later):
    add_import(package_copy / "translate/data" / earlier, f"import {later}")
    result = lint(package_copy)
    assert result.returncode == 1
    assert "Each step of the data path imports only the steps before it BROKEN" in result.stdout
    assert f"translate.data.{Path(earlier).stem} -> {later}" in result.stdout


def test_the_model_code_importing_sentencepiece_breaks_the_textbook_contract(package_copy):
    add_import(package_copy / "translate/models/attention.py", "import sentencepiece")
    result = lint(package_copy)
    assert result.returncode == 1
    assert "imports no tokenizer, SentencePiece or fast engine BROKEN" in result.stdout
    assert "translate.models.attention -> sentencepiece" in result.stdout


@pytest.mark.parametrize("module", ["training/loop.py", "inference.py", "serve/app.py"])
def test_importing_the_fast_engine_past_translate_engine_breaks_its_contract(package_copy,
                                                                            module):
    importer = ".".join(("translate", *Path(module).with_suffix("").parts))
    add_import(package_copy / "translate" / module, "import translate.fast.linear")
    result = lint(package_copy)
    assert result.returncode == 1
    assert "Only translate.engine imports the fast engine BROKEN" in result.stdout
    assert f"{importer} -> translate.fast.linear" in result.stdout


def test_no_module_imports_one_that_imports_it_back():
    """A circle makes the order of imports matter and hides which module is the lower one:
    none, not even through an import inside a function (which the layer contract lets pass
    between modules of one layer or one package)."""
    assert import_circles(REPO) == []


@pytest.mark.parametrize("module, statement, circle", [
    # checkpoint.py and run_folder.py formed one through a function's import until issue 52
    ("checkpoint.py", "def _owner():\n    from translate.run_folder import run_id",
     "translate.checkpoint -> translate.run_folder -> translate.checkpoint"),
    # one package: the layer contract does not look inside translate.export
    ("export/ct2.py", "from translate.export import export",
     "translate.export -> translate.export.ct2 -> translate.export"),
])
def test_an_import_circle_is_found(package_copy, module, statement, circle):
    add_import(package_copy / "translate" / module, statement)
    assert circle in import_circles(package_copy)


# What the recipe (translate.config) may import: itself and the floor of plain helpers below it.
RECIPE_MAY_IMPORT = ("translate.config", "translate.yaml_limits", "translate.paths")
RECIPE_IMPORTS = """
import grimp
graph = grimp.build_graph("translate", cache_dir=None)
for module in sorted(m for m in graph.modules if m.startswith("translate.config")):
    for imported in sorted(graph.find_modules_directly_imported_by(module)):
        if imported.startswith("translate"):
            print(module, imported)
"""


def recipe_imports(root: Path) -> list[tuple[str, str]]:
    """(recipe module, module of `translate` it imports) for every such import in `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    result = subprocess.run([sys.executable, "-c", RECIPE_IMPORTS], cwd=root, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [tuple(line.split()) for line in result.stdout.splitlines()]


def runtime_imports(root: Path) -> list[tuple[str, str]]:
    return [(module, imported) for module, imported in recipe_imports(root)
            if not imported.startswith(RECIPE_MAY_IMPORT)]


def test_the_recipe_imports_no_runtime_module():
    """The engines', precisions' and activations' names live in translate.config.names and the
    model configs in translate.config.models: the runtime imports the recipe, never back."""
    imports = recipe_imports(REPO)
    assert ("translate.config.schema", "translate.config.names") in imports
    assert runtime_imports(REPO) == []


@pytest.mark.parametrize("module, statement", [
    ("config/schema.py", "from translate.engine import ENGINES"),
    ("config/models.py", "from translate.models.transformer import ACTIVATIONS"),
    ("config/loader.py", "import translate.hardware"),
])
def test_a_recipe_module_importing_a_runtime_one_is_found(package_copy, module, statement):
    add_import(package_copy / "translate" / module, statement)
    importer = ".".join(("translate", *Path(module).with_suffix("").parts))
    assert [m for m, _ in runtime_imports(package_copy)] == [importer]
