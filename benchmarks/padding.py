"""Padding in training batches: how many of a batch's token slots are real, source and target.

    python benchmarks/padding.py --data ../shared/data/multi30k --widths 1,2,3,4 \
        --json benchmarks/results/padding.json
    python benchmarks/padding.py --data ../shared/data/multi30k --widths 1 \
        --sampling-alphas 0.1,0.2,0.3,0.5,1 --json benchmarks/results/padding-sampling.json
    python benchmarks/padding.py --data ../shared/data/multi30k --widths 1 \
        --multiples 1,2,4,8,16 --json benchmarks/results/padding-multiples.json

The recipe's data are prepared as `translate train` prepares them (its tokenizer trained, the
train split cleaned, encoded and length-filtered), and one epoch's batches are built by
`translate.data.batch.token_batches`, which orders pairs by target, then source length. A width
w > 1 orders by target length rounded up to a multiple of w, then source length: coarser target
buckets with sources sorted inside them, the usual trade of target padding for source padding.
A padded target token costs about twice a source token (decoder layers and the output layer
against encoder layers), so the figure to watch is the weighted waste printed last.

With `--multiples`, batches are made as `train.length_multiple` makes them (lengths rounded up
to a multiple, pairs batched by their rounded lengths): printed per multiple, the weighted waste
and the number of distinct batch shapes (sentences, source length, target length) in the epoch,
which is what a GPU's captured or compiled step is made for, once per shape.

With `--sampling-alphas`, the same epoch's batches (width 1) are segmented afresh as subword
sampling (`tokenizer.sampling_alpha`) does in training: batches are formed from the one best
lengths, so the drawn ones hold more pieces and pad more. Printed per alpha: pieces drawn per
piece of the one best, the batches' token slots against the one best's (what a step computes),
and the weighted waste.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from translate.config import load_recipe
from translate.data.batch import round_up, token_batches
from translate.data.encode import EncodedPairs
from translate.tokenizer import SubwordSampler, Tokenizer
from translate.training import prepare_data

RECIPE = Path(__file__).resolve().parents[1] / "recipes/multi30k/transformer.yaml"


def real_and_slots(lengths) -> np.ndarray:
    """(2,) a batch side's real tokens and its token slots once padded to the longest."""
    return np.array([sum(lengths), len(lengths) * max(lengths)], dtype=np.float64)


def weighted_waste(src: np.ndarray, tgt: np.ndarray) -> float:
    """Padding waste with a target slot counted twice; `src`, `tgt`: (2,) real, slots."""
    return float(((1 - src[0] / src[1]) + 2 * (1 - tgt[0] / tgt[1])) / 3)


def padding(src: np.ndarray, tgt: np.ndarray, max_tokens: int, width: int, seed: int) -> dict:
    """Real/padded token counts of one epoch's batches, ordering targets in buckets of `width`."""
    ordered_tgt = (tgt + width - 1) // width * width
    batches = token_batches(src, ordered_tgt, max_tokens, shuffle=True, seed=seed)
    counts = np.zeros((2, 2))  # [src, tgt] x [real, slots]
    for i in range(len(batches)):
        idx = batches[i]
        counts += [real_and_slots(src[idx].tolist()), real_and_slots(tgt[idx].tolist())]
    return {"width": width, "batches": len(batches), "src_real": counts[0, 0] / counts[0, 1],
            "tgt_real": counts[1, 0] / counts[1, 1], "weighted_waste": weighted_waste(*counts)}


def rounded_padding(src: np.ndarray, tgt: np.ndarray, max_tokens: int, multiple: int,
                    seed: int) -> dict:
    """One epoch's batches with lengths rounded up to `multiple`: padding and distinct shapes."""
    batches = token_batches(src, tgt, max_tokens, shuffle=True, seed=seed, multiple=multiple)
    counts, shapes = np.zeros((2, 2)), set()  # [src, tgt] x [real, slots]
    for i in range(len(batches)):
        idx = batches[i]
        shape = (len(idx), round_up(int(src[idx].max()), multiple),
                 round_up(int(tgt[idx].max()), multiple))
        counts += [[src[idx].sum(), shape[0] * shape[1]], [tgt[idx].sum(), shape[0] * shape[2]]]
        shapes.add(shape)
    return {"multiple": multiple, "batches": len(batches), "shapes": len(shapes),
            "lengths": len({shape[1:] for shape in shapes}),
            "src_real": counts[0, 0] / counts[0, 1], "tgt_real": counts[1, 0] / counts[1, 1],
            "weighted_waste": weighted_waste(*counts)}


