"""`build_trainer`: a recipe and its prepared data in, a `Trainer` ready to `run()` out — the
device, precision and threads set up, the seed set, the engine chosen, the model, its weight
average, optimizers and loss scaler built.

Training resolves its device (`training_device`), precision (`training_precision`) and engine
here and nowhere else, as decoding does in `translate.ready`: training's `auto` precision is
chosen for training (bf16 only where it trains faster), decoding's for decoding.

Tests: tests/training/test_freed_memory.py, tests/reliability/test_step_numerics.py.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from translate import allocator
from translate.config import ConfigError, Recipe, TrainConfig
from translate.engine import Engine, engine_note, resolve_engine
from translate.hardware import keep_freed_memory, pick_device, resolve_precision
from translate.metrics import MetricsLog
from translate.models import build_model, count_parameters
from translate.tokenizer import Tokenizer
from translate.training.batch_loss import BatchLoss
from translate.training.batches import length_multiple, train_batcher
from translate.training.checkpoints import check_free_space, checkpoint_bytes
from translate.training.compilation import compiled, engine_name
from translate.training.distributed import World
from translate.training.graphs import StepGraphs, check_recipe
from translate.training.loop import Trainer
from translate.training.optim import make_muon, make_optimizer, muon_note, skips_on_device
from translate.training.prepare import TrainingData
from translate.training.update import Updater
from translate.training.validation import Validation
from translate.utils import seed_everything

log = logging.getLogger(__name__)


def build_trainer(recipe: Recipe, run_dir: Path, data: TrainingData, metrics: MetricsLog,
                  device: Optional[str] = None, progress: bool = True,
                  world: World = World()) -> Trainer:
    """The Trainer of `recipe` on `device` (the best one by default), writing into `run_dir` and
    `metrics`; `world`: the processes training together."""
    cfg = recipe.train
    device = training_device(device)
    precision = set_up_device(recipe, device, world)
    seed_everything(cfg.seed)
    multiple = length_multiple(cfg, device, precision)
    batcher = train_batcher(recipe, data.tokenizer, data.train, world, multiple)
    engine, model, updater = build_model_and_updater(recipe, data.tokenizer, device, precision,
                                                     world)
    if world.is_main:
        processes = f", {world.size} processes" if world.size > 1 else ""
        log.info("%s: %.2fM parameters, device %s, precision %s%s%s, %d CPU threads%s; the %s",
                 recipe.model.arch, count_parameters(model) / 1e6, device, precision,
                 shapes_note(cfg, multiple), step_note(cfg, device), torch.get_num_threads(),
                 processes, engine_note(engine))
        if cfg.optimizer == "muon":
            log.info("%s", muon_note(model))
    if world.is_main:
        check_free_space(run_dir, checkpoint_bytes(model, updater.ema is not None))
    validation = Validation(recipe, data.tokenizer, data.dev, device, precision, engine,
                            data.source)
    return Trainer(recipe, run_dir, metrics, data, batcher, updater, validation, progress, world)


def build_model_and_updater(recipe: Recipe, tokenizer: Tokenizer, device: torch.device,
                            precision: str, world: World = World()
                            ) -> tuple[Engine, nn.Module, Updater]:
    """The engine `recipe` trains with on `device`, its model (drawn from the current seed)
    prepared by it, and the Updater around the model."""
    engine = resolve_engine(engine_name(recipe.train), device)
    model = build_model(recipe.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                        tokenizer.joint)
    model = engine.prepare(model.to(device))
    return engine, model, build_updater(model, recipe.train, engine, device, precision, world)


def training_device(name: Optional[str] = None) -> torch.device:
    """The device a run trains on: `name` (--device: cpu, cuda, cuda:N, mps), else the best
    available (CUDA > MPS > CPU)."""
    return pick_device(name)


def training_precision(cfg: TrainConfig, device: torch.device) -> str:
    """The precision a run trains in on `device`: `train.precision` resolved for training."""
    precision = resolve_precision(cfg.precision, device)
    if precision == "int8":
        raise ConfigError("train.precision int8 is for decoding only (translate decode/"
                          "evaluate --precision int8); train in fp32, bf16 or fp16")
    return precision


def set_up_device(recipe: Recipe, device: torch.device, world: World) -> str:
    """Check that the recipe suits `device` and its precision, set the CPU threads and allocator
    as the recipe says, and return the precision training runs in."""
    cfg = recipe.train
    precision = training_precision(cfg, device)
    if cfg.compile and cfg.loss_chunk:
        raise ConfigError("train.loss_chunk projects the decoder's states outside the "
                          "compiled forward; set train.compile false or train.loss_chunk 0")
    if cfg.cuda_graphs:
        check_recipe(recipe, precision, world.size)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if device.type == "cpu":
        set_up_allocator(cfg)
    return precision


def set_up_allocator(cfg: TrainConfig) -> None:
    """Say which allocator the CPU run has (translate.allocator); under glibc's, have it keep
    freed memory as the recipe says. (glibc's heap no longer fragments over a bf16 run, which
    once asked for jemalloc: its cause, oneDNN's kernel caches, is gone:
    `hardware.bound_kernel_caches`.)"""
    name = allocator.active()
    if name is not None:
        log.info("memory: %s allocates (%s=system for the C library's)", name, allocator.SETTING)
        return
    if cfg.keep_freed_memory:
        keep_freed_memory()


def build_updater(model: nn.Module, cfg: TrainConfig, engine: Engine, device: torch.device,
                  precision: str, world: World) -> Updater:
    """The optimizers (at their peak rates until the Trainer sets each step's), weight average,
    loss scaler and loss function around `model`."""
    # The compiled forward shares the model's parameters; checkpoints save the model itself,
    # so their names carry no torch.compile prefix.
    forward = compiled(model, device) if cfg.compile else model
    batch_loss = BatchLoss(model, forward, engine.loss, device, precision, cfg.loss_chunk)
    ema = copy.deepcopy(model).eval().requires_grad_(False) if cfg.ema_decay > 0 else None
    figure_dtype = torch.float32 if device.type == "mps" else torch.float64
    optimizer = make_optimizer(model, cfg, capturable=cfg.cuda_graphs)
    muon = make_muon(model, cfg) if cfg.optimizer == "muon" else None
    optimizers = [o for o in (optimizer, muon) if o is not None]
    for each in optimizers:
        engine.watch_optimizer(each)  # the fast engine's packed weights follow its steps
    graphs = StepGraphs(model, ema, optimizer, cfg.label_smoothing, cfg.clip_norm, batch_loss,
                        device, figure_dtype) if cfg.cuda_graphs else None
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    # Where reading a value from the device costs a sync (a GPU), a step's NaN/inf check stays
    # on the device and is read with the log; the CPU reads it at once, and so does a GPU with
    # Muon, which has no step that skips on the device.
    defer_checks = device.type == "cuda" and all(skips_on_device(o) for o in optimizers)
    return Updater(cfg, model, ema, optimizer, scaler, batch_loss, graphs, defer_checks,
                   figure_dtype, world, muon)


def shapes_note(cfg: TrainConfig, multiple: int) -> str:
    """The batches' rounding, for the log's first line, where `auto` chose it."""
    if cfg.length_multiple or multiple == 1:
        return ""
    return f", lengths rounded up to {multiple} (train.length_multiple: auto)"


def step_note(cfg: TrainConfig, device: torch.device) -> str:
    """How steps run, for the log's first line."""
    if cfg.compile:
        return ", compiled"
    if not cfg.cuda_graphs:
        return ""
    if device.type == "cuda":
        return ", CUDA graphs"
    return f", the step written for CUDA graphs run unrecorded (none on the {device.type})"
