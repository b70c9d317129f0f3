"""The notes' printed numbers, reproduced through the code: tour stop 0.

The project grew from two lecture notes, kept beside the repository in ../shared/seeds/:
note 000 (000_90ad65001b3ab655.txt), a nanoGPT-style note on one head of self-attention
(B, T, C = 4, 8, 32, `tril`, `masked_fill(-inf)`, softmax), and note 001
(001_127f4756bbc5aadf.txt), which works through the six words "Your journey starts with one
step" as 3-wide embeddings and prints every tensor. Each test's docstring names the lines of a
note it reproduces; every expected number below is copied from those lines as printed.

How the notes meet `scaled_dot_product_attention(q, k, v, mask, dropout)`:

- Shapes. The function takes (B, H, T, Dh) queries and (B, H, S, Dh) keys and values; the notes'
  (T, d) matrices go in as one batch of one head, `one_head(t)` = t[None, None].
- The scale. The function always divides q . k by sqrt(q.size(-1)). Note 001's first example
  (lines 94-209) and note 000's head (line 17) do not scale. We hand the function q * sqrt(d):
  (q * sqrt(d)) . k / sqrt(d) = q . k, so its softmax, mask and weighted sum run on the notes'
  unscaled scores. The function does not return the scores themselves; those tests check them as
  the notes compute them (`inputs @ inputs.T`), which is the function's own `q @ k.transpose`.
  From line 327 on, note 001 divides by keys.shape[-1]**0.5 = sqrt(d_out) itself, which is the
  code's sqrt(q.size(-1)): nothing to undo there.
- The mask. The notes' masks mark the cells to HIDE (`tril == 0`, `torch.triu(..., diagonal=1)`,
  filled with -inf); the code's mark the cells ALLOWED (`causal_mask`: True = may attend, and
  `scores.masked_fill(~mask, -inf)`). `test_the_notes_masks_mark_what_the_codes_mask_leaves_out`
  holds the two equal.
- Tolerance. The notes print 4 decimals: a printed value is within 5e-5 of what the notes
  computed. Comparisons with printed values use atol=1e-4, rtol=0 (PRINTED), which also covers
  float32 sums taken in another order and inputs that are themselves printed values; the one
  comparison that renormalises printed weights uses 2e-4 and says why.
- Randomness. The tests under "Trainable weights" rebuild the notes' weights as the notes build
  them, `torch.manual_seed(123)` and then `torch.rand` or `nn.Linear` in the notes' order. Their
  printed values are the ones PyTorch's CPU generator gives (they agree with the published book
  the notes follow); they depend on PyTorch keeping `torch.rand` and `nn.Linear`'s
  initialisation as they are. Every other test is free of randomness, or draws its own and
  compares two computations on the same draw. The notes' dropout draws (lines 576-596) depend on
  the platform's Bernoulli sampler, so the dropout test substitutes the notes' printed draw
  instead of asserting the generator gives it.

No test trains anything; each runs in milliseconds.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from helpers.models import with_weights
from translate.models.attention import (MultiHeadAttention, causal_mask,
                                        scaled_dot_product_attention)

PRINTED = 1e-4  # atol against a value the notes print with 4 decimals

# Note 001, lines 84-91 (again at 353-360): "Your journey starts with one step", d_in = 3.
INPUTS = torch.tensor(
    [[0.43, 0.15, 0.89],  # Your (x^1)
     [0.55, 0.87, 0.66],  # journey (x^2)
     [0.57, 0.85, 0.64],  # starts (x^3)
     [0.22, 0.58, 0.33],  # with (x^4)
     [0.77, 0.25, 0.10],  # one (x^5)
     [0.05, 0.80, 0.55]])  # step (x^6)
D_IN, D_OUT = 3, 2  # note 001, lines 261-262 (and 800, 834)
BATCH = torch.stack((INPUTS, INPUTS), dim=0)  # note 001, line 722: (2, 6, 3)

# Note 001, lines 176-181 (and 185-190): attn_scores = inputs @ inputs.T, no scale.
SCORES = [[0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310],
          [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865],
          [0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605],
          [0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565],
          [0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935],
          [0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450]]
# Note 001, lines 196-201: torch.softmax(attn_scores, dim=-1).
WEIGHTS = [[0.2098, 0.2006, 0.1981, 0.1242, 0.1220, 0.1452],
           [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581],
           [0.1390, 0.2369, 0.2326, 0.1242, 0.1108, 0.1565],
           [0.1435, 0.2074, 0.2046, 0.1462, 0.1263, 0.1720],
           [0.1526, 0.1958, 0.1975, 0.1367, 0.1879, 0.1295],
           [0.1385, 0.2184, 0.2128, 0.1420, 0.0988, 0.1896]]
# Note 001, lines 204-209: attn_weights @ inputs.
CONTEXT = [[0.4421, 0.5931, 0.5790],
           [0.4419, 0.6515, 0.5683],
           [0.4431, 0.6496, 0.5671],
           [0.4304, 0.6298, 0.5510],
           [0.4671, 0.5910, 0.5266],
           [0.4177, 0.6503, 0.5645]]

# Note 001, lines 499-504: mask_simple = torch.tril(torch.ones(6, 6)), 1 = kept.
MASK_SIMPLE = [[1., 0., 0., 0., 0., 0.],
               [1., 1., 0., 0., 0., 0.],
               [1., 1., 1., 0., 0., 0.],
               [1., 1., 1., 1., 0., 0.],
               [1., 1., 1., 1., 1., 0.],
               [1., 1., 1., 1., 1., 1.]]
# Note 001, lines 537-542: mask = torch.triu(torch.ones(6, 6), diagonal=1), 1 = hidden.
MASK = [[0., 1., 1., 1., 1., 1.],
        [0., 0., 1., 1., 1., 1.],
        [0., 0., 0., 1., 1., 1.],
        [0., 0., 0., 0., 1., 1.],
        [0., 0., 0., 0., 0., 1.],
        [0., 0., 0., 0., 0., 0.]]
# Note 001, lines 487-492: sa_v2's weights, softmax(queries @ keys.T / 2**0.5), no mask.
V2_WEIGHTS = [[0.1717, 0.1762, 0.1761, 0.1555, 0.1627, 0.1579],
              [0.1636, 0.1749, 0.1746, 0.1612, 0.1605, 0.1652],
              [0.1637, 0.1749, 0.1746, 0.1611, 0.1606, 0.1651],
              [0.1636, 0.1704, 0.1702, 0.1652, 0.1632, 0.1674],
              [0.1667, 0.1722, 0.1721, 0.1618, 0.1633, 0.1639],
              [0.1624, 0.1709, 0.1706, 0.1654, 0.1625, 0.1682]]
# Note 001, lines 507-512: masked_simple = attn_weights * mask_simple.
V2_MASKED_SIMPLE = [[0.1717, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
                    [0.1636, 0.1749, 0.0000, 0.0000, 0.0000, 0.0000],
                    [0.1637, 0.1749, 0.1746, 0.0000, 0.0000, 0.0000],
                    [0.1636, 0.1704, 0.1702, 0.1652, 0.0000, 0.0000],
                    [0.1667, 0.1722, 0.1721, 0.1618, 0.1633, 0.0000],
                    [0.1624, 0.1709, 0.1706, 0.1654, 0.1625, 0.1682]]
# Note 001, lines 518-523: masked_simple_norm, each row divided by its sum.
V2_RENORMALISED = [[1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
                   [0.4833, 0.5167, 0.0000, 0.0000, 0.0000, 0.0000],
                   [0.3190, 0.3408, 0.3402, 0.0000, 0.0000, 0.0000],
                   [0.2445, 0.2545, 0.2542, 0.2468, 0.0000, 0.0000],
                   [0.1994, 0.2060, 0.2058, 0.1935, 0.1953, 0.0000],
                   [0.1624, 0.1709, 0.1706, 0.1654, 0.1625, 0.1682]]
# Note 001, lines 546-551: sa_v2's scores masked_fill(mask.bool(), -inf), unscaled; the cells
# below and on the diagonal, row by row (the rest print as -inf).
V2_MASKED_SCORES = [[0.3111],
                    [0.1655, 0.2602],
                    [0.1667, 0.2602, 0.2577],
                    [0.0510, 0.1080, 0.1064, 0.0643],
                    [0.1415, 0.1875, 0.1863, 0.0987, 0.1121],
                    [0.0476, 0.1192, 0.1171, 0.0731, 0.0477, 0.0966]]
# Note 001, lines 556-561: torch.softmax(masked / keys.shape[-1]**0.5, dim=1).
V2_CAUSAL_WEIGHTS = [[1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
                     [0.4833, 0.5167, 0.0000, 0.0000, 0.0000, 0.0000],
                     [0.3190, 0.3408, 0.3402, 0.0000, 0.0000, 0.0000],
                     [0.2445, 0.2545, 0.2542, 0.2468, 0.0000, 0.0000],
                     [0.1994, 0.2060, 0.2058, 0.1935, 0.1953, 0.0000],
                     [0.1624, 0.1709, 0.1706, 0.1654, 0.1625, 0.1682]]
# Note 001, lines 580-585: torch.manual_seed(123); nn.Dropout(0.5)(torch.ones(6, 6)).
DROPPED_ONES = [[2., 2., 2., 2., 2., 2.],
                [0., 2., 0., 0., 0., 0.],
                [0., 0., 2., 0., 2., 0.],
                [2., 2., 0., 0., 0., 2.],
                [2., 0., 0., 0., 0., 2.],
                [0., 2., 0., 0., 0., 0.]]
# Note 001, lines 590-595: torch.manual_seed(123); dropout(attn_weights), the causal weights.
DROPPED_WEIGHTS = [[2.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
                   [0.0000, 1.0335, 0.0000, 0.0000, 0.0000, 0.0000],
                   [0.0000, 0.0000, 0.6804, 0.0000, 0.0000, 0.0000],
                   [0.4889, 0.5090, 0.0000, 0.0000, 0.0000, 0.0000],
                   [0.3988, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
                   [0.0000, 0.3418, 0.0000, 0.0000, 0.0000, 0.0000]]


def one_head(t: torch.Tensor) -> torch.Tensor:
    """The notes' (L, d) matrix as the code's (B, H, L, d): one batch row, one head."""
    return t[None, None]


def assert_printed(actual: torch.Tensor, printed, atol: float = PRINTED) -> None:
    """`actual` equals the notes' printed value to the 4 decimals they print."""
    torch.testing.assert_close(actual, torch.tensor(printed), atol=atol, rtol=0)


