"""Search: turn a model's step-by-step distributions into output sequences.

Search sees a model only through its `Seq2Seq` interface (translate.models.interface): encode
once, then `decode` one token per step with the state, and let the state follow the hypotheses
with `reorder_beams` and `select`. Both searches are pure functions that keep no state between
calls.

Shapes: B batch, S source length, K beam size, V vocabulary, N rows (hypotheses) in a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from translate.models.interface import Seq2Seq
from translate.tokens import BOS, EOS, PAD

# (N, V) fp32 logits, k, (N,) rows that may only end or None -> (N, k) log-probs, (N, k) ids
Candidates = Callable[[torch.Tensor, int, Optional[torch.Tensor]],
                      tuple[torch.Tensor, torch.Tensor]]


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


def top_candidates(logits: torch.Tensor, k: int, eos_only: Optional[torch.Tensor] = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's k most probable next tokens: log-softmax, then top-k.

    PAD and BOS are never output; rows flagged in `eos_only` (at their length limit) may only
    end, keeping EOS's probability under the full distribution.

    Args:
        logits: (N, V) fp32 scores for the next token.
        k: candidates per row.
        eos_only: (N,) boolean, or None when no row is at its limit.

    Returns:
        (N, k) log-probabilities and (N, k) token ids, best first.
    """
    log_probs = torch.log_softmax(logits, dim=-1)  # (N, V)
    log_probs[:, [PAD, BOS]] = float("-inf")
    if eos_only is not None:
        end = log_probs[eos_only, EOS]
        log_probs[eos_only] = float("-inf")
        log_probs[eos_only, EOS] = end
    return log_probs.topk(min(k, log_probs.size(-1)), dim=-1)


@torch.inference_mode()
def greedy_search(model: Seq2Seq, src: torch.Tensor, max_len: int | torch.Tensor,
                  use_cache: bool = True) -> list[list[int]]:
    """Pick the most probable token at each step until EOS or the length limit.

    The quick path of `beam_search(..., beam=1)`, which gives the same tokens. A sentence that
    ends leaves the batch (`state.select`), so the rest decode without its rows.

    Args:
        src: (B, S) source ids.
        max_len: most tokens per sentence (EOS excluded): one int or a (B,) tensor.
        use_cache: feed one token per step with the model's state; without it the whole prefix
            is decoded again every step (slow; kept to test the state against).

    Returns:
        B lists of token ids, EOS excluded.
    """
    B = src.size(0)
    limits = _limits(max_len, B, src.device)
    memory = model.encode(src)
    state = model.init_state(memory)
    tokens = torch.full((B, 1), BOS, dtype=torch.long, device=src.device)  # (live, t)
    live = torch.arange(B, device=src.device)  # (live,) each row's sentence
    ended = torch.zeros(B, dtype=torch.bool, device=src.device)  # ended, still in the batch
    out: list[list[int]] = [[] for _ in range(B)]
    for step in range(1, int(limits.max()) + 1):
        if use_cache:
            logits, state = model.decode(tokens[:, -1:], state)  # (live, 1, V)
        else:  # the prefix from scratch: (B, t, V)
            logits, _ = model.decode(tokens, model.init_state(memory))
        logits = logits[:, -1]
        logits[:, [PAD, BOS]] = float("-inf")  # never output
        next_token = logits.argmax(dim=-1).masked_fill(ended, PAD)  # (live,)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        done = ~ended & ((next_token == EOS) | (limits[live] <= step))  # (live,)
        if not bool(done.any()):
            continue
        for sentence, row in zip(live[done].tolist(), tokens[done, 1:].tolist()):
            out[sentence] = row[:-1] if row[-1] == EOS else row
        ended |= done
        if bool(ended.all()):
            break
        if use_cache:  # ended sentences leave the batch, as in beam search
            keep = (~ended).nonzero().squeeze(1)  # (live',)
            live, tokens, ended = live[keep], tokens[keep], ended[keep]
            state = state.select(keep)
    return out


@dataclass
class Beams:
    """The live hypotheses of a batch in beam search: `width` rows per live sentence."""

    tokens: torch.Tensor  # (N, t) each row's tokens so far, BOS first; N = live * width
    scores: torch.Tensor  # (live, width) their log-probabilities
    sentence: list[int]  # each live sentence's index in the batch
    finished: list[list[Hypothesis]]  # per sentence of the batch

    @property
    def width(self) -> int:
        return self.scores.size(1)


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: torch.Tensor, beam: int, max_len: int | torch.Tensor,
                lenpen: float = 0.6, nbest: int = 1, candidates: Candidates = top_candidates,
                early_exit: bool = True) -> list[list[Hypothesis]]:
    """Batched beam search with GNMT length penalty.

    Each step takes the 2K best continuations of every sentence's K beams: those ending in EOS
    among the top K are finished; the K best others go on, so EOS never starves the beam. The
    first step runs one row per sentence (its K beams would be copies) and fans out to K. A
    sentence is done at its length limit (where only EOS is allowed), with K finished
    hypotheses, or sooner (`_done`); done sentences leave the batch, so the rest decode faster.

    Args:
        src: (B, S) source ids.
        beam: beam size K.
        max_len: most tokens per sentence (EOS excluded): one int or a (B,) tensor.
        lenpen: GNMT alpha; hypotheses rank by logprob / ((5 + length) / 6) ** alpha.
        nbest: hypotheses returned per sentence (<= beam), best first.
        candidates: each row's best next tokens from its logits (`top_candidates`).
        early_exit: a sentence is also done once no live hypothesis, ended at the next step,
            would outscore its `nbest` best finished (CTranslate2 stops once a step's best
            candidate ends; this compares length-normalized scores): faster at a BLEU within
            the noise (docs/results.md, the fast engine's parts). False: once
            none could at any length it may still reach, which returns exactly what searching
            on to K finished would.

    Returns:
        B lists of `nbest` Hypothesis, sorted by score, all distinct.
    """
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest must be between 1 and the beam size ({beam}), got {nbest}")
    B, device = src.size(0), src.device
    limits = _limits(max_len, B, device).tolist()  # B ints
    state = model.init_state(model.encode(src))  # a row per sentence until the first step
    beams = Beams(torch.full((B, 1), BOS, dtype=torch.long, device=device),
                  torch.zeros(B, 1, device=device), list(range(B)), [[] for _ in range(B)])
    for step in range(1, max(limits) + 2):
        at_limit = [limits[s] < step for s in beams.sentence]  # past it: EOS only
        state, beams = _beam_step(model, state, beams, step, beam, lenpen, at_limit, candidates)
        done = _done(beams, step, limits, nbest, lenpen, early_exit)
        if all(done):
            break
        if any(done):
            state, beams = _drop_done(state, beams, done, beam)
    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in beams.finished]


