"""`python -m translate`, with a fault on one rank of a torchrun run: run by test_rank_failures.py.

FAULT_RANK (default 1) is the rank, FAULT the fault:
    hide:PATH  the rank cannot see PATH (the argument is replaced by PATH.hidden, which is missing)
    kill:N     the rank is SIGKILLed as step N+1 begins
    raise:N    the rank raises a TrainingError as step N+1 begins
    hang:N     the rank stops answering (sleeps; SIGTERM ends it) as step N+1 begins
"""

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from translate.cli import main  # noqa: E402
from translate.training import TrainingError  # noqa: E402
from translate.training.update import Updater  # noqa: E402

KIND, _, ARG = os.environ["FAULT"].partition(":")
HERE = int(os.environ["RANK"]) == int(os.environ.get("FAULT_RANK", "1"))


def faulty_step(train_step):
    def step(self, batches, tokens, state):
        if state.step == int(ARG):
            if KIND == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if KIND == "raise":
                raise TrainingError(f"injected failure at step {state.step + 1}")
            if KIND == "hang":
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                time.sleep(120)
        return train_step(self, batches, tokens, state)
    return step


if HERE and KIND == "hide":
    sys.argv = [f"{a}.hidden" if a == ARG else a for a in sys.argv]
elif HERE:
    Updater.step = faulty_step(Updater.step)
main(prog_name="translate")