@contextmanager
def seeded(seed: int):
    """torch.manual_seed(seed), as the notes call it, leaving the other tests' random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


# Note 000: averaging the past.

def test_averaging_the_past_is_attention_with_equal_scores_under_the_causal_mask():
    """Note 000, lines 8, 18, 20-22 and 26: zeros masked by tril == 0, softmaxed, are 1/(t+1)."""
    # Note 000 prints no numbers here: row t of its `wei` is derived, 1/(t+1) over positions
    # 0..t, the lower-triangular average of the past, and the code's attention with equal scores
    # (q = 0, whatever the keys) under `causal_mask` gives the same weights and averages x.
    B, T, C = 4, 8, 32  # line 8
    draw = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, C, generator=draw)  # line 9
    tril = torch.tril(torch.ones(T, T))  # line 18
    wei = torch.zeros((T, T))  # line 20
    wei = wei.masked_fill(tril == 0, float("-inf"))  # line 21
    wei = F.softmax(wei, dim=-1)  # line 22
    expected = torch.tensor([[1 / (t + 1) if s <= t else 0.0 for s in range(T)]
                             for t in range(T)])
    torch.testing.assert_close(wei, expected)
    torch.testing.assert_close(tril / tril.sum(dim=-1, keepdim=True), expected)

    q, k = torch.zeros(B, 1, T, C), torch.randn(B, 1, T, C, generator=draw)
    out, weights = scaled_dot_product_attention(q, k, x[:, None], causal_mask(T))
    torch.testing.assert_close(weights, expected.expand(B, 1, T, T))
    past_means = x.cumsum(dim=1) / torch.arange(1, T + 1)[:, None]  # mean of x[:t+1]
    torch.testing.assert_close(out[:, 0], past_means)
    torch.testing.assert_close(out[:, 0], wei @ x)  # line 26: out = wei @ x


def test_note_000s_head_is_the_codes_attention_with_the_scale_undone():
    """Note 000, lines 8-25: one head of 16, scores masked where tril == 0, equals the code's."""
    B, T, C = 4, 8, 32  # line 8
    head_size = 16  # line 11
    with seeded(0):
        x = torch.randn(B, T, C)  # line 9
        key = nn.Linear(C, head_size, bias=False)  # lines 12-14
        query = nn.Linear(C, head_size, bias=False)
        value = nn.Linear(C, head_size, bias=False)
    with torch.no_grad():
        k, q, v = key(x), query(x), value(x)  # lines 15, 16, 24
        wei = q @ k.transpose(-2, -1)  # line 17: no scale
        tril = torch.tril(torch.ones(T, T))  # line 18
        wei = wei.masked_fill(tril == 0, float("-inf"))  # line 21
        wei = F.softmax(wei, dim=-1)  # line 22
        out = wei @ v  # line 25
        # The code divides by sqrt(16) = 4; q * 4 undoes it exactly (a power of two).
        code_out, code_weights = scaled_dot_product_attention(
            q[:, None] * math.sqrt(head_size), k[:, None], v[:, None], causal_mask(T))
    torch.testing.assert_close(code_weights[:, 0], wei)
    torch.testing.assert_close(code_out[:, 0], out)


