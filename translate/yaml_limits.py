"""YAML read with bounded work: recipes, tokenizer specs and `--set` values.

PyYAML's safe loader never builds Python objects, but it does expand aliases: nine anchors
that each refer to the previous one nine times (a "billion laughs" recipe) become 9^9 values,
minutes and gigabytes later. Deep nesting (`[[[[...]]]]`) exhausts its recursive composer.
So a text is first read as a stream of events, which costs time linear in its size and builds
nothing: the number of values it would expand to and its nesting depth are counted, and past
the limits it is refused before anything is expanded.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 1 << 20  # a recipe is a few kB
MAX_VALUES = 100_000  # scalars and collections after aliases are expanded
MAX_DEPTH = 32


class YamlLimitError(ValueError):
    """YAML that would take unbounded work to load."""


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
    """`yaml.safe_load(text)` once `check_bounded` passes."""
    check_bounded(text, where)
    return yaml.safe_load(text)
