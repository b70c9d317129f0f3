"""Training throughput in target tokens/s (pieces + EOS) on real Multi30k batches.

Measures, in one process and on the same batches, our Transformer in fp32 and in bf16 autocast
and, when `transformers` is installed, a Hugging Face MarianMT of the same size (the peer) in fp32.
Systems take turns round by round so machine noise hits them alike; the figure is the median
over rounds, and each system is also given as a ratio to the peer.

    python benchmarks/train_speed.py --data ../shared/data/multi30k --rounds 5 --steps 8
    python benchmarks/train_speed.py ... --json benchmarks/results/train_speed.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from translate.config import DataConfig, TokenizerConfig
from translate.data import clean_text_pairs, encode_pairs, iterate_batches, load_split
from translate.engine import FAST
from translate.models import TransformerConfig, build_model, count_parameters
from translate.tokenizer import Tokenizer
from translate.tokens import PAD
from translate.utils import autocast


def make_batches(data: str, max_tokens: int, n: int):
    src, tgt = load_split(DataConfig(dataset=data), "train")
    keep, _ = clean_text_pairs(src, tgt)
    src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    tok = Tokenizer.train(src, tgt, TokenizerConfig(vocab_size=8000))
    pairs = encode_pairs(tok, src, tgt)
    batches = []
    for batch in iterate_batches(pairs, max_tokens, shuffle=True, seed=1):
        batches.append(batch)
        if len(batches) == n:
            break
    return tok, batches


class Ours:
    def __init__(self, vocab: int, precision: str):
        torch.manual_seed(0)
        cfg = TransformerConfig(dropout=0.1)
        self.model = FAST.prepare(build_model(cfg, vocab, vocab, shared_vocab=True)).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98))
        self.precision = precision
        self.params = count_parameters(self.model)

    def step(self, batch) -> None:
        with autocast(torch.device("cpu"), self.precision):
            logits = self.model(batch.src, batch.tgt_in)
        loss, _ = FAST.loss(logits, batch.tgt_out, 0.1, PAD)
        (loss / batch.num_tgt_tokens).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class Marian:
    """The peer: Hugging Face MarianMT built from a config (3+3 layers, d 256, 4 heads, FFN 1024)."""

    def __init__(self, vocab: int):
        from transformers import MarianConfig, MarianMTModel

        torch.manual_seed(0)
        cfg = MarianConfig(vocab_size=vocab, d_model=256, encoder_layers=3, decoder_layers=3,
                           encoder_attention_heads=4, decoder_attention_heads=4,
                           encoder_ffn_dim=1024, decoder_ffn_dim=1024, dropout=0.1,
                           pad_token_id=PAD, eos_token_id=3, decoder_start_token_id=2,
                           max_position_embeddings=512, share_encoder_decoder_embeddings=True)
        self.model = MarianMTModel(cfg).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98))
        self.params = sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def step(self, batch) -> None:
        out = self.model(input_ids=batch.src, attention_mask=batch.src != PAD,
                         decoder_input_ids=batch.tgt_in, decoder_attention_mask=batch.tgt_in != PAD)
        loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), batch.tgt_out.flatten(),
                                                 ignore_index=PAD, label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8, help="steps per system per round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/train_speed.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok, batches = make_batches(args.data, args.max_tokens, args.steps * args.rounds + 2)
    systems = {"ours fp32": Ours(tok.tgt_vocab_size, "fp32"),
               "ours bf16": Ours(tok.tgt_vocab_size, "bf16")}
    try:
        systems["hf marian fp32"] = Marian(tok.tgt_vocab_size)
    except ImportError:
        print("transformers is not installed: measuring without the MarianMT peer")
    for system in systems.values():  # warm-up: allocator, oneDNN kernels
        for batch in batches[:2]:
            system.step(batch)
    rates: dict[str, list[float]] = {name: [] for name in systems}
    for r in range(args.rounds):
        chunk = batches[2 + r * args.steps: 2 + (r + 1) * args.steps]
        tokens = sum(b.num_tgt_tokens for b in chunk)
        for name, system in systems.items():
            t0 = time.perf_counter()
            for batch in chunk:
                system.step(batch)
            rates[name].append(tokens / (time.perf_counter() - t0))
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in rates.items()))
    peer = "hf marian fp32" if "hf marian fp32" in systems else "ours fp32"
    result = {"threads": args.threads, "max_tokens": args.max_tokens, "rounds": args.rounds,
              "steps_per_round": args.steps, "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(), "systems": {}}
    print(f"\n{'system':18s} {'params':>8s} {'median tok/s':>13s} {'vs ' + peer:>22s}")
    for name, values in rates.items():
        median = statistics.median(values)
        ratio = median / statistics.median(rates[peer])
        result["systems"][name] = {"params": systems[name].params, "median_tok_per_s": median,
                                   "rounds_tok_per_s": values, f"ratio_to_{peer}": ratio}
        print(f"{name:18s} {systems[name].params / 1e6:7.2f}M {median:13.0f} {ratio:22.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
