"""translate: encoder-decoder machine translation in PyTorch."""

from translate.config import Recipe, load_recipe
from translate.models import MODELS, RNNSeq2Seq, Seq2Seq, Transformer, build_model

__version__ = "0.1.0"
__all__ = ["MODELS", "RNNSeq2Seq", "Recipe", "Seq2Seq", "Transformer", "build_model", "load_recipe", "__version__"]
