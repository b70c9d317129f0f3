"""The recipe's schema: a frozen dataclass per section, each field's range beside it.

A field's `metadata` says which values its type allows that a recipe may not hold
(translate.config.checks reads it; the model configs in translate.models say theirs alike):

    min      the least value, 1 for sizes and counts (without it a number must not be negative)
    hint     a note for the value below `min`
    above    the value must be greater than this
    below    a fraction: the value must be in [0, below)
    max      the greatest value: far past any real use, so a typo cannot ask for exabytes
    choices  the words the field takes; `why_not` maps a refused word to a note
    pair     two fractions in [0, below): their meaning, for the error

Every number must be finite.

Tests: tests/test_config.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from translate.config.models import TransformerConfig
from translate.config.names import ENGINE_NAMES, TRAINING_PRECISIONS


@dataclass(frozen=True)
class DataConfig:
    # Hub name (e.g. bentrevett/multi30k, wmt14) or a local folder. The environment variable
    # TRANSLATE_DATA or `translate train --data PATH` overrides it (for offline machines).
    dataset: str = "bentrevett/multi30k"
    subset: Optional[str] = None  # hub configuration name, e.g. "de-en" for wmt14
    src_lang: str = "en"
    tgt_lang: str = "de"
    # Our split names -> the dataset's split names. A local folder may name its files by either.
    splits: dict = field(default_factory=lambda: {
        "train": "train", "dev": "validation", "test_2016_flickr": "test"})
    test_splits: tuple = ("test_2016_flickr",)  # scored at the end of `translate train`
    # pieces (EOS included); longer training pairs are dropped
    max_len: int = field(default=100, metadata={"min": 1, "max": 1 << 20})
    max_len_ratio: float = 3.0  # drop training pairs whose piece counts differ more than this
    cache_dir: Optional[str] = None  # encoded-corpus cache; default ~/.cache/translate
    # processes that encode the train split; 0: one per CPU
    num_proc: int = field(default=0, metadata={"max": 4096})


@dataclass(frozen=True)
class TokenizerConfig:
    # YAML file in tokenizers/; its keys fill the fields below (and a run saves them, not it)
    spec: Optional[str] = None
    model_type: str = field(default="unigram",
                            metadata={"choices": ("unigram", "bpe", "char", "word")})
    vocab_size: int = field(default=8000, metadata={"min": 1, "max": 1_000_000})
    character_coverage: float = field(default=1.0, metadata={"max": 1.0})
    joint: bool = True  # one vocabulary for both languages (allows tying all embeddings)
    # sentences sampled to train SentencePiece
    max_sentences: int = field(default=2_000_000, metadata={"min": 1})
    model: Optional[str] = None  # an existing SentencePiece .model to use (joint), not trained
    # Subword regularization: each time a training pair is batched, it is segmented afresh by
    # sampling (dev and test text keep the one best segmentation). None: off. Unigram: the
    # sampling distribution's smoothing (smaller: more varied; 0.1-0.5 is usual); BPE: the
    # probability of dropping each merge (BPE-dropout; 0.1 is usual).
    sampling_alpha: Optional[float] = None
    # unigram: draw from the N best segmentations; 0: from all of them
    sampling_nbest: int = field(default=0, metadata={"max": 1024})


@dataclass(frozen=True)
class TrainConfig:
    # every generator seeded from it takes 32 bits
    seed: int = field(default=1, metadata={"max": (1 << 32) - 1})
    # tokens per batch (padded, source or target, whichever is larger)
    max_tokens: int = field(default=4096, metadata={"min": 1, "max": 1 << 24})
    # batches' source and target lengths rounded up to a multiple of this: fewer distinct shapes
    # for a GPU or oneDNN to reuse, more padding (benchmarks/padding.py); 1: each batch to its
    # longest; 0 (auto): 8 where a CPU trains in bf16, else 1 (training.batches.length_multiple)
    length_multiple: int = field(default=0, metadata={"max": 1024})
    # gradient accumulation: batches per optimizer step
    accum_steps: int = field(default=1, metadata={"min": 1, "max": 1 << 16})
    # peak learning rate, reached after `warmup` steps
    lr: float = field(default=1e-3, metadata={"above": 0})
    # linear warm-up steps, then the schedule's decay
    warmup: int = field(default=1000, metadata={"min": 1, "hint": "1: no warm-up"})
    # inverse_sqrt: lr * sqrt(warmup / step), no end; linear | cosine: down to 0 when the budget
    # (max_steps, max_minutes or max_epochs, whichever comes first) runs out; wsd (warm-up,
    # stable, decay): lr held until the budget's last `decay_fraction`, then 1 - sqrt down to 0
    lr_schedule: str = field(default="inverse_sqrt",
                             metadata={"choices": ("inverse_sqrt", "linear", "cosine", "wsd")})
    # wsd: the budget's fraction its decay takes, at the end (0.2: with a 1 - sqrt decay over
    # the last 20%, Hägele et al. 2024, arXiv:2405.18392, matched a cosine schedule's loss)
    decay_fraction: float = field(default=0.2, metadata={"above": 0, "max": 1.0})
    # adamw: AdamW for every parameter. muon: torch.optim.Muon for the hidden layers' weight
    # matrices (attention's projections, feed-forward and recurrent layers:
    # translate.training.optim.muon_split), AdamW as above for embeddings, the output layer,
    # norms and biases; both follow lr_schedule. Not with cuda_graphs
    optimizer: str = field(default="adamw", metadata={"choices": ("adamw", "muon")})
    # Muon's peak learning rate, momentum (Nesterov) and decoupled weight decay. 0.02 and 0.95
    # are the settings of Muon's public description (K. Jordan, 2024, "Muon: an optimizer for
    # hidden layers"); weight decay 0, as weight_decay's, so that muon and adamw differ in the
    # update alone (Moonshot's 0.1 helped long runs: Liu et al. 2025, arXiv:2502.16982)
    muon_lr: float = field(default=0.02, metadata={"above": 0})
    muon_momentum: float = field(default=0.95, metadata={"below": 1})
    muon_weight_decay: float = 0.0
    # how Muon scales an (A, B) matrix's update: original: muon_lr * sqrt(max(1, A / B))
    # (Jordan's); match_rms_adamw: muon_lr * 0.2 * sqrt(max(A, B)), an update of AdamW's
    # size, so that muon_lr can be lr (Liu et al. 2025)
    muon_adjust_lr: str = field(default="original",
                                metadata={"choices": ("original", "match_rms_adamw")})
    betas: tuple = field(default=(0.9, 0.98),
                         metadata={"pair": "Adam's beta1, beta2", "below": 1})
    weight_decay: float = 0.0
    label_smoothing: float = field(default=0.1, metadata={"below": 1})
    clip_norm: float = 1.0  # 0 disables clipping
    # exponential moving average of the weights (e.g. 0.999); 0: off
    ema_decay: float = field(default=0.0, metadata={"below": 1})
    # auto | fp32 | bf16 | fp16 (fp16 only on CUDA, with a grad scaler);
    # decode/evaluate also take --precision int8 (CPU)
    precision: str = field(default="auto", metadata={
        "choices": TRAINING_PRECISIONS,
        "why_not": {"int8": "int8 is for decoding only: "
                            "translate decode/evaluate --precision int8"}})
    # the model's size: "" as the recipe writes it; auto: of the recipe's ladder of recorded
    # sizes, the one whose dev curve is highest at the step the budget reaches on this machine,
    # timed before training (translate.training.sizes); a size's name: that size
    size: str = ""
    max_steps: int = 0  # 0: no step limit
    max_epochs: int = 0  # 0: no epoch limit
    max_minutes: float = 0.0  # wall-clock budget for training; 0: none
    eval_every: int = 500  # steps between validations
    eval_every_minutes: float = 0.0  # also validate when this much wall-clock passed; 0: off
    # Splits scored at every validation to draw learning curves; never used to pick a model.
    monitor_splits: tuple = ()
    # beam for validation's dev BLEU (1: greedy, fast); decode.beam for use
    valid_beam: int = field(default=1, metadata={"min": 1, "max": 1024})
    patience: int = 0  # validations without dev-BLEU gain before stopping; 0: never
    keep_last: int = 2  # step checkpoints kept besides best.pt
    # the checkpoint the test splits are scored with: "best" (best.pt) or "dev": best.pt or the
    # raw average of the last keep_last step checkpoints, whichever translates dev better at
    # decode.beam (translate.training.pick)
    pick: str = field(default="best", metadata={"choices": ("best", "dev")})
    # step_N.pt and best.pt, written at validation: "weights" holds the weights alone (and the
    # EMA's), for decode, average and export, while last.pt (written at every validation too)
    # holds the training state; "full" puts the training state in each (about twice the size
    # with an EMA), so --resume can fall back to an older one if last.pt is damaged
    step_checkpoints: str = field(default="weights", metadata={"choices": ("weights", "full")})
    save_every: int = 250  # steps between last.pt saves, for --resume (besides validations); 0: off
    # steps with a NaN/inf loss skipped (with a warning) before stopping; on a GPU they are
    # counted when the next log record, checkpoint or validation reads them
    max_bad_losses: int = 10
    log_every: int = field(default=50, metadata={"min": 1})
    # torch CPU threads; 0: torch's default
    threads: int = field(default=0, metadata={"max": 4096})
    # on the CPU, glibc keeps freed memory for reuse instead of mapping big blocks afresh each
    # step (translate.hardware.keep_freed_memory): faster steps, a higher peak (docs/results.md)
    keep_freed_memory: bool = True
    # torch.compile the training forward (with the plain engine; inductor needs a C++ compiler
    # on the CPU and Triton on a GPU); validation and decoding run the model as it is
    compile: bool = False
    # record the whole training step once per batch shape as a CUDA graph and replay it
    # (translate.training.graphs): one launch a step for a small model on a GPU; on a CPU the
    # step runs as written for the graphs, unrecorded. One process, accum_steps 1, no fp16
    cuda_graphs: bool = False
    # fast: the engine's CPU speed work (translate.fast); plain: the model's modules with
    # PyTorch's fused attention; gpu: plain, with validation's searches reading the device every
    # few steps (translate.gpu);
    # textbook: translate/models/ exactly as written, attention included (an edit there shows);
    # auto: fast on the CPU, plain elsewhere
    engine: str = field(default="auto", metadata={"choices": ENGINE_NAMES})
    # project the decoder's states to the vocabulary this many target tokens at a time in the
    # loss, never holding the (B, T, V) logits (translate.gpu.loss): for 32k+ vocabularies on a
    # GPU; 0: the whole batch's logits at once
    loss_chunk: int = field(default=0, metadata={"max": 1 << 24})


@dataclass(frozen=True)
class DecodeConfig:
    beam: int = field(default=5, metadata={"min": 1, "max": 1024})  # 1: greedy
    # GNMT length penalty alpha for beam search; 0: rank by log-probability (past 10 the
    # penalty ((5 + length) / 6) ** alpha overflows a float for long outputs)
    lenpen: float = field(default=0.6, metadata={"max": 10.0})
    early_exit: bool = True  # beam search: stop once no live hypothesis ended now would win
    # output limit a * source length + b
    max_len_a: float = field(default=1.5, metadata={"max": 100.0})
    max_len_b: int = field(default=10, metadata={"max": 1 << 20})
    # source tokens per decoding batch
    max_tokens: int = field(default=8000, metadata={"min": 1, "max": 1 << 24})
    batch_size: int = 0  # most sentences per decoding batch; 0: no limit


@dataclass(frozen=True)
class Recipe:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: Any = field(default_factory=TransformerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return to_plain(dataclasses.asdict(self))


SECTIONS = {"data": DataConfig, "tokenizer": TokenizerConfig, "train": TrainConfig,
            "decode": DecodeConfig}


def to_plain(value: Any) -> Any:
    """Tuples to lists, recursively, so the dict round-trips through YAML and JSON."""
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value