def _beam_step(model: Seq2Seq, state, beams: Beams, step: int, K: int, lenpen: float,
               at_limit: list[bool], candidates: Candidates):
    """Decode one token for every live row; finish the hypotheses that end; keep K per sentence.

    Returns the new state and beams.
    """
    width, device = beams.width, beams.tokens.device
    eos_only = (torch.tensor(at_limit, device=device).repeat_interleave(width)
                if any(at_limit) else None)  # (N,)
    logits, state = model.decode(beams.tokens[:, -1:], state)  # (N, 1, V)
    # the 2K best continuations of a sentence are among its rows' 2K best tokens each
    log_probs, tokens_k = candidates(logits[:, -1].float(), 2 * K, eos_only)  # (N, k) x 2
    k = log_probs.size(-1)
    scores = (beams.scores.view(-1, 1) + log_probs).view(-1, width * k)  # (live, width * k)
    top_scores, top_index = scores.topk(min(2 * K, width * k), dim=1)  # (live, 2K)
    top_row = top_index // k  # which of the sentence's rows each candidate extends
    top_token = tokens_k.view(-1, width * k).gather(1, top_index)  # (live, 2K)
    is_eos = (top_token == EOS) & (top_scores > float("-inf"))
    _finish(beams, is_eos[:, :K], top_row, top_scores, step, K, lenpen)
    # the K best candidates that do not end go on
    go_on, pick = top_scores.masked_fill(is_eos, float("-inf")).topk(K, dim=1)  # (live, K)
    first_row = torch.arange(len(beams.sentence), device=device)[:, None] * width
    parent = (first_row + top_row.gather(1, pick)).view(-1)  # (live * K,)
    tokens = torch.cat([beams.tokens[parent], top_token.gather(1, pick).view(-1, 1)], dim=1)
    beams = Beams(tokens, go_on, beams.sentence, beams.finished)
    return state.reorder_beams(parent), beams


def _done(beams: Beams, step: int, limits: list[int], nbest: int, lenpen: float,
          early_exit: bool) -> list[bool]:
    """Per live sentence, whether its search is over after `step`: past its length limit, with K
    finished hypotheses, or with `nbest` finished that no live hypothesis can outscore. A live
    log-probability only falls as tokens are added, so the best a live hypothesis can finish with
    is its log-probability over the largest length penalty it can still reach (early_exit:
    the one of the next step)."""
    K = beams.width
    done = [len(beams.finished[s]) >= K or limits[s] < step for s in beams.sentence]
    ready = [not d and len(beams.finished[s]) >= nbest for d, s in zip(done, beams.sentence)]
    if not any(ready):
        return done
    best_live = beams.scores[:, 0].tolist()  # each sentence's best live log-probability
    for live, sentence in enumerate(beams.sentence):
        if ready[live]:
            kept = sorted((h.score for h in beams.finished[sentence]), reverse=True)[nbest - 1]
            penalty = length_penalty(step + 1, lenpen)
            if not early_exit:  # the largest of either end, as alpha may be negative
                penalty = max(penalty, length_penalty(limits[sentence] + 1, lenpen))
            done[live] = best_live[live] / penalty <= kept
    return done


def _finish(beams: Beams, is_eos: torch.Tensor, top_row: torch.Tensor, top_scores: torch.Tensor,
            step: int, K: int, lenpen: float) -> None:
    """Record as finished the candidates `is_eos` (live, K) marks: EOS among the top K."""
    i, j = is_eos.nonzero().unbind(1)  # (F,) x 2: live sentence, candidate
    if not len(i):
        return
    penalty = length_penalty(step, lenpen)
    prefixes = beams.tokens[i * beams.width + top_row[i, j], 1:].tolist()
    for live, prefix, logprob in zip(i.tolist(), prefixes, top_scores[i, j].tolist()):
        hyps = beams.finished[beams.sentence[live]]
        if len(hyps) < K:
            hyps.append(Hypothesis(prefix, logprob / penalty, logprob))


def _drop_done(state, beams: Beams, done: list[bool], K: int):
    """The state and beams without the sentences that are done."""
    keep = [i for i, d in enumerate(done) if not d]
    device = beams.tokens.device
    live = torch.tensor(keep, device=device)  # (live',)
    rows = (live[:, None] * K + torch.arange(K, device=device)).view(-1)  # (live' * K,)
    beams = Beams(beams.tokens[rows], beams.scores[live], [beams.sentence[i] for i in keep],
                  beams.finished)
    return state.select(rows), beams
