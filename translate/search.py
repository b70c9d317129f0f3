"""Search: turn a model's step-wise distributions into output sequences.

Every model offers `encode(src) -> memory` and `decode(tgt_in, memory, state) -> (logits, state)`;
search never looks inside either. Shapes: B batch, S source length, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn

from translate.tokenizer import BOS, EOS, PAD


def max_output_length(src: torch.Tensor, a: float, b: int, limit: int) -> int:
    """a * (longest source in the batch) + b, capped at the model's position limit."""
    longest = int((src != PAD).sum(dim=1).max())
    return max(1, min(int(a * longest + b), limit))


@torch.no_grad()
def greedy_search(model: nn.Module, src: torch.Tensor, max_len: int, use_cache: bool = True
                  ) -> list[list[int]]:
    """Pick the most probable token at each step until EOS or `max_len` tokens.

    Args:
        src: (B, S) source ids.
        use_cache: feed one token per step with the model's incremental state; without it the
            whole prefix is recomputed every step (slow; kept to test the cache against).

    Returns:
        B lists of token ids, EOS excluded.
    """
    B = src.size(0)
    memory = model.encode(src)
    tokens = torch.full((B, 1), BOS, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    state = model.init_state(memory) if use_cache else None
    for _ in range(max_len):
        step_in = tokens[:, -1:] if use_cache else tokens
        logits, state = model.decode(step_in, memory, state)  # (B, t, V)
        next_token = logits[:, -1].argmax(dim=-1)  # (B,)
        next_token = next_token.masked_fill(finished, PAD)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= next_token == EOS
        if bool(finished.all()):
            break
    out = []
    for row in tokens[:, 1:].tolist():
        out.append(row[: row.index(EOS)] if EOS in row else [t for t in row if t != PAD])
    return out
