"""translate: encoder-decoder machine translation in PyTorch."""

from translate.config import Recipe, load_recipe
from translate.models import MODELS, build_model
from translate.models.rnn import RNNSeq2Seq
from translate.models.transformer import Transformer

__version__ = "0.1.0"
__all__ = ["MODELS", "RNNSeq2Seq", "Recipe", "Transformer", "build_model", "load_recipe", "__version__"]
