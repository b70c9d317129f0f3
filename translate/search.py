"""Search: turn a model's step-wise distributions into output sequences.

Every model offers `encode(src) -> memory`, `init_state(memory) -> state` and
`decode(tgt_in, memory, state) -> (logits, state)`; its memory and state offer
`index_select(rows)`, and the state `reorder_beams(rows)` for a reordering that keeps every row
within its sentence (so per-sentence parts of the cache need not move). Search never looks further
inside. Beam search uses exactly that: encode once, step with the cache, reorder the cache by beam.

Shapes: B batch, S source length, K beam size, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from translate.tokenizer import BOS, EOS, PAD


@dataclass
class Hypothesis:
    tokens: list[int]  # EOS excluded
    score: float  # what the beam ranks by: logprob / length_penalty(len(tokens) + 1)
    logprob: float  # sum of the tokens' log-probabilities, EOS included


def max_output_length(src: torch.Tensor, a: float, b: int, limit: int) -> int:
    """a * (longest source in the batch) + b, capped at the model's position limit."""
    return int(output_limits(src, a, b, limit).max())


def output_limits(src: torch.Tensor, a: float, b: int, limit: int) -> torch.Tensor:
    """(B,) most tokens each sentence may get (EOS excluded): a * |src| + b, capped at `limit`."""
    lengths = (src != PAD).sum(dim=1)
    return (a * lengths + b).long().clamp(min=1, max=limit)


def length_penalty(length: int | torch.Tensor, alpha: float):
    """GNMT's ((5 + length) / 6) ** alpha (Wu et al., 2016); alpha = 0 ranks by log-probability."""
    return ((5 + length) / 6) ** alpha


def _limits(max_len: int | torch.Tensor, batch: int, device) -> torch.Tensor:
    if isinstance(max_len, torch.Tensor):
        return max_len.to(device)
    return torch.full((batch,), int(max_len), device=device)


def _step_log_probs(model: nn.Module, last: torch.Tensor, memory, state):
    """One decoder step: (N, 1) newest tokens -> (N, V) fp32 log-probs, PAD and BOS ruled out."""
    logits, state = model.decode(last, memory, state)
    log_probs = F.log_softmax(logits[:, -1].float(), dim=-1)  # (N, V)
    log_probs[:, PAD] = log_probs[:, BOS] = float("-inf")
    return log_probs, state


@torch.no_grad()
def greedy_search(model: nn.Module, src: torch.Tensor, max_len: int | torch.Tensor,
                  use_cache: bool = True) -> list[list[int]]:
    """Pick the most probable token at each step until EOS or the length limit.

    The fast path of `beam_search(..., beam=1)`, which gives the same tokens.

    Args:
        src: (B, S) source ids.
        max_len: most tokens per sentence (EOS excluded): one int or a (B,) tensor.
        use_cache: feed one token per step with the model's incremental state; without it the
            whole prefix is recomputed every step (slow; kept to test the cache against).

    Returns:
        B lists of token ids, EOS excluded.
    """
    B = src.size(0)
    limits = _limits(max_len, B, src.device)
    memory = model.encode(src)
    tokens = torch.full((B, 1), BOS, dtype=torch.long, device=src.device)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    state = model.init_state(memory) if use_cache else None
    for step in range(1, int(limits.max()) + 1):
        if use_cache:
            logits, state = model.decode(tokens[:, -1:], memory, state)  # (B, 1, V)
        else:
            logits, _ = model.decode(tokens, memory)  # (B, t, V), the prefix from scratch
        logits = logits[:, -1]
        logits[:, PAD] = logits[:, BOS] = float("-inf")
        next_token = logits.argmax(dim=-1).masked_fill(finished, PAD)  # (B,)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= (next_token == EOS) | (limits <= step)
        if bool(finished.all()):
            break
    out = []
    for row in tokens[:, 1:].tolist():
        out.append(row[: row.index(EOS)] if EOS in row else [t for t in row if t != PAD])
    return out


