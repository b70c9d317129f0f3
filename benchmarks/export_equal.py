"""How exactly a CTranslate2 export translates as we do: log-probabilities, lines, BLEU, int8.

    python benchmarks/export_equal.py runs/RUN --data ../shared/data/multi30k \
        --split test_2016_flickr --json benchmarks/results/export_equal.json

The run's checkpoint is exported (`translate export --format ctranslate2`, float32) into a
temporary folder. First the teacher-forced log-probabilities of every `--check-split` reference
(dev by default): CTranslate2's `score_batch` against our model's, fp32, the largest difference
over all target tokens. Then `--split` is decoded greedy and at beam 5 with
`translate.export.ct2.decode`, against `translate decode --no-early-exit` in fp32 with the
default engine (CTranslate2 stops a beam as ours does only without the early exit): how many
lines are identical (differing lines printed with both outputs), and sacreBLEU of both. Last,
the same folder loaded in int8 (`compute_type="int8"`, weights quantized as loaded, as users
run it for speed) at beam 5: its BLEU beside float32's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from translate.loading import load_checkpoint
from translate.data.batch import pad
from translate.data.read import load_split
from translate.export import export
from translate.export.ct2 import decode, vocabulary
from translate.hardware import benchmark_threads, cpu_name
from translate.inference import translate_sentences
from translate.ready import Ready
from translate.scoring import score
from translate.tokens import BOS, PAD


@torch.no_grad()
def logprob_difference(translator, loaded, src: list[str], ref: list[str],
                       batch_size: int = 64) -> float:
    """The largest |CTranslate2 - ours| teacher-forced log-probability over every target token
    (EOS included) of the (src, ref) pairs."""
    model, tok = loaded.model.eval(), loaded.tokenizer
    src_vocab, tgt_vocab = vocabulary(tok.src), vocabulary(tok.tgt)
    largest = 0.0
    for start in range(0, len(src), batch_size):
        ids = tok.encode_src(src[start: start + batch_size])  # pieces + EOS
        tgt = tok.encode_tgt(ref[start: start + batch_size])
        x, y = pad([torch.tensor(s) for s in ids]), pad([torch.tensor([BOS] + t) for t in tgt])
        gold = F.log_softmax(model(x, y[:, :-1]).float(), -1)  # (B, T, V)
        gold = gold.gather(-1, y[:, 1:, None]).squeeze(-1)  # (B, T)
        scored = translator.score_batch([[src_vocab[i] for i in s[:-1]] for s in ids],
                                        [[tgt_vocab[i] for i in t[:-1]] for t in tgt])
        for b, result in enumerate(scored):
            theirs = torch.tensor(result.log_probs)  # (T_b,): the pieces and EOS
            assert len(theirs) == int((y[b, 1:] != PAD).sum()), "CTranslate2 scored other tokens"
            largest = max(largest, float((theirs - gold[b, : len(theirs)]).abs().max()))
    return largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--data", default=None)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--check-split", default="dev",
                        help="the split whose references' log-probabilities are compared")
    parser.add_argument("--threads", type=int, default=benchmark_threads(),
                    help="CPU threads (default: OMP_NUM_THREADS, else 2)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import ctranslate2

    torch.set_num_threads(args.threads)
    loaded = load_checkpoint(args.run)
    data = replace(loaded.recipe.data, dataset=args.data) if args.data else loaded.recipe.data
    src, ref = load_split(data, args.split)
    lang = data.tgt_lang
    results = {"run": str(args.run), "split": args.split, "sentences": len(src),
               "cpu": cpu_name(), "threads": args.threads,
               "ctranslate2": ctranslate2.__version__, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ct2"
        export(args.run, "ctranslate2", out)
        translator = ctranslate2.Translator(str(out), "cpu", intra_threads=args.threads)
        check_src, check_ref = load_split(data, args.check_split)
        diff = logprob_difference(translator, loaded, check_src, check_ref)
        results["logprob_max_abs_diff"] = {"split": args.check_split, "value": diff}
        print(f"{args.check_split}: largest |log-probability difference| {diff:.2e} over "
              f"{len(check_src)} references")
        # the fast engine may rewrite the model's modules: after the textbook's log-probabilities
        ready = Ready.prepare(loaded.model, loaded.tokenizer, torch.device("cpu"), "fp32", "auto")
        beam5 = replace(loaded.recipe.decode, beam=5, early_exit=False)  # as CT2 can
        for name, beam in (("greedy", 1), ("beam5", 5)):
            cfg = replace(beam5, beam=beam)
            ours = translate_sentences(ready, src, cfg)
            theirs = decode(translator, loaded.tokenizer, src, cfg, loaded.model.cfg.max_positions)
            differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
            bleu = {"ours": score(ours, ref, lang), "ct2 float32": score(theirs, ref, lang)}
            results["modes"][name] = {"equal": len(src) - len(differ), "differ": differ,
                                      **{f"bleu {k}": round(s.bleu, 2) for k, s in bleu.items()}}
            print(f"{name}: {len(src) - len(differ)} of {len(src)} lines equal; BLEU ours "
                  f"{bleu['ours'].bleu:.2f}, ct2 float32 {bleu['ct2 float32'].bleu:.2f}")
            for i in differ:
                print(f"  line {i + 1}\n    ours: {ours[i]}\n    ct2:  {theirs[i]}")
        int8 = ctranslate2.Translator(str(out), "cpu", compute_type="int8",
                                      intra_threads=args.threads)
        quantized = decode(int8, loaded.tokenizer, src, beam5, loaded.model.cfg.max_positions)
        scores = score(quantized, ref, lang)
        same = sum(a == b for a, b in zip(quantized, theirs))
        results["modes"]["beam5"].update({"bleu ct2 int8": round(scores.bleu, 2),
                                          "int8 lines equal float32": same})
        results["signature"] = scores.bleu_signature
        print(f"beam5 int8: BLEU {scores.bleu:.2f} ({scores.bleu - bleu['ct2 float32'].bleu:+.2f} "
              f"against float32), {same} of {len(src)} lines equal float32's")
        print(f"signature: {scores.bleu_signature}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
