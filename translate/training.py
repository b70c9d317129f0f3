"""Training: recipe in, run folder out (checkpoints, metrics log, tokenizer, test translations)."""

from __future__ import annotations

import copy
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from translate.checkpoint import save_checkpoint
from translate.config import Recipe, save_recipe
from translate.data import (Batch, EncodedPairs, clean_text_pairs, collate, encode_pairs,
                            filter_lengths, load_split, resolve_dataset, token_batches)
from translate.evaluation import score, translate_sentences
from translate.loss import label_smoothed_cross_entropy
from translate.models import build_model, count_parameters
from translate.tokenizer import PAD, Tokenizer
from translate.utils import autocast, pick_device, resolve_precision, seed_everything

log = logging.getLogger(__name__)


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warm-up to `peak` over `warmup` steps, then peak * sqrt(warmup / step)."""
    step = max(step, 1)
    if step < warmup:
        return peak * step / warmup
    return peak * math.sqrt(warmup / step)


class MetricsLog:
    """Append-only JSON lines (metrics.jsonl), mirrored to TensorBoard when it is installed."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "a", encoding="utf-8")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(path.parent / "tensorboard"))
        except Exception:  # tensorboard is optional
            self.tb = None

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "kind"):
                    self.tb.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


@dataclass
class TrainResult:
    run_dir: Path
    best_checkpoint: Path
    best_step: int
    steps: int
    best_dev_bleu: float
    test_scores: dict = field(default_factory=dict)


def prepare_data(recipe: Recipe, run_dir: Path) -> tuple[Tokenizer, EncodedPairs, dict]:
    """Load and clean train, train (and save) the tokenizer, encode and filter; return dev text."""
    cfg = recipe.data
    log.info("dataset: %s (%s -> %s)", resolve_dataset(cfg), cfg.src_lang, cfg.tgt_lang)
    src, tgt = load_split(cfg, "train")
    keep, stats = clean_text_pairs(src, tgt)
    src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    tokenizer = Tokenizer.train(src, tgt, recipe.tokenizer, recipe.train.seed)
    tokenizer.save(run_dir, cfg.src_lang, cfg.tgt_lang)
    log.info("tokenizer: %s %d pieces (%s)", recipe.tokenizer.model_type, tokenizer.tgt_vocab_size,
             "joint" if tokenizer.joint else "separate vocabularies")
    train = filter_lengths(encode_pairs(tokenizer, src, tgt, cfg.cache_dir), cfg.max_len,
                           cfg.max_len_ratio, stats)
    log.info("train pairs: %d read, %d kept (empty: %d, no letters: %d, over %d pieces: %d, "
             "length ratio over %.1f: %d)", stats.total, stats.kept, stats.empty, stats.no_letters,
             cfg.max_len, stats.too_long, cfg.max_len_ratio, stats.bad_ratio)
    dev_src, dev_tgt = load_split(cfg, "dev")
    dev_keep, _ = clean_text_pairs(dev_src, dev_tgt)
    dev = {"src": [dev_src[i] for i in dev_keep], "tgt": [dev_tgt[i] for i in dev_keep]}
    dev["pairs"] = encode_pairs(tokenizer, dev["src"], dev["tgt"], cfg.cache_dir)
    return tokenizer, train, dev


