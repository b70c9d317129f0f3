"""What every export format refuses with (`ExportError`), and the models the peer formats'
converters (ctranslate2, hf) take (`transformer_only`).

A module of its own below the package's `export()`, which imports the converters: the
converters import these from here, so no module of translate.export imports one that imports
it back.
"""

from __future__ import annotations

from torch import nn

from translate.models.transformer import Transformer


class ExportError(ValueError):
    """A model or an option the chosen format cannot take; the message says why."""


# Transformer options the peer formats' converters do not write, with the value each refuses:
# Pegasus (hf) has neither rotary positions nor QK-norm, and the CTranslate2 spec written here is
# the encoder-decoder one with position tables added to the embeddings and plain attention.
UNCONVERTED = {"positions": "rope", "qk_norm": True}


def transformer_only(model: nn.Module, fmt: str) -> Transformer:
    """`model`, if the peer format `fmt` can hold it: the Transformer, not the RNN, without the
    options in UNCONVERTED."""
    if not isinstance(model, Transformer):
        raise ExportError(f"--format {fmt} converts only the Transformer: {fmt} has no "
                          f"counterpart for the RNN's recurrent layers, additive attention and "
                          f"maxout output; export the RNN with --format inference")
    options = [f"model.{key}: {str(value).lower()}" for key, value in UNCONVERTED.items()
               if getattr(model.cfg, key) == value]
    if options:
        raise ExportError(f"--format {fmt} converts a Transformer with positions added to its "
                          f"embeddings and plain attention; this model has {', '.join(options)}: "
                          f"export it with --format inference")
    return model