@torch.no_grad()
def beam_search(model: nn.Module, src: torch.Tensor, beam: int, max_len: int | torch.Tensor,
                lenpen: float = 0.6, nbest: int = 1) -> list[list[Hypothesis]]:
    """Batched beam search with GNMT length penalty.

    Each step takes the 2K best continuations of every sentence's K beams: those ending in EOS
    among the top K are finished; the K best others go on. A sentence is done when it has K
    finished hypotheses, or at its length limit (where only EOS is allowed); done sentences leave
    the batch, so the rest decode faster.

    Args:
        src: (B, S) source ids.
        beam: beam size K.
        max_len: most tokens per sentence (EOS excluded): one int or a (B,) tensor.
        lenpen: GNMT alpha; hypotheses rank by logprob / ((5 + length) / 6) ** alpha.
        nbest: hypotheses returned per sentence (<= beam), best first.

    Returns:
        B lists of `nbest` Hypothesis, sorted by score, all distinct.
    """
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest must be between 1 and the beam size ({beam}), got {nbest}")
    B, K, device = src.size(0), beam, src.device
    limits = _limits(max_len, B, device)  # (B,)
    rows = torch.arange(B, device=device).repeat_interleave(K)  # (B*K,) each beam's sentence
    memory = model.encode(src).index_select(rows)
    state = model.init_state(memory)
    tokens = torch.full((B * K, 1), BOS, dtype=torch.long, device=device)  # (N, t), N = live*K
    scores = torch.zeros(B, K, device=device)
    scores[:, 1:] = float("-inf")  # all beams start equal: keep one
    sentence = torch.arange(B, device=device)  # (live,) original index of each live sentence
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    n_finished = torch.zeros(B, dtype=torch.long, device=device)

    for step in range(1, int(limits.max()) + 2):
        log_probs, state = _step_log_probs(model, tokens[:, -1:], memory, state)  # (N, V)
        V = log_probs.size(-1)
        at_limit = (limits[sentence] < step).repeat_interleave(K)  # (N,) past the limit: EOS only
        if bool(at_limit.any()):
            eos_only = torch.full_like(log_probs[0], float("-inf"))
            eos_only[EOS] = 0.0
            log_probs[at_limit] = log_probs[at_limit] + eos_only
        candidates = (scores.view(-1, 1) + log_probs).view(-1, K * V)  # (live, K*V)
        top_scores, top_index = candidates.topk(2 * K, dim=1)  # (live, 2K)
        top_beam, top_token = top_index // V, top_index % V

        # EOS among each sentence's K best candidates: a finished hypothesis
        is_eos = (top_token == EOS) & torch.isfinite(top_scores)
        penalty = length_penalty(step, lenpen)
        for i, j in is_eos[:, :K].nonzero().tolist():
            s = int(sentence[i])
            if len(finished[s]) < K:
                prefix = tokens[i * K + int(top_beam[i, j]), 1:].tolist()
                logprob = float(top_scores[i, j])
                finished[s].append(Hypothesis(prefix, logprob / penalty, logprob))
                n_finished[s] += 1

        # the K best non-EOS candidates go on
        go_on = top_scores.masked_fill(is_eos, float("-inf"))
        scores, pick = go_on.topk(K, dim=1)  # (live, K), (live, K) positions in the 2K
        parent = (torch.arange(len(sentence), device=device)[:, None] * K
                  + top_beam.gather(1, pick)).view(-1)  # (N,)
        tokens = torch.cat([tokens[parent], top_token.gather(1, pick).view(-1, 1)], dim=1)
        state = state.reorder_beams(parent)

        done = (n_finished[sentence] >= K) | (limits[sentence] < step)  # (live,)
        if bool(done.all()):
            break
        if bool(done.any()):  # drop finished sentences from the batch
            live = (~done).nonzero().squeeze(1)  # (live',)
            live_rows = (live[:, None] * K + torch.arange(K, device=device)).view(-1)
            sentence, scores = sentence[live], scores[live]
            tokens = tokens[live_rows]
            memory, state = memory.index_select(live_rows), state.index_select(live_rows)

    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finished]
