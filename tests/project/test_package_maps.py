"""Each package's `__init__` docstring is its map: it names every module file of the package (and
every subpackage), so a reader finds each file's job in one place, and a file added without a
line in the map fails here."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "translate"
# Maps still to be written, each with its reason; the mark is strict, so a completed map fails
# here until its entry goes.
PENDING: dict[str, str] = {}


def packages() -> list[Path]:
    return sorted(init.parent for init in PACKAGE.rglob("__init__.py")
                  if "__pycache__" not in init.parts)


def unnamed(package: Path) -> list[str]:
    """The module files (`name.py`) and subpackages (`name/`) of `package` that its `__init__`
    docstring does not name: as `name.py` or `` `name` `` (a module), or `name/`."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    doc = doc or ""
    missing = []
    for path in sorted(package.iterdir()):
        if path.suffix == ".py" and path.name != "__init__.py":
            stem = re.escape(path.stem)  # not inside a longer name: loss.py in batch_loss.py
            if not re.search(rf"(?<![\w.]){stem}\.py\b|`{stem}`", doc):
                missing.append(path.name)
        elif path.is_dir() and (path / "__init__.py").is_file():
            if not re.search(rf"(?<![\w./]){re.escape(path.name)}/", doc):
                missing.append(f"{path.name}/")
    return missing


def cases() -> list:
    """Each package, named as its folder; those PENDING marked to fail."""
    found = []
    for path in packages():
        name = path.relative_to(PACKAGE.parent).as_posix()
        marks = [pytest.mark.xfail(strict=True, reason=PENDING[name])] if name in PENDING else []
        found.append(pytest.param(path, marks=marks, id=name))
    return found


@pytest.mark.parametrize("package", cases())
def test_the_packages_docstring_names_each_of_its_files(package):
    assert unnamed(package) == [], f"add a line for each to {package}/__init__.py's docstring"


def test_the_check_sees_a_missing_file_and_no_prefix_as_a_name(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("__init__.py", "loss.py", "batch_loss.py", "read.py", "sub/__init__.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "__init__.py").write_text('"""The map.\n\n    batch_loss.py  the loss\n"""\n')
    assert unnamed(tmp_path) == ["loss.py", "read.py", "sub/"]
    (tmp_path / "__init__.py").write_text('"""`read`, loss.py and sub/ too; batch_loss.py."""\n')
    assert unnamed(tmp_path) == []
