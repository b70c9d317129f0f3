"""Training: a recipe in, a run folder out.

    run.py          train(): prepare, loop, then score best.pt on the test splits
    prepare.py      the cleaned, encoded train split, the tokenizer and the dev split
    loop.py         Trainer: optimizer steps, logging, stopping rules, checkpoints
    optim.py        AdamW, the inverse square root schedule, the weight average (EMA)
    compilation.py  train.compile: the engine it takes, torch.compile once it is known to work
    graphs.py       train.cuda_graphs: the whole step recorded as a CUDA graph per batch shape
    validation.py   dev loss and BLEU
    checkpoints.py  which checkpoint a run resumes from, and whether it may
"""

from translate.training.loop import Interrupted, Trainer, TrainingError
from translate.training.optim import inverse_sqrt_lr, update_ema
from translate.training.prepare import TrainingData, prepare_data
from translate.training.run import TrainResult, train

__all__ = ["Interrupted", "TrainResult", "Trainer", "TrainingData", "TrainingError",
           "inverse_sqrt_lr", "prepare_data", "train", "update_ema"]
