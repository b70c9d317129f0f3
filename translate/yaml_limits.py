"""YAML read with bounded work: recipes, tokenizer specs and `--set` values.

PyYAML's safe loader never builds Python objects, but it does expand aliases: nine anchors
that each refer to the previous one nine times (a "billion laughs" recipe) become 9^9 values,
minutes and gigabytes later. Deep nesting (`[[[[...]]]]`) exhausts its recursive composer.
So a text is first read as a stream of events, which costs time linear in its size and builds
nothing: the number of values it would expand to and its nesting depth are counted, and past
the limits it is refused before anything is expanded.

A key given twice in one mapping is refused by name, with both lines: YAML's loaders keep the
last silently, so a second `train:` section would drop the first without a word. (Keys merged in
with `<<: *anchor` are overridden by the mapping's own, as YAML means them to be.)

Tests: tests/reliability/test_hostile_input.py, tests/reliability/test_resume_adoption.py.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 1 << 20  # a recipe is a few kB
MAX_VALUES = 100_000  # scalars and collections after aliases are expanded
MAX_DEPTH = 32


class YamlRefusedError(ValueError):
    """YAML that is refused before it is used; the message names the text and the problem."""


class YamlLimitError(YamlRefusedError):
    """YAML that would take unbounded work to load."""


class DuplicateKeyError(YamlRefusedError):
    """A mapping that gives one key twice."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, refusing a mapping that gives a key twice."""

    where = "YAML"

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                key = repr(key) if not isinstance(key, (str, int, float, bool, type(None))) else key
                if key in seen:
                    raise DuplicateKeyError(f"{self.where}: the key {key!r} is given twice in one "
                                            f"mapping (lines {seen[key]} and "
                                            f"{key_node.start_mark.line + 1}); keep one")
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def check_bounded(text: str, where: str) -> None:
    """Refuse `text` if it is too long, would expand past MAX_VALUES values or nests deeper
    than MAX_DEPTH. Syntax errors are left for the loader to report."""
    if len(text) > MAX_BYTES:
        raise YamlLimitError(f"{where}: {len(text):,} characters, over the limit of "
                             f"{MAX_BYTES:,} for a recipe")
    counts = [0]  # values so far in each open collection (the outermost: the document)
    anchors: dict[str, int] = {}  # anchor -> values it expands to
    open_anchors: list[str | None] = []
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                counts.append(1)
                open_anchors.append(event.anchor)
                if len(counts) - 1 > MAX_DEPTH:
                    raise YamlLimitError(f"{where}: nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                size, anchor = counts.pop(), open_anchors.pop()
                if anchor is not None:
                    anchors[anchor] = size
                counts[-1] += size
            elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
                size = 1 if isinstance(event, yaml.ScalarEvent) else anchors.get(event.anchor, 1)
                if isinstance(event, yaml.ScalarEvent) and event.anchor is not None:
                    anchors[event.anchor] = 1
                counts[-1] += size
            if sum(counts) > MAX_VALUES:
                raise YamlLimitError(f"{where}: expands to more than {MAX_VALUES:,} values "
                                     f"(aliases of aliases?); a recipe needs a few hundred")
    except yaml.YAMLError:
        return  # the loader reports it, with its line and column


def safe_load(text: str, where: str) -> Any:
    """`yaml.safe_load(text)` once `check_bounded` passes, refusing duplicate keys."""
    check_bounded(text, where)
    loader = _UniqueKeyLoader(text)
    loader.where = where
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
