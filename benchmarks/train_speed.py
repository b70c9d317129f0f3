"""Training throughput in target tokens/s (pieces + EOS) on real Multi30k batches, and model
FLOPs utilisation (MFU) against the matmul peak measured in the same run.

Measured in one process and on the same batches: our Transformer in each precision with the
fast engine on and off, and, when `transformers` is installed, a Hugging Face MarianMT of the
same size (the peer) in fp32 and, where bf16 is measured, in bf16 autocast too, so that the
peer runs at its best on the CPU at hand. Systems take turns round by round so machine noise
hits them alike; the figure is the median over rounds, each system is given as a ratio to the
peer's best, and MFU = 6 x parameters x target tokens/s over the matmul peak of the system's
precision (a square matmul, timed between the rounds).

    python benchmarks/train_speed.py --data ../shared/data/multi30k --rounds 5 --steps 8
    python benchmarks/train_speed.py ... --precisions fp32,bf16 --json benchmarks/results/train_speed.json

bf16 is measured by default where the CPU has AMX (there `translate train` picks it), fp32
everywhere. On a GPU (`--device cuda`) every system takes the fused AdamW kernel (as `translate
train` does there), the batches are copied to the GPU once, each timing ends with a synchronize,
the peak is an 8192^3 matmul, `--compile` adds our plain engine under `torch.compile` and
`--cuda-graphs` our plain engine's whole step recorded as CUDA graphs (`train.cuda_graphs`):

    python benchmarks/train_speed.py --device cuda --precisions fp32,bf16 --max-tokens 16384 \
        --length-multiple 8 --cuda-graphs --json benchmarks/results/train_speed-cuda.json

`--shape base` and `--shape big` time WMT14's Transformer base and big (Vaswani et al., 2017;
a 32k shared vocabulary) and MarianMT at the same widths, on synthetic batches: random ids with
lengths drawn like WMT14 EN-DE's pieces (a median of 25, a tail to 250), batched as training
batches them, so no corpus has to travel to the GPU. `--shape tiny` is for dry runs.
`--length-multiple` batches as `train.length_multiple` does.

    python benchmarks/train_speed.py --device cuda --shape big --precisions bf16 \
        --max-tokens 12500 --json benchmarks/results/train_speed-cuda-big.json

`--loss-chunk N` adds our plain engine with the loss that never holds the (B, T, V) logits
(`train.loss_chunk`, N target tokens at a time). On a GPU each system's peak memory in its
warm-up is reported beside its speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from translate.config import DataConfig, TokenizerConfig, TrainConfig
from translate.data.batch import collate, iterate_batches, token_batches
from translate.data.clean import clean_text_pairs
from translate.data.encode import encode_pairs
from translate.data.read import load_split
from translate.engine import FAST, PLAIN
from translate.hardware import (autocast, benchmark_threads, cpu_has_amx, cpu_name,
                                pick_device)
from translate.models import TransformerConfig, build_model, count_parameters
from translate.tokenizer import Tokenizer
from translate.tokens import EOS, PAD
from translate.training.batch_loss import BatchLoss
from translate.training.graphs import StepGraphs
from translate.training.optim import make_optimizer

MATMUL_SIZE = {"cpu": 1024, "cuda": 8192}  # the peak: a square matmul, 2.1 GFLOP on the CPU
# Model widths and layers (each side): the Multi30k recipe's, WMT14's base and big, a dry run's.
SHAPES = {"multi30k": dict(d_model=256, heads=4, ffn_dim=1024, layers=3),
          "base": dict(d_model=512, heads=8, ffn_dim=2048, layers=6),
          "big": dict(d_model=1024, heads=16, ffn_dim=4096, layers=6),
          "tiny": dict(d_model=64, heads=4, ffn_dim=128, layers=1)}
SYNTHETIC_VOCAB = 32_000


def synthetic_batches(max_tokens: int, n: int, vocab: int = SYNTHETIC_VOCAB, seed: int = 1,
                      multiple: int = 1) -> list:
    """`n` batches of random ids whose lengths are drawn like WMT14 EN-DE's with a 32k BPE
    vocabulary (log-normal, a median of 25 pieces, clipped to 2-250; targets ~8% longer),
    batched by `token_batches` as training batches them, each target ending in EOS."""
    rng = np.random.default_rng(seed)
    src = np.clip(rng.lognormal(np.log(25), 0.6, 100_000), 2, 250).astype(np.int64)
    tgt = np.clip(np.rint(src * rng.normal(1.08, 0.12, src.size)), 2, 250).astype(np.int64)
    batches = token_batches(src, tgt, max_tokens, shuffle=True, seed=seed, multiple=multiple)

    def ids(length: int) -> np.ndarray:
        return np.append(rng.integers(EOS + 1, vocab, length - 1), EOS)

    return [collate([ids(src[i]) for i in batches[k]], [ids(tgt[i]) for i in batches[k]],
                    multiple) for k in range(min(n, len(batches)))]


def make_batches(data: str, max_tokens: int, n: int, multiple: int = 1):
    src, tgt = load_split(DataConfig(dataset=data), "train")
    keep, _ = clean_text_pairs(src, tgt)
    src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    tok = Tokenizer.train(src, tgt, TokenizerConfig(vocab_size=8000))
    pairs = encode_pairs(tok, src, tgt)
    batches = []
    for batch in iterate_batches(pairs, max_tokens, shuffle=True, seed=1, multiple=multiple):
        batches.append(batch)
        if len(batches) == n:
            break
    return tok, batches


def matmul_peak(dtype: torch.dtype, reps: int = 20, device: str = "cpu", n: int = 0) -> float:
    """GFLOP/s of an `n`-square matmul in `dtype` (by default the device's size in
    MATMUL_SIZE): the median of `reps` timings after a warm-up."""
    n = n or MATMUL_SIZE[torch.device(device).type]
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(reps):
        synchronize(device)
        t0 = time.perf_counter()
        a @ b
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / statistics.median(times) / 1e9


def synchronize(device: str | torch.device) -> None:
    """Wait for the device's queued work (a GPU's kernels run after the host returns)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def adamw(model: torch.nn.Module, device: torch.device) -> torch.optim.AdamW:
    """AdamW as both systems get it: the fused kernel, as `translate train` takes it on a GPU
    and a CPU."""
    return torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98),
                             fused=True if device.type in ("cuda", "cpu") else None)