def test_the_notes_masks_mark_what_the_codes_mask_leaves_out():
    """Note 001, lines 499-504 (tril, kept) and 537-542 (triu, hidden); note 000, line 21."""
    allowed = causal_mask(6)  # True = may attend
    assert torch.equal(allowed.float(), torch.tensor(MASK_SIMPLE))
    assert torch.equal((~allowed).float(), torch.tensor(MASK))
    assert torch.equal(torch.triu(torch.ones(6, 6), diagonal=1).bool(), ~allowed)  # line 535
    tril = torch.tril(torch.ones(8, 8))  # note 000, line 18
    assert torch.equal(tril == 0, ~causal_mask(8))  # note 000, line 21 hides tril == 0


# Note 001: the six words, no trainable weights (the scores are not scaled).

def test_the_scores_are_the_dot_products_of_the_inputs():
    """Note 001, line 104 (journey's scores) and lines 176-181 (every pair's), unscaled."""
    # The function computes these as `q @ k.transpose(-2, -1)` and does not return them: this
    # test checks them as the notes compute them; the next ones feed them through the code.
    query = INPUTS[1]  # line 99: journey, x^2
    assert_printed(INPUTS @ query, [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])
    assert_printed(INPUTS @ INPUTS.T, SCORES)


def test_journeys_softmax_weights_and_context_through_the_codes_attention():
    """Note 001, line 140 (and 130): journey's softmax weights; line 205: its context vector."""
    q = one_head(INPUTS[1:2] * math.sqrt(D_IN))  # * sqrt(3): the notes' scores are unscaled
    out, weights = scaled_dot_product_attention(q, one_head(INPUTS), one_head(INPUTS))
    assert_printed(weights[0, 0, 0], [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581])
    assert_printed(out[0, 0, 0], [0.4419, 0.6515, 0.5683])


