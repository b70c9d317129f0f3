"""Decoding speed in sentences/s: ours, Hugging Face `generate` and CTranslate2 decoding the same
trained model, each with its BLEU so that speed is compared at equal quality.

    python benchmarks/decode.py CHECKPOINT --data ../shared/data/multi30k --split test_2016_flickr \
        --rounds 3 --json benchmarks/results/decode.json
    python benchmarks/decode.py CHECKPOINT --limit 50 --rounds 1    # a quick end-to-end check

Timed: the whole split, text in and text out (SentencePiece included), batches of 32 sentences
sorted by length, greedy and beam 5, on `--threads` CPU threads. Systems take turns batch by
batch, so machine noise hits them alike; the figure is the median over rounds. Ours, HF and CT2
each run in a worker process of their own (CTranslate2's OpenMP threads, once they have run,
halve the speed of PyTorch code in the same process), and only one works at a time; each
process's peak resident memory is reported beside the speed.

  ours         `translate_sentences` in fp32, in bf16 autocast, and with int8 dynamic quantization
               of every Linear (`translate.fast.quantize_int8`, as `--precision int8`), all with
               the fast engine (`--engine fast`, the default on the CPU).
  hf generate  transformers' `generate` on the model `translate export --format hf` writes
               (translate.export.hf): a `PegasusForConditionalGeneration` where Pegasus holds
               the model (pre-norm with final LayerNorms, sqrt(D)-scaled embeddings and our
               position table, so it is exact), else the export's own modeling file
               (`modeling_translate.py`: rotary positions, QK-norm, RMSNorm, ...).
               (Until the exporter, an M2M100 with our table written over its own; the same
               BART-family `generate`, but a saved M2M100 recomputes its table on loading.)
  ct2          `ctranslate2.Translator.translate_batch` on the TransformerSpec of
               `translate export --format ctranslate2` (translate.export.ct2); float32, and int8
               (quantized when loaded).
Before timing, HF logits and CT2 `score_batch` log-probs are checked against ours (teacher
forced), and greedy outputs on `--check` sentences.

What the peers cannot match exactly:
  - Length penalty: ours is GNMT's logprob / ((5 + len) / 6) ** 0.6; HF and CT2 only offer
    logprob / len ** alpha. Both get alpha = 0.6; the BLEU columns show what that changes.
  - Length limit: ours is 1.5 * |src| + 10 tokens per sentence (|src| with EOS, capped at the
    model's positions); HF and CT2 take one limit per batch, that of its longest source.
  - When a sentence's beam search stops: ours once no live hypothesis, ended at the next step,
    would outscore the best finished one (`decode.early_exit`, the default); CT2 once the best
    candidate of a step ends (its default early exit); HF once 5 hypotheses have ended
    (`early_stopping=True`, the soonest it offers). `--no-early-exit` measures ours searching
    on until none could win at any length (the outputs of searching on to 5 ended).

On a GPU (`--device cuda`) every system decodes there: ours with the plain engine (`--engine
plain`, the default on CUDA) and the gpu engine (`--engine gpu`, searches that read the device
every few steps), each in fp32 and bf16 autocast; HF `generate` in fp32 and bf16 autocast; CT2 in
float32 and bfloat16 where its wheel has CUDA. Timings end with the translations on the host.

    python benchmarks/decode.py CHECKPOINT --device cuda --json OUT/decode-cuda.json

`transformers` and `ctranslate2` are not project dependencies: a peer not installed is skipped.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from translate.loading import Loaded, load_checkpoint
from translate.config import DecodeConfig
from translate.data.batch import length_batches, pad
from translate.data.read import load_split
from translate.engine import FAST, GPU, PLAIN, Engine
from translate.export.ct2 import to_ctranslate2, vocabulary
from translate.export.hf import to_transformers
from translate.fast import accelerate, quantize_int8
from translate.hardware import autocast, benchmark_threads, cpu_name
from translate.inference import translate_sentences
from translate.models.transformer import Transformer
from translate.ready import Ready
from translate.scoring import score
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, EOS, PAD

LENPEN, BATCH, MODES = 0.6, 32, {"greedy": 1, "beam5": 5}
Translate = Callable[[Sequence[str], int], list[str]]  # (sentences, beam) -> translations


class Peer:
    """Text in, text out like ours: encode, batch by length, decode each batch, detokenize."""

    def __init__(self, tokenizer: Tokenizer, cfg: DecodeConfig, max_positions: int):
        self.tokenizer, self.cfg, self.max_positions = tokenizer, cfg, max_positions

    def __call__(self, sentences: Sequence[str], beam: int) -> list[str]:
        encoded = self.tokenizer.encode_src(sentences)  # pieces + EOS
        out: list[list[int]] = [[] for _ in sentences]
        for idx in length_batches([len(s) for s in encoded], self.cfg.max_tokens, BATCH):
            batch = [encoded[i] for i in idx]
            limit = int(self.cfg.max_len_a * max(map(len, batch)) + self.cfg.max_len_b)
            max_new = min(limit, self.max_positions - 1) + (beam > 1)  # EOS included
            for i, ids in zip(idx, self.decode(batch, beam, max_new)):
                out[i] = ids
        return self.tokenizer.decode_tgt(out)

    def decode(self, batch: list[list[int]], beam: int, max_new: int) -> list[list[int]]:
        """Source ids (EOS included) -> output ids (EOS excluded), at most max_new with EOS."""
        raise NotImplementedError


class HF(Peer):
    def __init__(self, hf: nn.Module, *args, device: str = "cpu", precision: str = "fp32"):
        super().__init__(*args)
        self.device, self.precision = torch.device(device), precision
        self.hf = hf.to(self.device)

    @torch.no_grad()
    def decode(self, batch: list[list[int]], beam: int, max_new: int) -> list[list[int]]:
        src = pad([torch.tensor(s) for s in batch]).to(self.device)  # (B, S)
        # beam options only for beam search: greedy warns that they are unused
        search = {"num_beams": beam, "length_penalty": LENPEN, "early_stopping": True}
        with autocast(self.device, self.precision):
            out = self.hf.generate(input_ids=src, attention_mask=src != PAD, do_sample=False,
                                   max_new_tokens=max_new, suppress_tokens=[PAD, BOS],
                                   **(search if beam > 1 else {}))
        rows = [row[1:] for row in out.tolist()]  # drop the decoder start token
        return [row[: row.index(EOS)] if EOS in row else [t for t in row if t != PAD]
                for row in rows]


class CT2(Peer):
    def __init__(self, model_dir: Path, vocabulary: list[str], compute_type: str, threads: int,
                 *args, device: str = "cpu"):
        import ctranslate2

        super().__init__(*args)
        self.translator = ctranslate2.Translator(str(model_dir), device,
                                                 compute_type=compute_type, intra_threads=threads)
        self.vocabulary, self.ids = vocabulary, {p: i for i, p in enumerate(vocabulary)}

    def decode(self, batch: list[list[int]], beam: int, max_new: int) -> list[list[int]]:
        found = self.translator.translate_batch(
            [[self.vocabulary[i] for i in s[:-1]] for s in batch],  # CT2 appends the EOS
            beam_size=beam,
            max_batch_size=BATCH, length_penalty=LENPEN, max_decoding_length=max_new,
            suppress_sequences=[[self.vocabulary[PAD]], [self.vocabulary[BOS]]])
        return [[self.ids[p] for p in r.hypotheses[0]] for r in found]


@torch.no_grad()
def check_peers(model: Transformer, tokenizer: Tokenizer, systems: dict[str, Translate],
                src: list[str], ref: list[str], n: int) -> dict:
    """Teacher-forced logits / log-probs and greedy outputs of the peers against ours."""
    report: dict = {}
    ids, tgt = tokenizer.encode_src(src[:8]), tokenizer.encode_tgt(ref[:8])  # pieces + EOS
    x, y = pad([torch.tensor(s) for s in ids]), pad([torch.tensor([BOS] + t) for t in tgt])
    logits = model(x, y[:, :-1])  # (B, T, V)
    real = y[:, 1:] != PAD  # (B, T)
    if isinstance(hf := systems.get("hf generate"), HF):
        theirs = hf.hf(input_ids=x, attention_mask=x != PAD, decoder_input_ids=y[:, :-1]).logits
        report["hf max |logit diff|"] = float((theirs - logits)[real].abs().max())
    if isinstance(ct2 := systems.get("ct2 float32"), CT2):
        scored = ct2.translator.score_batch([[ct2.vocabulary[i] for i in s[:-1]] for s in ids],
                                            [[ct2.vocabulary[i] for i in t[:-1]] for t in tgt])
        gold = F.log_softmax(logits, -1).gather(-1, y[:, 1:, None]).squeeze(-1)  # (B, T)
        report["ct2 max |logprob diff|"] = max(abs(lp - float(gold[b, t]))
                                               for b, r in enumerate(scored)
                                               for t, lp in enumerate(r.log_probs))
    reference = systems["ours fp32"](src[:n], 1)
    for name in ("hf generate", "ct2 float32"):
        if name in systems:
            same = sum(a == b for a, b in zip(reference, systems[name](src[:n], 1)))
            report[f"{name} greedy identical"] = f"{same}/{n}"
    for k, v in report.items():
        print(f"check: {k}: {v:.2e}" if isinstance(v, float) else f"check: {k}: {v}")
    return report


FAMILIES = ("ours", "hf", "ct2")  # systems that share a process when timed


def build_systems(loaded: Loaded, cfg: DecodeConfig, threads: int, ct2_dir: Path,
                  families: Sequence[str] = FAMILIES, device: str = "cpu"
                  ) -> dict[str, Translate]:
    """The systems of `families` on `device`; CTranslate2 converts our model into `ct2_dir`
    unless there."""
    model, tok = loaded.model, loaded.tokenizer
    peer_args = (tok, cfg, model.cfg.max_positions)
    on_gpu = torch.device(device).type == "cuda"
    systems: dict[str, Translate] = {}
    if "ours" in families:
        def ours(m: nn.Module, precision: str = "fp32", engine: Engine = FAST) -> Translate:
            ready = Ready(m, tok, device, precision, engine)  # prepared here, as named
            return lambda s, beam: translate_sentences(ready, s, replace(cfg, beam=beam))

        if on_gpu:  # the plain engine, as on CUDA by default, and the gpu engine's searches
            plain = copy.deepcopy(model).to(device)
            systems.update({"ours fp32": ours(plain, "fp32", PLAIN),
                            "ours bf16": ours(plain, "bf16", PLAIN),
                            "ours gpu fp32": ours(plain, "fp32", GPU),
                            "ours gpu bf16": ours(plain, "bf16", GPU)})
        else:
            fast = accelerate(copy.deepcopy(model))
            systems.update({"ours fp32": ours(fast), "ours bf16": ours(fast, "bf16"),
                            "ours int8": ours(accelerate(quantize_int8(model)))})
    if "hf" in families:
        try:
            hf = to_transformers(model)
            systems["hf generate"] = HF(hf, *peer_args, device=device)
            if on_gpu:
                systems["hf generate bf16"] = HF(copy.deepcopy(hf), *peer_args, device=device,
                                                 precision="bf16")
        except ImportError:
            print("transformers is not installed: measuring without the Hugging Face peer")
    if "ct2" in families:
        try:
            import ctranslate2

            if on_gpu and not ctranslate2.get_cuda_device_count():
                raise ImportError("this ctranslate2 has no CUDA")
            pieces = vocabulary(tok.tgt)
            if not (ct2_dir / "model.bin").exists():
                to_ctranslate2(model, pieces, pieces, ct2_dir)
            for ct in ("float32", "bfloat16") if on_gpu else ("float32", "int8"):
                systems[f"ct2 {ct}"] = CT2(ct2_dir, pieces, ct, threads, *peer_args,
                                           device="cuda" if on_gpu else "cpu")
        except ImportError as e:
            print(f"ctranslate2 cannot run here ({e}): measuring without the CTranslate2 peer")
    return systems


def serve(family: str, checkpoint: Path, ct2_dir: Path, threads: int, cfg: DecodeConfig,
          device: str, conn) -> None:
    """A worker process holding one family's systems: it answers (name, beam, sentences) with
    (seconds, translations) until it receives None, then sends its peak resident memory (MiB)."""
    torch.set_num_threads(threads)
    systems = build_systems(load_checkpoint(checkpoint), cfg, threads, ct2_dir, [family], device)
    conn.send(list(systems))
    while (job := conn.recv()) is not None:
        name, beam, sentences = job
        t0 = time.perf_counter()
        out = systems[name](sentences, beam)
        conn.send((time.perf_counter() - t0, out))
    conn.send(peak_rss_mib())


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (Linux counts ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_rounds(checkpoint: Path, ct2_dir: Path, threads: int, src: list[str],
                batches: list[list[int]], rounds: int, cfg: DecodeConfig,
                families: Sequence[str] = FAMILIES, device: str = "cpu"
                ) -> tuple[dict[str, list[float]], dict[str, list[str]], dict[str, float]]:
    """Seconds per round and first-round outputs, keyed "system mode", and each family's peak
    resident memory in MiB (its process's: the model, its systems, every round).

    Systems take turns batch by batch: every system decodes batch b (the order rotating)
    before any starts batch b + 1, so the VM's noise, which drifts over seconds, hits all of
    them alike, and a round's ratios are steady where whole passes in turn scattered by +-15%.
    A batch is what each system would cut from the whole split (the same sentences in the
    same order), so the work is that of whole passes.

    Each family runs in a process of its own, and only one process works at a time: in one
    process, CTranslate2's OpenMP threads slow PyTorch's down by about 2x after it has run.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    workers = {}
    for family in families:
        conn, child = ctx.Pipe()
        process = ctx.Process(target=serve, daemon=True,
                              args=(family, checkpoint, ct2_dir, threads, cfg, device, child))
        process.start()
        workers[family] = (process, conn, conn.recv())  # the names of its systems

    def run(conn, name: str, beam: int, sentences: list[str]):
        conn.send((name, beam, sentences))
        return conn.recv()

    jobs = [(conn, name, mode, beam) for _, conn, names in workers.values() for name in names
            for mode, beam in MODES.items()]
    for conn, name, _, beam in jobs:  # warm-up: allocator, oneDNN kernels, CT2 caches
        run(conn, name, beam, src[:BATCH])
    seconds: dict[str, list[float]] = {f"{name} {mode}": [] for _, name, mode, _ in jobs}
    outputs: dict[str, list[str]] = {key: [""] * len(src) for key in seconds}
    for r in range(rounds):
        for key in seconds:
            seconds[key].append(0.0)
        for b, batch in enumerate(batches):
            turn = (b + r) % len(jobs)
            for conn, name, mode, beam in jobs[turn:] + jobs[:turn]:
                took, out = run(conn, name, beam, [src[i] for i in batch])
                seconds[f"{name} {mode}"][-1] += took
                if r == 0:
                    for i, text in zip(batch, out):
                        outputs[f"{name} {mode}"][i] = text
        print(f"round {r + 1}: " + ", ".join(f"{k} {len(src) / v[-1]:.1f}"
                                             for k, v in seconds.items()), flush=True)
    peaks = {}
    for family, (process, conn, _) in workers.items():
        conn.send(None)
        peaks[family] = conn.recv()
        process.join()
    return seconds, outputs, peaks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--limit", type=int, default=0, help="first N sentences only (0: all)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=benchmark_threads(),
                    help="CPU threads (default: OMP_NUM_THREADS, else 2)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (a GPU)")
    ap.add_argument("--peers", default="hf,ct2",
                    help="comma-separated peers to time beside ours: hf, ct2 (default both)")
    ap.add_argument("--check", type=int, default=30, help="sentences for the greedy equality check")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/decode.json"))
    ap.add_argument("--no-early-exit", dest="early_exit", action="store_false",
                    help="ours searches on until no live hypothesis could win at any length")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_checkpoint(args.checkpoint)
    src, ref = load_split(replace(loaded.recipe.data, dataset=args.data), args.split)
    if args.limit:
        src, ref = src[: args.limit], ref[: args.limit]
    cfg = DecodeConfig(lenpen=LENPEN, batch_size=BATCH, max_tokens=10 ** 9,
                       early_exit=args.early_exit)
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dir = Path(tmp) / "ct2"
        peers = [p for p in args.peers.split(",") if p]
        if not set(peers) <= {"hf", "ct2"}:
            ap.error(f"--peers takes hf and ct2, got {args.peers}")
        families = ("ours", *peers) if isinstance(loaded.model, Transformer) else ("ours",)
        if not isinstance(loaded.model, Transformer):
            print(f"{loaded.recipe.model.arch}: the peers take Transformers only; measuring ours")
        systems = build_systems(loaded, cfg, args.threads, ct2_dir, families)
        checks = check_peers(loaded.model, loaded.tokenizer, systems, src, ref,
                             min(args.check, len(src)))
        del systems  # checked on the CPU; timed in worker processes, one family each
        lengths = [len(ids) for ids in loaded.tokenizer.encode_src(src)]
        batches = length_batches(lengths, cfg.max_tokens, BATCH)  # as every system cuts them
        seconds, outputs, peaks = time_rounds(args.checkpoint, ct2_dir, args.threads, src,
                                              batches, args.rounds, cfg, families, args.device)
        names = list(dict.fromkeys(key.rsplit(" ", 1)[0] for key in seconds))

    rate = {k: len(src) / statistics.median(v) for k, v in seconds.items()}
    bleu = {k: score(out, ref).bleu for k, out in outputs.items()}
    machine = {"platform": platform.platform(), "cpu": cpu_name(), "cores": os.cpu_count(),
               "python": platform.python_version(), "torch": torch.__version__,
               "torch_threads": torch.get_num_threads(), "ct2_intra_threads": args.threads}
    machine.update({m: sys.modules[m].__version__ for m in ("transformers", "ctranslate2")
                    if m in sys.modules})
    if args.device != "cpu":
        machine["gpu"] = torch.cuda.get_device_name(args.device)
    result = {"command": " ".join(sys.argv), "split": args.split, "sentences": len(src),
              "device": args.device,
              "batch_sentences": BATCH, "lenpen": LENPEN, "early_exit": args.early_exit,
              "rounds": args.rounds,
              "machine": machine, "checks": checks, "systems": {}, "ratios": {},
              "peak_rss_mib": peaks}
    print(f"\n{'system':12s} {'greedy sent/s':>14s} {'beam5 sent/s':>13s} "
          f"{'BLEU greedy':>12s} {'BLEU beam5':>11s}")
    for name in names:
        result["systems"][name] = {key: value for m in MODES for key, value in [
            (f"{m}_sent_per_s", rate[f"{name} {m}"]), (f"bleu_{m}", bleu[f"{name} {m}"]),
            (f"{m}_round_seconds", seconds[f"{name} {m}"])]}
        print(f"{name:12s} {rate[f'{name} greedy']:14.1f} {rate[f'{name} beam5']:13.1f} "
              f"{bleu[f'{name} greedy']:12.2f} {bleu[f'{name} beam5']:11.2f}")
    print("peak resident memory (MiB, each family's process): "
          + ", ".join(f"{family} {mib:,.0f}" for family, mib in peaks.items()))
    print()
    for ours, peer in (("ours fp32", "hf generate"), ("ours fp32", "ct2 float32"),
                       ("ours int8", "ct2 int8"), ("ours gpu fp32", "hf generate"),
                       ("ours gpu bf16", "hf generate bf16"), ("ours gpu bf16", "ct2 bfloat16")):
        for mode in MODES if peer in names and ours in names else ():
            ratio = rate[f"{ours} {mode}"] / rate[f"{peer} {mode}"]
            # the same round's pair: machine drift between rounds cancels out
            paired = [theirs / mine for mine, theirs in zip(seconds[f"{ours} {mode}"],
                                                            seconds[f"{peer} {mode}"])]
            result["ratios"][f"{ours} / {peer} {mode}"] = ratio
            result["ratios"][f"{ours} / {peer} {mode}, per round"] = paired
            rounds = ", ".join(f"{r:.2f}" for r in paired)
            print(f"{ours} / {peer} {mode}: {ratio:.2f}x the sentences/s (per round: {rounds}; "
                  f"median {statistics.median(paired):.2f})")
    for mode in MODES:  # what precision `auto` should decode in on this CPU
        paired = [fp32 / bf16 for fp32, bf16 in zip(seconds[f"ours fp32 {mode}"],
                                                   seconds[f"ours bf16 {mode}"])]
        result["ratios"][f"ours bf16 / ours fp32 {mode}, per round"] = paired
        print(f"ours bf16 / ours fp32 {mode}: per round "
              f"{', '.join(f'{r:.2f}' for r in paired)}; median {statistics.median(paired):.2f}")
    peers = [n for n in names if n.startswith("hf")]
    if peers:  # our fastest beam 5 against the peer's fastest, each with its BLEU
        ours = max((n for n in names if n.startswith("ours")), key=lambda n: rate[f"{n} beam5"])
        peer = max(peers, key=lambda n: rate[f"{n} beam5"])
        result["beam5_vs_hf"] = {"ours": ours, "hf": peer,
                                 "ratio": rate[f"{ours} beam5"] / rate[f"{peer} beam5"],
                                 "bleu_ours": bleu[f"{ours} beam5"],
                                 "bleu_hf": bleu[f"{peer} beam5"]}
        print(f"beam 5, fastest against fastest: {ours} / {peer} "
              f"{result['beam5_vs_hf']['ratio']:.2f}x the sentences/s, BLEU "
              f"{bleu[f'{ours} beam5']:.2f} against {bleu[f'{peer} beam5']:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
