"""translate: encoder-decoder machine translation in PyTorch.

The names below load on first use, so that importing one light module (as the encoding worker
processes do with `translate.data.encode`) does not import torch and the models.
"""

import importlib

__version__ = "0.1.0"
_LAZY = {"Translator": "translate.api",
         "Recipe": "translate.config", "load_recipe": "translate.config",
         "MODELS": "translate.models", "RNNSeq2Seq": "translate.models",
         "Seq2Seq": "translate.models", "Transformer": "translate.models",
         "build_model": "translate.models"}
__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'translate' has no attribute {name!r}")
