"""Search: turn a model's step-wise distributions into output sequences.

Every model offers `encode(src) -> memory` (a row per sentence), `init_state(memory) -> state`
(a row per sentence) and `decode(tgt_in, memory, state) -> (logits, state)`, where
each run of `beam` rows of `tgt_in` decodes against one memory row, so the memory is never
copied per beam. The memory offers `index_select(sentences)`; the state `reorder_beams(rows)`, a
reordering that keeps every row within its sentence, and `select(rows, sentences)`, which keeps
some sentences and their rows. Search never looks further inside. Beam search uses exactly that:
encode once, step with the cache, reorder the cache by beam.

Shapes: B batch, S source length, K beam size, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from translate.tokenizer import BOS, EOS, PAD

LOG2_E = 1 / math.log(2)
assert PAD < BOS, "never_output() slices the columns from PAD to BOS"


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


def never_output(logits: torch.Tensor) -> torch.Tensor:
    """The (N, 2) columns of PAD and BOS in (N, V) logits, a view: no output may hold them."""
    return logits[:, PAD: BOS + 1: BOS - PAD]


def _limits(max_len: int | torch.Tensor, batch: int, device) -> torch.Tensor:
    if isinstance(max_len, torch.Tensor):
        return max_len.to(device)
    return torch.full((batch,), int(max_len), device=device)


def _step_candidates(model: nn.Module, last: torch.Tensor, memory, state, k: int,
                     eos_only: torch.Tensor | None = None):
    """One decoder step: each row's k most probable next tokens, PAD and BOS ruled out.

    Ranking the logits needs no normalization, so the top k come straight from them; only the k
    winners are turned into log-probs. Rows flagged `eos_only` may only end (their other
    candidates score -inf).

    Args:
        last: (N, 1) newest tokens.
        eos_only: (N,) rows at their length limit, or None when there are none.

    Returns:
        (N, k) fp32 log-probs, (N, k) token ids, and the new state.
    """
    logits, state = model.decode(last, memory, state)
    logits = logits[:, -1].float()  # (N, V)
    ruled = never_output(logits)  # (N, 2) a view
    ruled_out = ruled.clone()  # kept for the normalizer
    ruled.fill_(float("-inf"))
    top_logits, top_tokens = topk_rows(logits, min(k, logits.size(-1)))  # (N, k)
    row_max = top_logits[:, :1]  # (N, 1) over the allowed tokens
    if eos_only is not None:  # EOS is their one candidate
        row_max = row_max.clone()
        top_logits[eos_only] = float("-inf")
        top_logits[eos_only, 0] = logits[eos_only, EOS]
        top_tokens[eos_only, 0] = EOS
    ruled.copy_(ruled_out)
    return top_logits - _log_normalizer(logits, row_max, ruled_out), top_tokens, state


def _log_normalizer(logits: torch.Tensor, top: torch.Tensor, ruled_out: torch.Tensor
                    ) -> torch.Tensor:
    """(N, 1) log-sum-exp of each row of (N, V) logits, given its largest value `top` (N, 1)
    outside the columns `ruled_out` (N, r) holds. Overwrites `logits`: working in place spares
    a fresh (N, V) buffer per step.

    e^x is taken as 2^(x log2 e): PyTorch's CPU `exp2` ran 3-4x as fast as its `exp` on the
    development machine (both AVX-512), and this sum is a tenth of a beam step's time.
    """
    shift = torch.maximum(top, ruled_out.amax(dim=-1, keepdim=True))  # (N, 1) the row maximum
    torch.add(shift * -LOG2_E, logits, alpha=LOG2_E, out=logits)  # (x - shift) log2 e, one pass
    return shift + logits.exp2_().sum(dim=-1, keepdim=True).log()


def topk_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.topk(k, dim=-1)` for (N, V) rows as wide as a vocabulary, about twice as fast on a CPU.

    A row's k largest values lie in the k chunks with the largest maxima (any other chunk's
    maximum is beaten by k values from those chunks), so: cut each row into chunks of about 100,
    take every chunk's maximum, keep the k best chunks and rank only their k * 100 values.
    Falls back to `topk` off the CPU or when no chunk size in 50..200 divides V.
    """
    N, V = x.shape
    sizes = [c for c in range(50, 201) if V % c == 0 and V // c >= k]
    if x.device.type != "cpu" or not sizes:
        return x.topk(k, dim=-1)
    c = min(sizes, key=lambda c: abs(c - 100))
    n = V // c  # chunks per row
    chunks = x.view(N, n, c)
    best = chunks.amax(dim=-1).topk(k, dim=-1).indices  # (N, k) the chunks to rank
    picked = chunks.gather(1, best[:, :, None].expand(N, k, c))  # (N, k, c)
    values, at = picked.view(N, k * c).topk(k, dim=-1)
    return values, best.gather(1, at // c) * c + at % c  # (N, k) values, (N, k) column indices


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
        never_output(logits).fill_(float("-inf"))
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
    among the top K are finished; the K best others go on. The first step runs one row per
    sentence (the K beams would be copies of it) and fans out to K. A sentence is done when it
    has K finished hypotheses, or at its length limit (where only EOS is allowed); done
    sentences leave the batch, so the rest decode faster.

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
    limits = _limits(max_len, B, device).tolist()  # B ints
    memory = model.encode(src)  # a row per sentence
    state = model.init_state(memory)  # a row per sentence until the first step fans out
    tokens = torch.full((B, 1), BOS, dtype=torch.long, device=device)  # (N, t), N = live * width
    scores = torch.zeros(B, 1, device=device)  # (live, width) log-probs of the rows
    sentence = list(range(B))  # original index of each live sentence
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    first_row = torch.arange(B, device=device)[:, None]  # (live, 1) each live sentence's index

    for step in range(1, max(limits) + 2):
        width = scores.size(1)  # rows per sentence: 1 at the first step, K after
        at_limit = [limits[s] < step for s in sentence]  # past it: EOS only
        eos_only = (torch.tensor(at_limit, device=device).repeat_interleave(width)
                    if any(at_limit) else None)  # (N,)
        # The 2K best continuations of a sentence are among its rows' 2K best tokens each.
        log_probs, tokens_k, state = _step_candidates(model, tokens[:, -1:], memory, state,
                                                      2 * K, eos_only)  # (N, k) x 2
        k = log_probs.size(-1)
        candidates = (scores.view(-1, 1) + log_probs).view(-1, width * k)  # (live, width*k)
        top_scores, top_index = candidates.topk(min(2 * K, width * k), dim=1)  # (live, 2K)
        top_row = top_index // k  # which of the sentence's rows each candidate extends
        top_token = tokens_k.view(-1, width * k).gather(1, top_index)  # (live, 2K)

        # EOS among each sentence's K best candidates: a finished hypothesis
        is_eos = (top_token == EOS) & (top_scores > float("-inf"))
        penalty = length_penalty(step, lenpen)
        i, j = is_eos[:, :K].nonzero().unbind(1)  # (F,) x 2: live sentence, candidate
        if len(i):
            ended = zip(i.tolist(), tokens[i * width + top_row[i, j], 1:].tolist(),
                        top_scores[i, j].tolist())
            for live, prefix, logprob in ended:
                if len(finished[sentence[live]]) < K:
                    finished[sentence[live]].append(Hypothesis(prefix, logprob / penalty, logprob))

        # the K best non-EOS candidates go on
        go_on = top_scores.masked_fill(is_eos, float("-inf"))
        scores, pick = go_on.topk(K, dim=1)  # (live, K), (live, K) positions in the 2K
        parent = (first_row * width + top_row.gather(1, pick)).view(-1)  # (live * K,)
        tokens = torch.cat([tokens[parent], top_token.gather(1, pick).view(-1, 1)], dim=1)
        state = state.reorder_beams(parent)

        done = [len(finished[s]) >= K or past for s, past in zip(sentence, at_limit)]
        if all(done):
            break
        if any(done):  # drop finished sentences from the batch
            keep = [i for i, d in enumerate(done) if not d]
            live = torch.tensor(keep, device=device)  # (live',)
            live_rows = (live[:, None] * K + torch.arange(K, device=device)).view(-1)
            sentence, scores = [sentence[i] for i in keep], scores[live]
            first_row = first_row[: len(keep)]
            tokens = tokens[live_rows]
            memory, state = memory.index_select(live), state.select(live_rows, live)

    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finished]
