"""Beam search that lets a GPU run ahead: the loop reads one flag from the device every
`check_every` steps, nothing else.

`translate.search.beam_search` reads the device at every step: which candidates ended, which
sentences are done, the finished hypotheses into Python lists. On a CPU that costs nothing; on a
GPU each read waits for every kernel queued so far, so the host cannot queue the next step while
the device computes this one, and a small model's step is mostly that wait. Here everything the
search keeps stays on the device:

    beams      (N, t) tokens and (live, K) log-probabilities, as in translate.search
    finished   per sentence of the batch, K slots: (B, K, L) tokens, log-probabilities, scores
               and lengths, and how many slots are filled
    done       (live,) whose search is over: past its length limit, K finished, or none of its
               live hypotheses able to beat its nbest-th finished one (`early_exit`)

A sentence that is done stops changing at once (nothing more finishes for it) but leaves the
batch only when the host next looks, every `check_every` steps: a few steps of rows computed for
nothing against a wait at every step. The hypotheses, scores and order are
`translate.search.beam_search`'s: exactly so when the host looks at every step, to rounding
otherwise, as rows then run in batches of other sizes (tests/gpu/test_device_search.py).
Greedy search is the same loop with one beam.

Shapes: B batch, K beam, N = live * width rows, V vocabulary, L longest output.

Tests: tests/gpu/test_device_search.py, tests/gpu/test_on_cuda.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from translate.models.interface import Seq2Seq
from translate.search import Candidates, Hypothesis, _limits, length_penalty
from translate.tokens import BOS, EOS, PAD

CHECK_EVERY = 8  # steps between the host's looks at which sentences are done


def top_candidates(logits: torch.Tensor, k: int, eos_only: Optional[torch.Tensor] = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """`translate.search.top_candidates` with no boolean indexing (which reads the device):
    the same (N, k) log-probabilities and ids for (N, V) fp32 logits."""
    log_probs = torch.log_softmax(logits, dim=-1)  # (N, V)
    log_probs[:, PAD] = float("-inf")
    log_probs[:, BOS] = float("-inf")
    if eos_only is not None:  # rows at their limit may only end
        end = log_probs[:, EOS].clone()  # (N,)
        log_probs.masked_fill_(eos_only[:, None], float("-inf"))
        log_probs[:, EOS] = end
    return log_probs.topk(min(k, log_probs.size(-1)), dim=-1)


@dataclass
class Finished:
    """Up to K finished hypotheses per sentence of the batch, in the order they ended. Slot K is
    a bin for the candidates that are not kept, so writes need no mask."""

    tokens: torch.Tensor  # (B, K + 1, L) EOS excluded, PAD after the end
    logprob: torch.Tensor  # (B, K + 1) fp32, EOS included
    score: torch.Tensor  # (B, K + 1) fp64 logprob / length penalty, as the host computes it
    length: torch.Tensor  # (B, K + 1) tokens, EOS excluded
    count: torch.Tensor  # (B,) slots filled

    @classmethod
    def empty(cls, B: int, K: int, L: int, device) -> "Finished":
        return cls(torch.full((B, K + 1, L), PAD, dtype=torch.long, device=device),
                   torch.full((B, K + 1), float("-inf"), device=device),
                   torch.full((B, K + 1), float("-inf"), dtype=torch.float64, device=device),
                   torch.zeros(B, K + 1, dtype=torch.long, device=device),
                   torch.zeros(B, dtype=torch.long, device=device))

    def to_host(self, nbest: int) -> list[list[Hypothesis]]:
        """Each sentence's `nbest` best, read from the device in one go."""
        count, length = self.count.tolist(), self.length.tolist()
        tokens, logprob, score = self.tokens.tolist(), self.logprob.tolist(), self.score.tolist()
        out = []
        for b in range(len(count)):
            hyps = [Hypothesis(tokens[b][j][: length[b][j]], score[b][j], logprob[b][j])
                    for j in range(count[b])]
            out.append(sorted(hyps, key=lambda h: -h.score)[:nbest])
        return out


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: torch.Tensor, beam: int, max_len: int | torch.Tensor,
                lenpen: float = 0.6, nbest: int = 1, candidates: Candidates = top_candidates,
                early_exit: bool = True, check_every: int = CHECK_EVERY
                ) -> list[list[Hypothesis]]:
    """`translate.search.beam_search`, with the device read every `check_every` steps only.

    Takes the same arguments and returns the same hypotheses; `candidates` must take a (N,)
    `eos_only` tensor on every step without reading it on the host (`top_candidates` here).
    """
    _check(beam, nbest, check_every)
    B, K, device = src.size(0), beam, src.device
    limits = _limits(max_len, B, device)  # (B,)
    host_limits = limits.tolist()  # one read, before the loop
    last_step = max(host_limits) + 1
    # without early_exit, the largest length penalty a sentence's live hypotheses may reach
    latest = torch.tensor([length_penalty(n + 1, lenpen) for n in host_limits],
                          dtype=torch.float64, device=device)  # (B,)
    finished = Finished.empty(B, K, max(last_step - 1, 1), device)
    state = model.init_state(model.encode(src))  # a row per sentence until the first step
    tokens = torch.full((B, 1), BOS, dtype=torch.long, device=device)  # (N, t)
    scores = torch.zeros(B, 1, device=device)  # (live, width)
    sentence = torch.arange(B, device=device)  # (live,) each live sentence's index
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (live,)
    for step in range(1, last_step + 1):
        width, live = scores.size(1), scores.size(0)
        eos_only = (limits[sentence] < step).repeat_interleave(width)  # (N,) past the limit
        logits, state = model.decode(tokens[:, -1:], state)  # (N, 1, V)
        log_probs, tokens_k = candidates(logits[:, -1].float(), 2 * K, eos_only)  # (N, k) x 2
        k = log_probs.size(-1)
        flat = (scores.view(-1, 1) + log_probs).view(live, width * k)
        top_scores, top_index = flat.topk(min(2 * K, width * k), dim=1)  # (live, 2K)
        top_row = top_index // k  # which of the sentence's rows each candidate extends
        top_token = tokens_k.view(live, width * k).gather(1, top_index)  # (live, 2K)
        is_eos = (top_token == EOS) & (top_scores > float("-inf"))
        _finish(finished, tokens, sentence, is_eos[:, :K] & ~done[:, None], top_row[:, :K],
                top_scores[:, :K], step, lenpen)
        # the K best candidates that do not end go on
        scores, pick = top_scores.masked_fill(is_eos, float("-inf")).topk(K, dim=1)  # (live, K)
        first_row = torch.arange(live, device=device)[:, None] * width
        parent = (first_row + top_row.gather(1, pick)).view(-1)  # (live * K,)
        tokens = torch.cat([tokens[parent], top_token.gather(1, pick).view(-1, 1)], dim=1)
        state = state.reorder_beams(parent)
        penalty = torch.full((live,), length_penalty(step + 1, lenpen), dtype=torch.float64,
                             device=device)
        if not early_exit:  # the largest of either end, as alpha may be negative
            penalty = torch.maximum(penalty, latest[sentence])
        done = done | _done(finished, scores, sentence, limits, step, K, nbest, penalty)
        if step % check_every and step != last_step:
            continue
        ended = done.tolist()  # the loop's one read from the device
        if all(ended):
            break
        if any(ended):  # the done sentences leave the batch
            keep = torch.tensor([i for i, d in enumerate(ended) if not d], device=device)
            rows = (keep[:, None] * K + torch.arange(K, device=device)).view(-1)  # (live' * K,)
            state, tokens, scores = state.select(rows), tokens[rows], scores[keep]
            sentence, done = sentence[keep], done[keep]
    return finished.to_host(nbest)


