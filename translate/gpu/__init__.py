"""The GPU path: the textbook model run the way a GPU wants it, beside the textbook code.

A GPU runs ahead of the Python that feeds it, as long as nothing asks it for a value: every
`.item()`, `.tolist()` or boolean mask makes the host wait until the device has caught up, and a
small model's decoding step is then mostly waiting. And its memory, not its speed, caps the batch
of a model with a large vocabulary, whose (B, T, V) logits outgrow everything else. So:

    search.py   beam search whose loop reads nothing from the device but one flag every few
                steps (the engine `gpu`: `--engine gpu`, `train.engine: gpu`)
    loss.py     a loss that projects the decoder's states to the vocabulary a chunk of rows at
                a time and never holds the (B, T, V) logits (`train.loss_chunk`)

Both run on any device. The tests check them against the textbook code on the CPU
(tests/gpu/), and tests/gpu/test_on_cuda.py on CUDA.
"""

from __future__ import annotations

from translate.gpu.loss import chunked_cross_entropy
from translate.gpu.search import beam_search, greedy_search

__all__ = ["beam_search", "chunked_cross_entropy", "greedy_search"]