def test_the_notes_first_context_vector_sums_the_weights_normalised_without_softmax():
    """Note 001, line 115 (scores / their sum) and line 153: z^2 = tensor([0.4355, ...])."""
    # Line 151 sums with attn_weights_2_tmp, the weights of line 112 (divided by their sum),
    # not the softmax weights of line 137: line 153 is not attention's output. The softmax
    # context of journey is row 2 of lines 204-209, which the test above takes from the code.
    scores = INPUTS @ INPUTS[1]
    plain = scores / scores.sum()  # line 112
    assert_printed(plain, [0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656])
    assert_printed(plain @ INPUTS, [0.4355, 0.6451, 0.5680])  # lines 148-153, summed in a loop
    out, _ = scaled_dot_product_attention(one_head(INPUTS[1:2] * math.sqrt(D_IN)),
                                          one_head(INPUTS), one_head(INPUTS))
    assert (out[0, 0, 0] - torch.tensor([0.4355, 0.6451, 0.5680])).abs().max() > 1e-3


def test_every_words_weights_and_context_through_the_codes_attention():
    """Note 001, lines 196-201 (softmax of every row of scores) and 204-209 (weights @ inputs)."""
    q = one_head(INPUTS * math.sqrt(D_IN))  # the code's 1/sqrt(3) undone: unscaled, as printed
    out, weights = scaled_dot_product_attention(q, one_head(INPUTS), one_head(INPUTS))
    assert_printed(weights[0, 0], WEIGHTS)
    assert_printed(out[0, 0], CONTEXT)
    assert_printed(torch.softmax(torch.tensor(SCORES), dim=-1), WEIGHTS)  # line 193


