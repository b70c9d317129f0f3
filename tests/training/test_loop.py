"""The Trainer holds what its loop reads and no more: each attribute it sets, one of its methods
reads (what the test splits' decode needs is handed to `training.run.test_scores`, not carried
here), and the class stays short enough to read at once."""

import ast
from pathlib import Path

LOOP = Path(__file__).resolve().parents[2] / "translate/training/loop.py"
MOST_LINES = 150


def class_named(source: str, name: str) -> ast.ClassDef:
    return next(node for node in ast.parse(source).body
                if isinstance(node, ast.ClassDef) and node.name == name)


def unread(cls: ast.ClassDef) -> set[str]:
    """The names X the class's methods set (`self.X = ...`) and never read (`self.X`)."""
    def named(ctx: type) -> set[str]:
        return {node.attr for node in ast.walk(cls)
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ctx)
                and isinstance(node.value, ast.Name) and node.value.id == "self"}
    return named(ast.Store) - named(ast.Load)


def test_the_trainer_reads_every_attribute_it_sets():
    trainer = class_named(LOOP.read_text(encoding="utf-8"), "Trainer")
    assert unread(trainer) == set(), "pass what others need to them; the Trainer is no carrier"


def test_the_trainer_class_is_at_most_150_lines():
    trainer = class_named(LOOP.read_text(encoding="utf-8"), "Trainer")
    lines = trainer.end_lineno - trainer.lineno + 1
    assert lines <= MOST_LINES, f"the Trainer has {lines} lines, over {MOST_LINES}"


def test_the_scan_sees_an_attribute_set_and_never_read():
    source = ("class T:\n"
              "    def __init__(self, a):\n"
              "        self.a, self.b = a, 1\n"
              "        self.c = self.a.d = 2\n"
              "    def run(self):\n"
              "        return self.a + self.c\n")
    assert unread(class_named(source, "T")) == {"b"}
