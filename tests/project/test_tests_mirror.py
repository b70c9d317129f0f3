"""The tests mirror the package's rooms, so a reader finds a module's tests where the module
lives: a top-level tests/test_X.py tests translate/X.py (or the package translate/X/), a folder
tests/X/ the subpackage translate/X/, except the folders that hold no room's tests (NOT_ROOMS);
and no two test files share a name, which pytest (test folders without __init__.py) needs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "translate"
NOT_ROOMS = {
    "helpers": "what the tests import (conftest.py holds the fixtures and hooks)",
    "project": "tests of the project as a whole: docs, layers, notebooks, scripts, the suite",
    "benchmarks": "tests of the scripts in benchmarks/",
    "reliability": "hostile input, a room at a time: test_<room>_input.py and the like",
}
TOP_LEVEL = {"conftest.py"}  # the only files at the top besides test_X.py


def misplaced(tests: Path, package: Path) -> list[str]:
    """What breaks the mirror under `tests`, against the package at `package`, a line each."""
    found = []
    for path in sorted(tests.iterdir()):
        name = path.name
        if name.startswith((".", "__")):
            continue  # caches
        if path.is_dir():
            if name not in NOT_ROOMS and not (package / name / "__init__.py").is_file():
                found.append(f"tests/{name}/: no package translate/{name}/ (a room's tests go in "
                             "the folder of its name)")
        elif name.startswith("test_") and name.endswith(".py"):
            module = name[len("test_"):-len(".py")]
            if not (package / f"{module}.py").is_file() and \
                    not (package / module / "__init__.py").is_file():
                found.append(f"tests/{name}: no translate/{module}.py or translate/{module}/ "
                             "(move it to the folder of the room it tests)")
        elif name.endswith(".py") and name not in TOP_LEVEL:
            found.append(f"tests/{name}: a helper goes in tests/helpers/, a fixture in "
                         "conftest.py")
    by_name = defaultdict(list)
    for path in tests.rglob("test_*.py"):
        if "__pycache__" not in path.parts:
            by_name[path.name].append(path.relative_to(tests.parent).as_posix())
    found += [f"{name}: {' and '.join(sorted(paths))} share a name"
              for name, paths in sorted(by_name.items()) if len(paths) > 1]
    return found


def test_the_tests_mirror_the_package():
    assert misplaced(TESTS, PACKAGE) == []


def test_a_misplaced_test_file_is_named(tmp_path):
    """A copy of the layout with a test of no module, a folder of no room, a helper at the top
    and two files of one name: each is named; the copy as it is passes."""
    tests, package = tmp_path / "tests", tmp_path / "translate"
    for folder in ("data", "project"):
        (tests / folder).mkdir(parents=True)
    (package / "data").mkdir(parents=True)
    for file in ("translate/__init__.py", "translate/data/__init__.py", "translate/search.py",
                 "tests/conftest.py", "tests/test_search.py", "tests/data/test_read.py",
                 "tests/project/test_tour.py"):
        (tmp_path / file).touch()
    assert misplaced(tests, package) == []
    (tests / "test_batching.py").touch()
    (tests / "gpu_path").mkdir()
    (tests / "gpu_path/test_chunked_loss.py").touch()
    (tests / "limits.py").touch()
    (tests / "project/test_read.py").touch()
    assert misplaced(tests, package) == [
        "tests/gpu_path/: no package translate/gpu_path/ (a room's tests go in the folder of "
        "its name)",
        "tests/limits.py: a helper goes in tests/helpers/, a fixture in conftest.py",
        "tests/test_batching.py: no translate/batching.py or translate/batching/ (move it to the "
        "folder of the room it tests)",
        "test_read.py: tests/data/test_read.py and tests/project/test_read.py share a name"]


def untested(package: Path, tests: Path) -> list[str]:
    """Each module of the package with neither its test file (translate/X.py: tests/test_X.py,
    translate/P/M.py: tests/P/test_M.py) nor a docstring line "Tests: FILE, ..." whose files
    all exist; a line each."""
    import ast
    import re

    found = []
    for module in sorted(package.rglob("*.py")):
        if module.name == "__init__.py" or "__pycache__" in module.parts:
            continue  # a package's map; its folder of tests is checked above
        rel = module.relative_to(package)
        own = tests.joinpath(*rel.parts[:-1], f"test_{module.stem}.py")
        if own.is_file():
            continue
        doc = ast.get_docstring(ast.parse(module.read_text(encoding="utf-8"))) or ""
        named = re.findall(r"tests/[\w/]+\.py", doc.split("Tests:", 1)[1]) if "Tests:" in doc \
            else []
        if not named:
            found.append(f"{package.name}/{rel.as_posix()}: no {own.relative_to(tests.parent)}"
                         f" and no \"Tests:\" line in its docstring")
        found += [f"{package.name}/{rel.as_posix()}: its Tests: line names {name}, which is not "
                  f"there" for name in named if not (tests.parent / name).is_file()]
    return found


def test_every_module_has_its_tests_or_says_where_they_are():
    assert untested(PACKAGE, TESTS) == []


def test_a_module_without_tests_is_named(tmp_path):
    package, tests = tmp_path / "translate", tmp_path / "tests"
    (package / "data").mkdir(parents=True)
    tests.mkdir()
    (package / "search.py").write_text('"""Search."""\n')
    (tests / "test_search.py").touch()
    (package / "data/read.py").write_text('"""Read.\n\nTests: tests/test_search.py."""\n')
    assert untested(package, tests) == []
    (package / "loss.py").write_text('"""The loss."""\n')
    (package / "data/batch.py").write_text('"""Batch.\n\nTests: tests/data/test_gone.py."""\n')
    assert untested(package, tests) == [
        "translate/data/batch.py: its Tests: line names tests/data/test_gone.py, which is not "
        "there",
        "translate/loss.py: no tests/test_loss.py and no \"Tests:\" line in its docstring"]