def _check(beam: int, nbest: int, check_every: int) -> None:
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest must be between 1 and the beam size ({beam}), got {nbest}")
    if check_every < 1:
        raise ValueError(f"check_every must be at least 1 step, got {check_every}")


def _finish(finished: Finished, tokens: torch.Tensor, sentence: torch.Tensor, ends: torch.Tensor,
            rows: torch.Tensor, logprobs: torch.Tensor, step: int, lenpen: float) -> None:
    """Record the candidates `ends` (live, K) marks, in order, in their sentences' free slots
    (the first K to end are kept, as in translate.search); the rest go to the bin slot.

    Args:
        tokens: (live * width, step) the rows the candidates extend.
        rows: (live, K) which of its sentence's rows each candidate extends.
        logprobs: (live, K) the candidates' log-probabilities, EOS included.
    """
    live, K = ends.shape
    width = tokens.size(0) // live
    count = finished.count[sentence]  # (live,)
    slot = count[:, None] + ends.long().cumsum(dim=1) - 1  # (live, K)
    slot = torch.where(ends & (slot < K), slot, K)
    where = (sentence[:, None].expand(live, K), slot)
    prefix = tokens.view(live, width, step)[:, :, 1:]  # (live, width, step - 1) BOS dropped
    prefix = prefix.gather(1, rows[:, :, None].expand(live, K, step - 1))  # (live, K, step - 1)
    finished.tokens[:, :, : step - 1].index_put_(where, prefix)
    finished.logprob.index_put_(where, logprobs)
    finished.score.index_put_(where, logprobs.double() / length_penalty(step, lenpen))
    finished.length.index_put_(where, torch.full_like(slot, step - 1))
    finished.count[sentence] = (count + ends.sum(dim=1)).clamp(max=K)


def _done(finished: Finished, scores: torch.Tensor, sentence: torch.Tensor,
          limits: torch.Tensor, step: int, K: int, nbest: int, penalty: torch.Tensor
          ) -> torch.Tensor:
    """(live,) whose search is over after `step` (translate.search._done, on the device):
    past its limit, K finished, or `nbest` finished that no live hypothesis, whose
    log-probability only falls, can outscore under the largest length `penalty` it may reach."""
    count = finished.count[sentence]  # (live,)
    over = (count >= K) | (limits[sentence] < step)
    kept = finished.score[sentence, :K].topk(nbest, dim=1).values[:, -1]  # (live,) nbest-th
    beaten = scores[:, 0].double() / penalty <= kept  # the best live one cannot win
    return over | ((count >= nbest) & beaten)


def greedy_search(model: Seq2Seq, src: torch.Tensor, max_len: int | torch.Tensor,
                  check_every: int = CHECK_EVERY) -> list[list[int]]:
    """`translate.search.greedy_search`'s tokens: this beam search with one beam."""
    found = beam_search(model, src, 1, max_len, 0.0, 1, top_candidates, True, check_every)
    return [hyps[0].tokens for hyps in found]