class Trainer:
    """Holds the model, optimizer and counters; `run()` trains until a stopping rule fires."""

    def __init__(self, recipe: Recipe, run_dir: Path, device: Optional[str] = None,
                 progress: bool = True):
        self.recipe, self.run_dir, self.progress = recipe, run_dir, progress
        self.cfg = recipe.train
        self.device = pick_device(device)
        self.precision = resolve_precision(self.cfg.precision, self.device)
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        seed_everything(self.cfg.seed)
        self.tokenizer, self.train_pairs, self.dev = prepare_data(recipe, run_dir)
        self.model = build_model(recipe.model, self.tokenizer.src_vocab_size,
                                 self.tokenizer.tgt_vocab_size, self.tokenizer.joint).to(self.device)
        n_params = count_parameters(self.model)
        print(f"{recipe.model.arch}: {n_params / 1e6:.2f}M parameters, device {self.device}, "
              f"precision {self.precision}, {torch.get_num_threads()} CPU threads", flush=True)
        self.forward = torch.compile(self.model) if self.cfg.compile else self.model
        # Exponential moving average of the weights: validated, saved and used to translate.
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False) \
            if self.cfg.ema_decay > 0 else None
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr,
                                           betas=tuple(self.cfg.betas), eps=1e-9,
                                           weight_decay=self.cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: inverse_sqrt_lr(s, 1.0, self.cfg.warmup))
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.metrics = MetricsLog(run_dir / "metrics.jsonl")
        self.step = self.epoch = 0
        self.best_bleu, self.bad_evals = -1.0, 0
        self.kept: list[Path] = []
        self.last_eval_seconds = 0.0
        self.n_params = n_params

    # -- one optimizer step ------------------------------------------------------------------

    def train_step(self, batches: list[Batch]) -> tuple[float, int]:
        """Forward/backward over `accum_steps` batches, then one optimizer step."""
        self.model.train()
        total_tokens = sum(b.num_tgt_tokens for b in batches)
        nll_sum = 0.0
        for batch in batches:
            batch = batch.to(self.device)
            with autocast(self.device, self.precision):
                logits = self.forward(batch.src, batch.tgt_in)  # (B, T, V)
            loss, nll = label_smoothed_cross_entropy(logits, batch.tgt_out,
                                                     self.cfg.label_smoothing, PAD)
            self.scaler.scale(loss / total_tokens).backward()
            nll_sum += float(nll.detach())
        if self.cfg.clip_norm > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.step += 1
        if self.ema is not None:
            update_ema(self.ema, self.model, self.cfg.ema_decay, self.step)
        return nll_sum / total_tokens, total_tokens

    @property
    def eval_model(self) -> nn.Module:
        """The weights to validate, save and translate with: the EMA when there is one."""
        return self.ema if self.ema is not None else self.model

    # -- validation --------------------------------------------------------------------------

    @torch.no_grad()
    def dev_loss(self) -> float:
        model = self.eval_model.eval()
        pairs = self.dev["pairs"]
        nll, tokens = 0.0, 0
        for idx in token_batches([len(s) for s in pairs.src], [len(t) for t in pairs.tgt],
                                 self.cfg.max_tokens, shuffle=False):
            batch = collate([pairs.src[i] for i in idx], [pairs.tgt[i] for i in idx]).to(self.device)
            with autocast(self.device, self.precision):
                logits = model(batch.src, batch.tgt_in)
            nll += float(label_smoothed_cross_entropy(logits, batch.tgt_out, 0.0, PAD)[1])
            tokens += batch.num_tgt_tokens
        return nll / max(tokens, 1)

    def validate(self, elapsed: float, train_seconds: float) -> bool:
        """Score the dev set, log it, save checkpoints; return True when patience runs out."""
        loss = self.dev_loss()
        hyps = translate_sentences(self.eval_model, self.tokenizer, self.dev["src"], self.recipe.decode,
                                   self.device, self.precision)
        bleu = score(hyps, self.dev["tgt"], self.recipe.data.tgt_lang).bleu
        improved = bleu > self.best_bleu
        record = {"kind": "valid", "step": self.step, "epoch": self.epoch, "dev_loss": loss,
                  "dev_ppl": math.exp(min(loss, 50)), "dev_bleu": bleu, "best": improved,
                  "elapsed": elapsed, "train_seconds": train_seconds}
        for split in self.recipe.train.monitor_splits:
            src, ref = self.monitor[split]
            out = translate_sentences(self.eval_model, self.tokenizer, src, self.recipe.decode,
                                      self.device, self.precision)
            record[f"{split}_bleu"] = score(out, ref, self.recipe.data.tgt_lang).bleu
        self.metrics.write(record)
        tqdm_write(f"step {self.step}: dev loss {loss:.3f}, dev BLEU {bleu:.2f}"
                   f"{' (best)' if improved else ''}, {elapsed / 60:.1f} min")
        self.save(f"step_{self.step}.pt", elapsed)
        if improved:
            self.best_bleu, self.bad_evals = bleu, 0
            self.save("best.pt", elapsed)
        else:
            self.bad_evals += 1
        return 0 < self.cfg.patience <= self.bad_evals

    def save(self, name: str, elapsed: float) -> None:
        path = self.run_dir / name
        save_checkpoint(path, self.eval_model, self.recipe, self.tokenizer, self.step, {
            # the optimizer's own weights, to resume from; "model" holds the EMA when enabled
            **({"train_model": self.model.state_dict()} if self.ema is not None else {}),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
            "epoch": self.epoch, "best_dev_bleu": max(self.best_bleu, 0.0), "elapsed": elapsed,
        })
        if name.startswith("step_"):
            self.kept.append(path)
            while len(self.kept) > self.cfg.keep_last:
                self.kept.pop(0).unlink(missing_ok=True)

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        from tqdm.auto import tqdm

        cfg = self.cfg
        self.monitor = {s: load_split(self.recipe.data, s) for s in cfg.monitor_splits}
        lengths_src = [len(s) for s in self.train_pairs.src]
        lengths_tgt = [len(t) for t in self.train_pairs.tgt]
        bar = tqdm(total=cfg.max_steps or None, disable=not self.progress, unit="step",
                   dynamic_ncols=True)
        start = time.perf_counter()
        train_seconds, last_eval = 0.0, start
        window_tokens, window_time, window_loss = 0, 0.0, []
        stop = False
        while not stop:
            self.epoch += 1
            batches = token_batches(lengths_src, lengths_tgt, cfg.max_tokens, shuffle=True,
                                    seed=cfg.seed * 1000 + self.epoch)
            for first in range(0, len(batches), cfg.accum_steps):
                group = [collate([self.train_pairs.src[i] for i in idx],
                                 [self.train_pairs.tgt[i] for i in idx])
                         for idx in batches[first: first + cfg.accum_steps]]
                t0 = time.perf_counter()
                loss, tokens = self.train_step(group)
                dt = time.perf_counter() - t0
                train_seconds += dt
                window_tokens, window_time = window_tokens + tokens, window_time + dt
                window_loss.append(loss)
                bar.update(1)
                if self.step % cfg.log_every == 0:
                    lr = self.scheduler.get_last_lr()[0]
                    record = {"kind": "train", "step": self.step, "epoch": self.epoch,
                              "loss": sum(window_loss) / len(window_loss), "lr": lr,
                              "tok_per_s": window_tokens / window_time,
                              "elapsed": time.perf_counter() - start,
                              "train_seconds": train_seconds}
                    self.metrics.write(record)
                    bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{lr:.2e}",
                                    tok_s=f"{record['tok_per_s']:.0f}", ep=self.epoch)
                    window_tokens, window_time, window_loss = 0, 0.0, []
                now = time.perf_counter()
                # Stop early enough that the final validation ends within the budget.
                out_of_time = cfg.max_minutes and (
                    now - start + self.last_eval_seconds >= cfg.max_minutes * 60)
                out_of_steps = cfg.max_steps and self.step >= cfg.max_steps
                due = (cfg.eval_every and self.step % cfg.eval_every == 0) or (
                    cfg.eval_every_minutes and now - last_eval >= cfg.eval_every_minutes * 60)
                if due or out_of_time or out_of_steps:
                    stop = self.validate(now - start, train_seconds)
                    last_eval = time.perf_counter()
                    self.last_eval_seconds = last_eval - now
                if stop or out_of_time or out_of_steps:
                    stop = True
                    break
            if cfg.max_epochs and self.epoch >= cfg.max_epochs and not stop:
                self.validate(time.perf_counter() - start, train_seconds)
                stop = True
        bar.close()
        return self.step