class Ours:
    def __init__(self, vocab: int, precision: str, engine=FAST, device: str = "cpu",
                 compiled: bool = False, dropout: float = 0.1, shape: str = "multi30k",
                 loss_chunk: int = 0):
        torch.manual_seed(0)
        dims = SHAPES[shape]
        cfg = TransformerConfig(d_model=dims["d_model"], heads=dims["heads"],
                                ffn_dim=dims["ffn_dim"], encoder_layers=dims["layers"],
                                decoder_layers=dims["layers"], dropout=dropout)
        self.engine, self.device = engine, torch.device(device)
        self.model = engine.prepare(build_model(cfg, vocab, vocab, shared_vocab=True))
        self.model = self.model.to(self.device).train()
        self.opt = adamw(self.model, self.device)
        self.precision = precision
        self.params = count_parameters(self.model)
        forward = torch.compile(self.model) if compiled else self.model
        self.loss = BatchLoss(self.model, forward, engine.loss, self.device, precision,
                              loss_chunk)

    def step(self, batch) -> None:
        loss, _ = self.loss(batch.src, batch.tgt_in, batch.tgt_out, 0.1)
        (loss / batch.num_tgt_tokens).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class OursGraphs(Ours):
    """Ours with the plain engine and `train.cuda_graphs`: the step recorded once per batch shape
    and replayed (`translate.training.graphs.StepGraphs`, as `translate train` runs it; on a CPU
    it runs unrecorded)."""

    def __init__(self, vocab: int, precision: str, device: str = "cpu", dropout: float = 0.1,
                 shape: str = "multi30k", loss_chunk: int = 0):
        super().__init__(vocab, precision, PLAIN, device, dropout=dropout, shape=shape,
                         loss_chunk=loss_chunk)
        cfg = TrainConfig(lr=1e-4, betas=(0.9, 0.98), weight_decay=0.01)  # as `adamw` has it
        self.opt = make_optimizer(self.model, cfg, capturable=True)
        self.graphs = StepGraphs(self.model, None, self.opt, 0.1, 1.0, self.loss, self.device,
                                 torch.float64)

    def step(self, batch) -> None:
        self.graphs.step(batch, batch.num_tgt_tokens, ema_weight=0.0)


