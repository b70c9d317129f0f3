"""/attention's answer: one sentence's attention maps as JSON, every weight in a compact string.

Shapes: H heads, S source pieces, T target pieces.

Tests: tests/serve/test_app.py, tests/serve/test_browser.py.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import torch

from translate.alignment import Reading, read_map, word_index, word_links
from translate.analysis.attention import AttentionMaps
from translate.models.attention import DECODER_SELF, ENCODER_SELF


def attention_json(maps: AttentionMaps, arch: str) -> dict[str, Any]:
    """Token labels and every module's weights, (H, T_query, T_key), with the labels of its
    axes: `queries` and `keys` name one of the three piece lists. The weights are base64 of
    little-endian uint16, each weight x 65535 rounded (to 1.5e-5): about a third of the size of
    JSON numbers rounded to 4 places, and one string to decode (`decode_weights`). `forced`
    says whether the translation was given (and fed to the decoder) rather than searched."""
    modules = []
    for name, w in maps.weights.items():
        role, layer = maps.roles[name]
        if role == ENCODER_SELF:
            queries = keys = "src_pieces"
        elif role == DECODER_SELF:
            queries = keys = "tgt_in_pieces"
        else:  # cross-attention and the RNN's alignment: each output piece over the source
            queries, keys = "out_pieces", "src_pieces"
        modules.append({"name": name, "role": role, "layer": layer, "queries": queries,
                        "keys": keys, "shape": list(w.shape), "weights": encode_weights(w)})
    return {"translation": maps.translation, "forced": maps.forced, "model": arch,
            "src_pieces": maps.src_pieces, "tgt_in_pieces": maps.tgt_in_pieces,
            "out_pieces": maps.out_pieces, "modules": modules,
            "alignment": alignment_json(maps)}


def alignment_json(maps: AttentionMaps, reading: Reading = Reading()) -> dict[str, Any]:
    """The translation's word alignment as `translate decode --alignments` reads it: `links`
    ([source word, output word] from 0), the word of each source and output piece (-1 for EOS)
    so that the page can outline the cells of linked words, and the cross-attention `layer`
    read (from 0; None for the RNN's one map)."""
    cross = sorted((n for n in maps.weights if maps.roles[n][0] not in (ENCODER_SELF,
                                                                        DECODER_SELF)),
                   key=lambda n: maps.roles[n][1])
    weights = torch.stack([maps.weights[n] for n in cross])  # (L, H, T, S)
    out_pieces = maps.tgt_in_pieces[1:]  # the output without BOS or EOS: T - 1 pieces
    links = word_links(read_map(weights, reading), maps.src_pieces, out_pieces, reading.shift,
                       reading.each)
    layers = weights.size(0)
    single = layers == 1 and weights.size(1) == 1
    return {"reading": reading.describe() if not single else "the attention",
            "layer": None if single else reading.layer % layers,
            "links": [list(link) for link in links],
            "src_words": word_index(maps.src_pieces[:-1]) + [-1],
            "out_words": word_index(out_pieces) + [-1] * (len(maps.out_pieces) - len(out_pieces))}


def encode_weights(weights: torch.Tensor) -> str:
    """(..., T, S) weights in [0, 1] -> base64 of little-endian uint16 values, weight x 65535."""
    scaled = weights.detach().float().clamp(0, 1).mul(65535).round().to(torch.int32)
    return base64.b64encode(scaled.numpy().astype("<u2").tobytes()).decode("ascii")


def decode_weights(text: str, shape: list[int]) -> torch.Tensor:
    """What `encode_weights` wrote, as float32 weights of `shape`."""
    values = np.frombuffer(base64.b64decode(text), dtype="<u2").astype(np.float32) / 65535
    return torch.from_numpy(values.reshape(shape))
