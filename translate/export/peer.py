"""What every export format refuses with (`ExportError`), and the models the peer formats'
converters (ctranslate2, hf) take (`transformer_only`).

A module of its own below the package's `export()`, which imports the converters: the
converters import these from here, so no module of translate.export imports one that imports
it back.

Tests: tests/export/test_export_cli.py, tests/export/test_ctranslate2.py.
"""

from __future__ import annotations

from torch import nn

from translate.models.transformer import Transformer


class ExportError(ValueError):
    """A model or an option the chosen format cannot take; the message says why."""


# Transformer options each peer format's converter does not write, with the value it refuses:
# hf holds each (its own modeling file computes what Pegasus cannot). CTranslate2 holds rotary
# self-attention and QK-norm (ct2.py writes them; its cross-attention queries normalised over
# the width, which ct2.py checks the model's are).
UNCONVERTED = {"hf": {},
               "ctranslate2": {}}
WHY = {"hf": "",
       "ctranslate2": ""}


def transformer_only(model: nn.Module, fmt: str) -> Transformer:
    """`model`, if the peer format `fmt` can hold it: the Transformer, not the RNN, without the
    options UNCONVERTED lists for `fmt`."""
    if not isinstance(model, Transformer):
        raise ExportError(f"--format {fmt} converts only the Transformer: {fmt} has no "
                          f"counterpart for the RNN's recurrent layers, additive attention and "
                          f"maxout output; export the RNN with --format inference")
    options = [f"model.{key}: {str(value).lower()}" for key, value in UNCONVERTED[fmt].items()
               if getattr(model.cfg, key) == value]
    if options:
        raise ExportError(f"--format {fmt} cannot hold {', '.join(options)} ({WHY[fmt]}): "
                          f"export it with --format inference")
    return model