class Marian:
    """The peer: Hugging Face MarianMT built from a config of our model's `shape` (the
    Multi30k recipe's: 3+3 layers, d 256, 4 heads, FFN 1024), in fp32 or under bf16 autocast."""

    def __init__(self, vocab: int, precision: str = "fp32", device: str = "cpu",
                 shape: str = "multi30k"):
        from transformers import MarianConfig, MarianMTModel

        torch.manual_seed(0)
        dims = SHAPES[shape]
        cfg = MarianConfig(vocab_size=vocab, d_model=dims["d_model"],
                           encoder_layers=dims["layers"], decoder_layers=dims["layers"],
                           encoder_attention_heads=dims["heads"],
                           decoder_attention_heads=dims["heads"],
                           encoder_ffn_dim=dims["ffn_dim"], decoder_ffn_dim=dims["ffn_dim"],
                           dropout=0.1,
                           pad_token_id=PAD, eos_token_id=3, decoder_start_token_id=2,
                           max_position_embeddings=512, share_encoder_decoder_embeddings=True)
        self.device = torch.device(device)
        self.model = MarianMTModel(cfg).to(self.device).train()
        self.opt = adamw(self.model, self.device)
        self.params = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.precision = precision

    def step(self, batch) -> None:
        with autocast(self.device, self.precision):
            out = self.model(input_ids=batch.src, attention_mask=batch.src != PAD,
                             decoder_input_ids=batch.tgt_in,
                             decoder_attention_mask=batch.tgt_in != PAD)
        loss = torch.nn.functional.cross_entropy(out.logits.float().flatten(0, 1),
                                                 batch.tgt_out.flatten(), ignore_index=PAD,
                                                 label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def build_systems(vocab: int, precisions: list[str], device: str = "cpu",
                  compiled: bool = False, shape: str = "multi30k", graphs: bool = False,
                  loss_chunk: int = 0) -> dict:
    """Ours in each precision with the fast engine and the plain one (and the plain one
    compiled, with `compiled`, through CUDA graphs, with `graphs`, and with its loss in chunks
    of `loss_chunk` target tokens, also through the graphs); the peer in each; all of
    `shape`."""
    systems = {}
    for precision in precisions:
        if loss_chunk:
            systems[f"ours {precision} chunks"] = Ours(vocab, precision, PLAIN, device,
                                                       shape=shape, loss_chunk=loss_chunk)
            if graphs:
                systems[f"ours {precision} graphs chunks"] = OursGraphs(
                    vocab, precision, device, shape=shape, loss_chunk=loss_chunk)
        systems[f"ours {precision} fast"] = Ours(vocab, precision, FAST, device, shape=shape)
        systems[f"ours {precision} plain"] = Ours(vocab, precision, PLAIN, device, shape=shape)
        if compiled:
            systems[f"ours {precision} compiled"] = Ours(vocab, precision, PLAIN, device, True,
                                                         shape=shape)
        if graphs:
            systems[f"ours {precision} graphs"] = OursGraphs(vocab, precision, device,
                                                             shape=shape)
    try:
        for precision in precisions:
            systems[f"hf marian {precision}"] = Marian(vocab, precision, device, shape)
    except ImportError:
        print("transformers is not installed: measuring without the MarianMT peer")
    return systems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8, help="steps per system per round")
    ap.add_argument("--threads", type=int, default=benchmark_threads(),
                    help="CPU threads (default: OMP_NUM_THREADS, else 2)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (a GPU)")
    ap.add_argument("--compile", action="store_true",
                    help="also our plain engine under torch.compile (its warm-up is not timed)")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="also our plain engine's step recorded as CUDA graphs (train.cuda_graphs"
                         "; each shape's recording is not timed)")
    ap.add_argument("--loss-chunk", type=int, default=0,
                    help="also our plain engine with its loss in chunks of this many target "
                         "tokens (train.loss_chunk), and through the graphs with --cuda-graphs")
    ap.add_argument("--cudnn-attention", action="store_true",
                    help="on a GPU, leave PyTorch's cuDNN attention on (translate turns it off)")
    ap.add_argument("--precisions", default=None,
                    help="comma-separated: fp32, bf16 (default: bf16 too where the CPU has AMX, "
                         "and on a GPU)")
    ap.add_argument("--shape", choices=list(SHAPES), default="multi30k",
                    help="model widths; base, big and tiny train on synthetic batches")
    ap.add_argument("--length-multiple", type=int, default=1,
                    help="round batches' lengths up to a multiple (train.length_multiple)")
    ap.add_argument("--matmul-size", type=int, default=0,
                    help="the peak's square matmul (default: 1024 on a CPU, 8192 on a GPU; a "
                         "dry run's smaller one, as bf16 without bf16 kernels runs ~1 GFLOP/s)")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/train_speed.json"))
    args = ap.parse_args()
    if args.length_multiple < 1:
        ap.error(f"--length-multiple must be at least 1, got {args.length_multiple}")
    if args.loss_chunk < 0:
        ap.error(f"--loss-chunk must be 0 (off) or more, got {args.loss_chunk}")
    if args.matmul_size < 0:
        ap.error(f"--matmul-size must be 0 (the device's) or more, got {args.matmul_size}")
    device = pick_device(args.device)  # on a GPU, as translate sets it up: no cuDNN attention
    if args.cudnn_attention:
        torch.backends.cuda.enable_cudnn_sdp(True)
    on_gpu = device.type == "cuda"
    precisions = (args.precisions or ("fp32,bf16" if on_gpu or cpu_has_amx() else "fp32")
                  ).split(",")
    if not set(precisions) <= {"fp32", "bf16"}:
        ap.error(f"--precisions takes fp32 and bf16, got {args.precisions}")
    matmul_size = args.matmul_size or MATMUL_SIZE[device.type]
    torch.set_num_threads(args.threads)
    n = args.steps * args.rounds + 2
    if args.shape == "multi30k":
        tok, batches = make_batches(args.data, args.max_tokens, n, args.length_multiple)
        vocab = tok.tgt_vocab_size
    else:
        vocab = SYNTHETIC_VOCAB if args.shape != "tiny" else 1000
        batches = synthetic_batches(args.max_tokens, n, vocab, multiple=args.length_multiple)
    batches = [batch.to(device) for batch in batches]
    systems = build_systems(vocab, precisions, args.device, args.compile, args.shape,
                            args.cuda_graphs, args.loss_chunk)
    memory: dict[str, float] = {}  # on a GPU, each system's peak memory in its warm-up, GB
    for name, system in systems.items():  # warm-up: allocator, oneDNN kernels; a compiled or
        recorded = "compiled" in name or "graphs" in name  # recorded one sees every shape
        if on_gpu:
            torch.cuda.reset_peak_memory_stats(device)
        for batch in batches if recorded else batches[:2]:
            system.step(batch)
        if on_gpu:
            memory[name] = torch.cuda.max_memory_allocated(device) / 1e9
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    rates: dict[str, list[float]] = {name: [] for name in systems}
    peaks: dict[str, list[float]] = {p: [] for p in precisions}
    for r in range(args.rounds):
        for precision in precisions:
            peaks[precision].append(matmul_peak(dtypes[precision], device=args.device,
                                                  n=matmul_size))
        chunk = batches[2 + r * args.steps: 2 + (r + 1) * args.steps]
        tokens = sum(b.num_tgt_tokens for b in chunk)
        order = list(systems) if r % 2 == 0 else list(reversed(systems))
        for name in order:
            synchronize(device)
            t0 = time.perf_counter()
            for batch in chunk:
                systems[name].step(batch)
            synchronize(device)
            rates[name].append(tokens / (time.perf_counter() - t0))
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in rates.items())
              + " | matmul GFLOP/s " + ", ".join(f"{p} {v[-1]:.0f}" for p, v in peaks.items()))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    peers = [name for name in systems if name.startswith("hf marian")]
    peer = max(peers, key=medians.get) if peers else "ours fp32 plain"
    peak = {p: statistics.median(v) for p, v in peaks.items()}
    result = {"shape": args.shape, "dims": SHAPES[args.shape],
              "data": "multi30k" if args.shape == "multi30k" else "synthetic",
              "length_multiple": args.length_multiple,
              "threads": args.threads, "max_tokens": args.max_tokens, "rounds": args.rounds,
              "steps_per_round": args.steps, "torch": torch.__version__, "cpu": cpu_name(),
              "amx": cpu_has_amx(), "device": args.device,
              "cudnn_attention": on_gpu and torch.backends.cuda.cudnn_sdp_enabled(),
              "gpu": torch.cuda.get_device_name(device) if on_gpu else None,
              "matmul_size": matmul_size, "matmul_peak_gflops": peak, "peer": peer,
              "loss_chunk": args.loss_chunk,
              "flops_per_target_token": "6 x parameters", "systems": {}}
    print(f"\nmatmul peak ({matmul_size}^3, median): "
          + ", ".join(f"{p} {g:.0f} GFLOP/s" for p, g in peak.items()))
    print(f"\n{'system':20s} {'params':>8s} {'median tok/s':>13s} {'vs ' + peer:>22s} {'MFU':>7s}")
    for name, values in rates.items():
        system = systems[name]
        ratio = medians[name] / medians[peer]
        mfu = 6 * system.params * medians[name] / (peak[system.precision] * 1e9)
        result["systems"][name] = {"params": system.params, "precision": system.precision,
                                   "median_tok_per_s": medians[name], "rounds_tok_per_s": values,
                                   "ratio_to_peer_best": ratio, "mfu": mfu,
                                   "peak_memory_gb": memory.get(name)}
        peak_gb = f" {memory[name]:6.1f} GB" if name in memory else ""
        print(f"{name:20s} {system.params / 1e6:7.2f}M {medians[name]:13.0f} {ratio:22.2f} "
              f"{mfu:6.1%}{peak_gb}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