def sampled_padding(pairs: EncodedPairs, tokenizer: Tokenizer, alpha: float, nbest: int,
                    max_tokens: int, max_len: int, seed: int) -> dict:
    """One epoch's batches, formed from the one best lengths, segmented afresh by sampling:
    pieces and token slots against the one best's, and the weighted waste."""
    kept = pairs.indices()
    sampler = SubwordSampler(tokenizer, alpha, nbest, max_len)
    batches = token_batches(pairs.src.lengths[kept], pairs.tgt.lengths[kept], max_tokens,
                            shuffle=True, seed=seed)
    counts = np.zeros((2, 2, 2))  # [one best, drawn] x [src, tgt] x [real, slots]
    for i in range(len(batches)):
        ids = kept[batches[i]]
        best = ([pairs.src[j] for j in ids], [pairs.tgt[j] for j in ids])
        for kind, sides in enumerate((best, sampler(*best))):
            counts[kind] += [real_and_slots([len(seq) for seq in seqs]) for seqs in sides]
    best, drawn = counts.sum(axis=1)  # (2,) each: real, slots over both sides
    return {"alpha": alpha, "nbest": nbest, "pieces": float(drawn[0] / best[0]),
            "slots": float(drawn[1] / best[1]), "weighted_waste": weighted_waste(*counts[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="local dataset folder (or hub name)")
    parser.add_argument("--recipe", default=str(RECIPE))
    parser.add_argument("--widths", default="1,2,3,4", help="target bucket widths to compare")
    parser.add_argument("--multiples", default="",
                        help="train.length_multiple values to measure, e.g. 1,2,4,8")
    parser.add_argument("--sampling-alphas", default="",
                        help="subword sampling alphas to measure, e.g. 0.1,0.3 (unigram or bpe)")
    parser.add_argument("--sampling-nbest", type=int, default=0,
                        help="unigram: draw from the N best segmentations (0: all)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    multiples = [int(m) for m in args.multiples.split(",") if m]
    if any(m < 1 for m in multiples):
        parser.error(f"--multiples must be at least 1 each, got {args.multiples}")
    recipe = load_recipe(args.recipe, [f"data.dataset={args.data}"])
    with tempfile.TemporaryDirectory() as run_dir:
        data = prepare_data(recipe, Path(run_dir))
    pairs = data.train
    kept = pairs.indices()  # the pairs the length filter keeps, as training uses them
    src = pairs.src.lengths[kept].astype(np.int64)
    tgt = pairs.tgt.lengths[kept].astype(np.int64)
    rows = [padding(src, tgt, recipe.train.max_tokens, int(w), recipe.train.seed * 1000 + 1)
            for w in args.widths.split(",")]
    print(f"{len(pairs)} pairs, batches of {recipe.train.max_tokens} tokens, epoch 1")
    print("width  batches  source real  target real  weighted waste")
    for r in rows:
        print(f"{r['width']:>5}  {r['batches']:>7}  {r['src_real']:>11.1%}  {r['tgt_real']:>11.1%}"
              f"  {r['weighted_waste']:>14.1%}")
    rounded = [rounded_padding(src, tgt, recipe.train.max_tokens, m, recipe.train.seed * 1000 + 1)
               for m in multiples]
    if rounded:
        print("lengths rounded up to a multiple (train.length_multiple)")
        print("multiple  batches  shapes  (S, T) pairs  source real  target real  weighted waste")
        for r in rounded:
            print(f"{r['multiple']:>8}  {r['batches']:>7}  {r['shapes']:>6}  {r['lengths']:>12}"
                  f"  {r['src_real']:>11.1%}  {r['tgt_real']:>11.1%}  {r['weighted_waste']:>14.1%}")
    sampled = [sampled_padding(pairs, data.tokenizer, float(a), args.sampling_nbest,
                               recipe.train.max_tokens, recipe.data.max_len,
                               recipe.train.seed * 1000 + 1)
               for a in args.sampling_alphas.split(",") if a]
    if sampled:
        print(f"subword sampling ({recipe.tokenizer.model_type}, nbest "
              f"{args.sampling_nbest or 'all'}), the same batches segmented afresh")
        print("alpha  pieces drawn per one best piece  token slots  weighted waste")
        for r in sampled:
            print(f"{r['alpha']:>5g}  {r['pieces']:>31.3f}  {r['slots']:>11.3f}"
                  f"  {r['weighted_waste']:>14.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps({"recipe": args.recipe, "pairs": len(pairs),
                                               "rows": rows, "rounded": rounded,
                                               "sampling": sampled},
                                              indent=2) + "\n")


if __name__ == "__main__":
    main()