def test_the_weightless_example_is_one_attention_module_with_identity_projections():
    """Note 001, lines 196-201 and 204-209, from one MultiHeadAttention module (D=3, H=1)."""
    # W_query etc. are used as x @ W; nn.Linear stores (out, in) and computes x @ weight.T, so
    # the notes' W_query is the code's q_proj.weight.T. The identity, with q_proj's scaled by
    # sqrt(3) to undo the code's scale, leaves the notes' weightless attention.
    with seeded(0):
        attn = MultiHeadAttention(D_IN, heads=1, bias=False).eval()
    with torch.no_grad():
        attn.q_proj.weight.copy_(math.sqrt(D_IN) * torch.eye(D_IN))
        for projection in (attn.k_proj, attn.v_proj, attn.out_proj):
            projection.weight.copy_(torch.eye(D_IN))
        attn.out_proj.bias.zero_()
        out, weights = with_weights(attn, INPUTS[None])  # (1, 6, 3), (1, 1, 6, 6)
    assert_printed(weights[0, 0], WEIGHTS)
    assert_printed(out[0], CONTEXT)


# Note 001: the causal mask and dropout, from the printed tensors (no randomness).

def causal_inputs_from_printed_scores() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v whose scores in the code are the notes' masked scores / sqrt(2) (lines 546-554).

    The keys are the identity (key s is position s's one-hot vector), so q . k_s is q's s-th
    entry: each query carries its row of printed scores, times sqrt(6) to undo the code's
    1/sqrt(q.size(-1)) and over sqrt(2) for the notes' keys.shape[-1]**0.5. The future cells,
    printed as -inf, hold 9.0: the code's causal mask must hide whatever they hold. The values
    are the identity too, so the output is the weights that reach it (after dropout)."""
    lower = torch.zeros(6, 6)
    for t, row in enumerate(V2_MASKED_SCORES):
        lower[t, :t + 1] = torch.tensor(row)
    scores = torch.where(causal_mask(6), lower, torch.tensor(9.0))
    q = one_head(scores / math.sqrt(D_OUT) * math.sqrt(6))
    return q, one_head(torch.eye(6)), one_head(torch.eye(6))


def test_the_printed_masked_scores_through_the_causal_mask_give_the_printed_weights():
    """Note 001, lines 546-551 (masked scores) through causal_mask give lines 556-561."""
    q, k, v = causal_inputs_from_printed_scores()
    out, weights = scaled_dot_product_attention(q, k, v, causal_mask(6))
    assert_printed(weights[0, 0], V2_CAUSAL_WEIGHTS)
    assert_printed(out[0, 0], V2_CAUSAL_WEIGHTS)


def test_masking_then_renormalising_equals_the_minus_infinity_form():
    """Note 001, lines 487-492 x 499-504 = 507-512, renormalised = 518-523 = 556-561."""
    masked_simple = torch.tensor(V2_WEIGHTS) * torch.tensor(MASK_SIMPLE)  # line 505
    assert_printed(masked_simple, V2_MASKED_SIMPLE)
    renormalised = masked_simple / masked_simple.sum(dim=-1, keepdim=True)  # lines 515-516
    # 2e-4: the notes renormalised unrounded weights, this renormalises their 4-decimal prints;
    # row 4's first, 0.1636 / 0.6694 = 0.24440, is 1.02e-4 from the printed 0.2445.
    assert_printed(renormalised, V2_RENORMALISED, atol=2e-4)
    assert_printed(renormalised, V2_CAUSAL_WEIGHTS, atol=2e-4)  # the -inf form, lines 543-561
    # The notes' point, in the code, for the six words' scores: the weights under causal_mask
    # are the unmasked weights with the future zeroed and each row divided by its sum.
    q = one_head(INPUTS)
    _, full = scaled_dot_product_attention(q, q, q)
    _, causal = scaled_dot_product_attention(q, q, q, causal_mask(6))
    kept = full * causal_mask(6)
    torch.testing.assert_close(causal, kept / kept.sum(dim=-1, keepdim=True))


def test_dropout_zeroes_weights_and_doubles_the_rest(monkeypatch):
    """Note 001, lines 576-596: the draw of lines 580-585 turns lines 556-561 into 590-595."""
    q, k, v = causal_inputs_from_printed_scores()
    # One seed, one draw: the code's dropout on the weights drops the cells that dropout on
    # ones does and doubles the rest (1 / (1 - 0.5)), as lines 576-589 seed both with 123.
    with seeded(123):
        dropped_ones = F.dropout(torch.ones(6, 6), 0.5)  # nn.Dropout(0.5) in training mode
    with seeded(123):
        out, weights = scaled_dot_product_attention(q, k, v, causal_mask(6), dropout=0.5)
    assert set(dropped_ones.unique().tolist()) <= {0.0, 2.0}
    torch.testing.assert_close(out[0, 0], weights[0, 0] * dropped_ones)
    # Which cells a seed drops depends on the platform's sampler: put the notes' draw in place.
    calls = []

    def notes_draw(weights, p, *args, **kwargs):
        calls.append(p)
        return weights * torch.tensor(DROPPED_ONES)

    monkeypatch.setattr(F, "dropout", notes_draw)
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(6), dropout=0.5)
    assert calls == [0.5]
    assert_printed(out[0, 0], DROPPED_WEIGHTS)


# Note 001: trainable weights, rebuilt with torch.manual_seed(123) as the notes build them.

def test_the_trainable_weights_of_torch_rand_give_query_2_its_weights_and_context():
    """Note 001, lines 279, 311, 319, 330, 337 (z^2) and 384-389 (SelfAttention_v1)."""
    with seeded(123):  # lines 270-273; SelfAttention_v1 (369-371, 381-382) draws the same
        W_query = nn.Parameter(torch.rand(D_IN, D_OUT), requires_grad=False)
        W_key = nn.Parameter(torch.rand(D_IN, D_OUT), requires_grad=False)
        W_value = nn.Parameter(torch.rand(D_IN, D_OUT), requires_grad=False)
    x_2 = INPUTS[1]
    query_2 = x_2 @ W_query  # line 275
    assert_printed(query_2, [0.4306, 1.4551])  # line 279
    keys, values = INPUTS @ W_key, INPUTS @ W_value  # lines 299-300
    assert_printed(query_2.dot(keys[1]), 1.8524)  # line 311
    assert_printed(query_2 @ keys.T, [1.2705, 1.8524, 1.8111, 1.0795, 0.5577, 1.5440])  # 319
    # d_k = keys.shape[-1] = 2 = q.size(-1): the notes' scale is the code's (line 328).
    out, weights = scaled_dot_product_attention(one_head(query_2[None]), one_head(keys),
                                                one_head(values))
    assert_printed(weights[0, 0, 0], [0.1500, 0.2264, 0.2199, 0.1311, 0.0906, 0.1820])  # 330
    assert_printed(out[0, 0, 0], [0.3061, 0.8210])  # line 337
    out, _ = scaled_dot_product_attention(one_head(INPUTS @ W_query), one_head(keys),
                                          one_head(values))
    assert_printed(out[0, 0], [[0.2996, 0.8053], [0.3061, 0.8210], [0.3058, 0.8203],
                               [0.2948, 0.7939], [0.2927, 0.7891], [0.2990, 0.8040]])


def test_the_nn_linear_weights_give_sa_v2_and_causal_attention_through_the_codes_attention():
    """Note 001, lines 446-451, 487-492, 546-551, 556-561 and 745-756, from nn.Linear, seed 123."""
    # Lines 443-444 build SelfAttention_v2 (lines 423-425), lines 738-740 CausalAttention
    # (lines 602-604): each, after torch.manual_seed(123), these three nn.Linear in this order.
    with seeded(123):
        W_query = nn.Linear(D_IN, D_OUT, bias=False)
        W_key = nn.Linear(D_IN, D_OUT, bias=False)
        W_value = nn.Linear(D_IN, D_OUT, bias=False)
    with torch.no_grad():
        queries, keys, values = W_query(INPUTS), W_key(INPUTS), W_value(INPUTS)
        out, weights = scaled_dot_product_attention(one_head(queries), one_head(keys),
                                                    one_head(values))
        assert_printed(out[0, 0], [[-0.5337, -0.1051], [-0.5323, -0.1080], [-0.5323, -0.1079],
                                   [-0.5297, -0.1076], [-0.5311, -0.1066], [-0.5299, -0.1081]])
        assert_printed(weights[0, 0], V2_WEIGHTS)  # lines 482-492
        scores = queries @ keys.T  # line 484, unscaled; the cells the causal mask keeps:
        assert_printed(scores[causal_mask(6)], sum(V2_MASKED_SCORES, []))  # lines 546-551
        _, weights = scaled_dot_product_attention(one_head(queries), one_head(keys),
                                                  one_head(values), causal_mask(6))
        assert_printed(weights[0, 0], V2_CAUSAL_WEIGHTS)  # lines 556-561
        out, _ = scaled_dot_product_attention(W_query(BATCH)[:, None], W_key(BATCH)[:, None],
                                              W_value(BATCH)[:, None], causal_mask(6))
    causal = [[-0.4519, 0.2216], [-0.5874, 0.0058], [-0.6300, -0.0632], [-0.5675, -0.0843],
              [-0.5526, -0.0981], [-0.5299, -0.1081]]  # lines 745-750, again at 751-756
    assert_printed(out[:, 0], [causal, causal])


def test_two_causal_heads_side_by_side_are_the_codes_heads_merged():
    """Note 001, lines 805-816: MultiHeadAttentionWrapper, two heads, seed 123."""
    with seeded(123):  # lines 798-801: head 1's W_query, W_key, W_value, then head 2's
        heads = [[nn.Linear(D_IN, D_OUT, bias=False) for _ in range(3)] for _ in range(2)]
    with seeded(0):
        code = MultiHeadAttention(2 * D_OUT, heads=2)  # D = 4, H = 2, Dh = 2: for merge_heads
    with torch.no_grad():
        q, k, v = (torch.stack([head[i](BATCH) for head in heads], dim=1) for i in range(3))
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(6))  # (2, H=2, 6, Dh=2)
        merged = code.merge_heads(out)  # (2, 6, 4): torch.cat([head(x) ...], dim=-1), line 782
    rows = [[-0.4519, 0.2216, 0.4772, 0.1063], [-0.5874, 0.0058, 0.5891, 0.3257],
            [-0.6300, -0.0632, 0.6202, 0.3860], [-0.5675, -0.0843, 0.5478, 0.3589],
            [-0.5526, -0.0981, 0.5321, 0.3428], [-0.5299, -0.1081, 0.5077, 0.3493]]
    assert_printed(merged, [rows, rows])  # lines 805-810, again at 811-816


def test_the_notes_multi_head_attention_is_split_heads_attention_merge_heads_out_proj():
    """Note 001, lines 960-971: MultiHeadAttention(d_out=2, num_heads=2), seed 123."""
    with seeded(123):  # lines 953-956; __init__ (888-892) builds these four in this order
        W_query = nn.Linear(D_IN, D_OUT, bias=False)
        W_key = nn.Linear(D_IN, D_OUT, bias=False)
        W_value = nn.Linear(D_IN, D_OUT, bias=False)
        out_proj = nn.Linear(D_OUT, D_OUT)
    with seeded(0):
        code = MultiHeadAttention(D_OUT, heads=2)  # D = d_out = 2, H = 2, Dh = head_dim = 1
    code.out_proj.load_state_dict(out_proj.state_dict())  # the code's out_proj is (D, D) too
    with torch.no_grad():
        # lines 907-918: .view(b, num_tokens, num_heads, head_dim).transpose(1, 2)
        q, k, v = (code.split_heads(W(BATCH)) for W in (W_query, W_key, W_value))
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(6))  # lines 921-930
        result = code.out_proj(code.merge_heads(out))  # lines 932-936
    rows = [[0.3190, 0.4858], [0.2943, 0.3897], [0.2856, 0.3593], [0.2693, 0.3873],
            [0.2639, 0.3928], [0.2575, 0.4028]]
    assert_printed(result, [rows, rows])  # lines 960-965, again at 966-971
