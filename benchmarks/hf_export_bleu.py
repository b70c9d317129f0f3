"""BLEU of a Hugging Face export, loaded as its users load it, against `translate decode`.

    python benchmarks/hf_export_bleu.py runs/RUN --data ../shared/data/multi30k \
        --split test_2016_flickr --json benchmarks/results/hf_export_bleu.json

The checkpoint is exported (`translate export --format hf`, fp32) into a temporary folder,
loaded with `AutoTokenizer` and `AutoModelForSeq2SeqLM` (`trust_remote_code=True`: the default
recipe's model runs the folder's own modeling_translate.py), and the split translated with a plain
`generate(**tokenizer(batch, return_tensors="pt", padding=True))`: beam, length penalty and
the rest come from the export's generation_config.json. Ours is `translate decode` with the
recipe's decode settings (beam 5), once in fp32 (like for like) and once in the recipe's
precision (what the command runs by default: bf16 on a CPU with AMX). Both are scored with
sacreBLEU (cased, detokenized); the script prints the scores, their signature, how many lines
are identical, and checks that the tokenizer encodes the split's two sides as ours does.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import torch

from translate.loading import load_checkpoint
from translate.data.read import load_split
from translate.export import export
from translate.hardware import benchmark_threads, cpu_name
from translate.inference import translate_sentences
from translate.ready import Ready
from translate.scoring import score


def hf_translate(folder: Path, sentences: list[str], batch_size: int,
                 limit: tuple[float, int] | None, **generate) -> list[str]:
    """`sentences` translated by the export in `folder` as its users would: AutoTokenizer,
    AutoModelForSeq2SeqLM, `generate` with the saved generation config (and `generate`'s
    overrides), batches of similar length; `limit` (a, b): at most a * S + b tokens and EOS for
    a batch whose longest source has S ids, as the docs' snippet asks."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    # the recipe's model runs the export's own modeling file; a Pegasus ignores the flag
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    out = [""] * len(sentences)
    for start in range(0, len(order), batch_size):
        idx = order[start: start + batch_size]
        inputs = tokenizer([sentences[i] for i in idx], return_tensors="pt", padding=True)
        if limit:
            generate["max_new_tokens"] = int(limit[0] * inputs["input_ids"].size(1) + limit[1]) + 1
        with torch.inference_mode():
            generated = model.generate(**inputs, **generate)  # (B, 1 + T)
        for i, text in zip(idx, tokenizer.batch_decode(generated, skip_special_tokens=True)):
            out[i] = text
        print(f"  hf: {start + len(idx)}/{len(order)} lines, this batch "
              f"{generated.size(1) - 1} tokens long", flush=True)
    return out


def same_ids(folder: Path, tokenizer, texts: list[str]) -> int:
    """How many of `texts` the export's AutoTokenizer encodes to our source ids."""
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)(texts)["input_ids"]
    return sum(a == b for a, b in zip(tokenizer.encode_src(texts), theirs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data", default=None)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--threads", type=int, default=benchmark_threads(),
                    help="CPU threads (default: OMP_NUM_THREADS, else 2)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length-penalty", type=float, nargs="*", default=[None],
                        help="generate's length_penalty instead of the export's (several: one "
                             "run each)")
    parser.add_argument("--no-limit", action="store_true",
                        help="only the export's max_new_tokens, not the recipe's limit a batch")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_checkpoint(args.checkpoint)
    data = replace(loaded.recipe.data, dataset=args.data) if args.data else loaded.recipe.data
    src, ref = load_split(data, args.split)
    lang, cfg = data.tgt_lang, loaded.recipe.decode
    systems = {}
    for precision in ("fp32", loaded.recipe.train.precision):
        ready = Ready.prepare(loaded.model, loaded.tokenizer, torch.device("cpu"), precision,
                              "auto")
        systems[f"ours {ready.precision}"] = translate_sentences(ready, src, cfg)
        print(f"ours {ready.precision}: done", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = export(args.checkpoint, "hf", Path(tmp) / "hf").out
        encoded = {side: same_ids(folder, loaded.tokenizer, texts)
                   for side, texts in (("source", src), ("target", ref))}
        generation = json.loads((folder / "generation_config.json").read_text())
        limit = None if args.no_limit else (cfg.max_len_a, cfg.max_len_b)
        for lp in args.length_penalty:
            generate = {} if lp is None else {"length_penalty": lp}
            name = "hf generate" + ("" if lp is None else f" lp {lp}")
            systems[name] = hf_translate(folder, src, args.batch_size, limit, **generate)
    results = {"checkpoint": str(args.checkpoint), "split": args.split, "sentences": len(src),
               "cpu": cpu_name(), "threads": args.threads, "decode": asdict(cfg),
               "generation_config": generation, "limit_per_batch": limit,
               "tokenizer_same_ids": encoded, "systems": {}}
    ours = [name for name in systems if name.startswith("ours")]
    for name, hyps in systems.items():
        scores = score(hyps, ref, lang)
        same = {o: sum(a == b for a, b in zip(hyps, systems[o])) for o in ours}
        results["systems"][name] = {"bleu": round(scores.bleu, 2), "chrf": round(scores.chrf, 2),
                                    "identical_lines": same}
        print(f"{name:20s} BLEU {scores.bleu:6.2f}  chrF {scores.chrf:6.2f}  identical lines: "
              + ", ".join(f"{n} {k}" for n, k in same.items()))
    results["signature"] = scores.bleu_signature
    print(f"signature: {scores.bleu_signature}")
    print(f"AutoTokenizer ids equal ours: source {encoded['source']}/{len(src)}, "
          f"target {encoded['target']}/{len(ref)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
