"""The special token ids every vocabulary here uses (SentencePiece models are trained with them).

Kept apart from `translate.tokenizer` so that models and search, which need only these four
numbers, do not import SentencePiece.

Tests: tests/test_tokenizer.py, tests/test_search.py.
"""

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL_IDS = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}
