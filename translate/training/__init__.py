"""Training: a recipe in, a run folder out.

    run.py          train(): prepare, loop, then score best.pt on the test splits
    prepare.py      the cleaned, encoded train split, the tokenizer and the dev split
    build.py        build_trainer(): device, precision, seed, engine, model and optimizer
    loop.py         Trainer: the loop, its logging, stopping rules, validations, checkpoints
    state.py        TrainState: the counters a checkpoint saves; the budget and its triggers
    step.py         plain_step(): one training step as the textbook writes it
    update.py       Updater: that step with a real run's bookkeeping (fp16, NaN checks, ranks)
    batch_loss.py   BatchLoss: a batch's forward and loss, for the step and the dev loss
    batches.py      TrainBatcher: each epoch's order of batches, each batch's tensors
    optim.py        AdamW (and Muon), the learning-rate schedules, the weight average (EMA)
    distributed.py  training across processes (torchrun): ranks, shares, sums, failures agreed
    compilation.py  train.compile: the engine it takes, torch.compile once it is known to work
    graphs.py       train.cuda_graphs: the whole step recorded as a CUDA graph per batch shape
    validation.py   dev loss and BLEU
    pick.py         train.pick: best.pt, or whichever of it and the last checkpoints' average dev prefers
    progress.py     TrainingBar: the progress bar, by steps or by the time budget
    promise.py      what the budget buys at this machine's speed, read off a recorded curve
    sizes.py        train.size: the recipe's ladder of recorded sizes; auto times each here
    curves/         the recorded curves (scripts/record_curve.py), each recipe's and size's
    checkpoints.py  which checkpoint a run resumes from, and whether it may; the disk checked first
    seeds.py        train_seeds(): one recipe trained once per seed, a run folder each
"""

from translate.training.build import build_trainer
from translate.training.loop import Interrupted, Trainer
from translate.training.optim import inverse_sqrt_lr, update_ema
from translate.training.prepare import TrainingData, prepare_data
from translate.training.run import TrainResult, train
from translate.training.state import TrainingError, TrainState

__all__ = ["Interrupted", "TrainResult", "TrainState", "Trainer", "TrainingData",
           "TrainingError", "build_trainer", "inverse_sqrt_lr", "prepare_data", "train",
           "update_ema"]