@torch.no_grad()
def update_ema(ema: nn.Module, model: nn.Module, decay: float, step: int) -> None:
    """ema <- d * ema + (1 - d) * model, with d = min(decay, (1 + step) / (10 + step)).

    The ramp keeps the average from dragging early, near-random weights along: its window,
    1 / (1 - d), grows with training (about step / 9) until it reaches 1 / (1 - decay).
    """
    d = min(decay, (1 + step) / (10 + step))
    torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - d)


def tqdm_write(message: str) -> None:
    """Print above the progress bar, at once even when stdout is a file."""
    import sys

    from tqdm.auto import tqdm

    tqdm.write(message)
    sys.stdout.flush()


def check_writable(run_dir: Path) -> None:
    """Fail before any work if the run folder cannot be written."""
    run_dir.mkdir(parents=True, exist_ok=True)
    probe = run_dir / ".write_probe"
    try:
        probe.write_bytes(b"\0" * 1024)
        probe.unlink()
    except OSError as e:
        raise OSError(f"cannot write to the run folder {run_dir}: {e.strerror}") from None


def train(recipe: Recipe, run_dir: Path, device: Optional[str] = None,
          progress: bool = True) -> TrainResult:
    """Train a model as the recipe says, then score the best checkpoint on the test splits."""
    from translate.checkpoint import load_checkpoint

    check_writable(run_dir)
    save_recipe(recipe, run_dir / "recipe.yaml")
    handler = logging.FileHandler(run_dir / "train.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("translate").addHandler(handler)
    try:
        trainer = Trainer(recipe, run_dir, device, progress)
        steps = trainer.run()
        best = load_checkpoint(run_dir / "best.pt", trainer.device)
        results = {}
        for split in recipe.data.test_splits:
            src, ref = load_split(recipe.data, split)
            hyps = translate_sentences(best.model, best.tokenizer, src, recipe.decode,
                                       trainer.device, trainer.precision, progress)
            (run_dir / f"{split}.hyp.{recipe.data.tgt_lang}").write_text(
                "".join(h + "\n" for h in hyps), encoding="utf-8")
            scores = score(hyps, ref, recipe.data.tgt_lang)
            results[split] = scores
            trainer.metrics.write({"kind": "test", "step": best.step, "split": split,
                                   "bleu": scores.bleu, "chrf": scores.chrf,
                                   "legacy_bleu": scores.legacy_bleu,
                                   "bleu_signature": scores.bleu_signature})
        trainer.metrics.close()
        return TrainResult(run_dir, run_dir / "best.pt", best.step, steps, trainer.best_bleu, results)
    finally:
        logging.getLogger("translate").removeHandler(handler)
        handler.close()
