"""Training across processes: which rank this is, and the sums every rank agrees on.

Every rank builds the same seeded batch order and takes its share of each optimizer step's
batches (`World.share`). Gradients are then summed across ranks, not averaged, and divided by the
step's target tokens over every rank's batches (which each rank counts from the shared order), so
the update equals the one a single process makes with all of the step's batches (gradient
accumulation). In a lone process every function here is a no-op.

On CUDA the ranks talk over NCCL for device tensors (gradients, a step's loss) and over gloo for
host values (decisions such as "validate now"), so agreeing on a host value never waits for the
GPU's queue to drain.

Failures end every rank. While the run starts, ranks work `together`: a rank that fails there
still takes part in one agreement, so every rank raises `RankFailed` with the first failing
rank's message. Later, a rank that dies or stops answering makes the others' next collective
raise `LostRank` (at once when its process is gone, else after TRANSLATE_DIST_TIMEOUT seconds).
"""

from __future__ import annotations

import atexit
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Iterable, Iterator, Optional, Sequence, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from translate.config import ConfigError
from translate.utils import first_line

T = TypeVar("T")
DEFAULT_TIMEOUT = 1800  # seconds a collective waits for the other ranks: torch's gloo default


class RankFailed(Exception):
    """Raised on every rank when some rank failed in a `together` block; on a rank that failed
    itself, `__cause__` is its own error."""

    def __init__(self, rank: int, message: str):
        self.rank = rank
        super().__init__(f"rank {rank}: {message}" if rank else message)


class LostRank(ConnectionError):
    """A collective failed: another rank's process ended, or it did not answer in time."""

    def __init__(self, cause: BaseException):
        detail = re.sub(r"^\[[^\]]*\]\s*", "", first_line(cause)).split(". ")[0]
        super().__init__(f"lost contact with another process of the run (it stopped, crashed, or "
                         f"did not answer for {timeout_seconds():g} s: TRANSLATE_DIST_TIMEOUT); "
                         f"its own message or torchrun's summary says why [{detail}]")


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes checkpoints and logs."""
        return self.rank == 0

    def share(self, group: Sequence[T]) -> list[T]:
        """This rank's part of one step's batches: every `size`-th, from the `rank`-th."""
        return list(group[self.rank:: self.size])


def step_seed(seed: int, rank: int, step: int) -> int:
    """The seed of a rank's random draws (dropout) in the step after `step`: a function of the
    seed, the rank and the step alone, so a resumed run draws what an uninterrupted one did on
    every rank (a checkpoint saved by rank 0 holds rank 0's generator state only), and ranks
    draw different masks."""
    return ((seed * 1_000_003 + rank) * 1_000_033 + step) % 2 ** 63


def launched_together() -> bool:
    """Whether torchrun started this process as one of several (WORLD_SIZE above 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def join(device: torch.device) -> World:
    """The world torchrun describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK, ...),
    joined over gloo, and on CUDA over NCCL too; a lone process when there is none.

    On CUDA each process takes the GPU numbered by its LOCAL_RANK as its current device, which
    the device "cuda" (no index) then names.

    A collective waits TRANSLATE_DIST_TIMEOUT seconds (default 1800) for the other ranks, then
    raises `LostRank`: raise it when rank 0's validation alone takes longer.
    """
    if not launched_together():
        return World()
    if device.type == "cuda":
        local_rank, gpus = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
        processes = max(int(os.environ.get("LOCAL_WORLD_SIZE", "0")), local_rank + 1)
        if processes > gpus:  # every process of the node says so, none waits for the others
            raise ValueError(f"this node starts {processes} processes, one a GPU, and has "
                             f"{gpus} GPU(s): start at most {gpus} a node (torchrun "
                             f"--nproc-per-node {gpus}), or train on the CPU (--device cpu)")
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group("cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo",
                                timeout=timedelta(seconds=timeout_seconds()))
        atexit.register(_leave)
    return World(dist.get_rank(), dist.get_world_size())


def timeout_seconds() -> float:
    """TRANSLATE_DIST_TIMEOUT, checked: seconds a collective waits for the other ranks."""
    text = os.environ.get("TRANSLATE_DIST_TIMEOUT", str(DEFAULT_TIMEOUT))
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ConfigError(f"TRANSLATE_DIST_TIMEOUT ({text!r}) must be a number of seconds > 0")
    return seconds


def current_rank() -> int:
    """This process's rank in the joined world; 0 when it is alone."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def reported_failure(error: RankFailed, user_errors: tuple[type, ...]
                     ) -> Optional[BaseException]:
    """What this rank reports of a failure the ranks agreed on: rank 0 its own error, as a lone
    process would, or else the failing rank's; the other ranks nothing (None: exit quietly). An
    own error not among `user_errors` (a bug) is raised again, with its traceback, on the rank
    it happened on."""
    own = error.__cause__  # this rank's own error, when it failed
    if own is not None and not isinstance(own, user_errors):
        raise own from None
    if current_rank() != 0:
        return None
    return own or error


def _leave() -> None:
    """Leave a gloo world as the process exits (the ranks exit in any order, say after a
    failure): left to interpreter shutdown, gloo's threads may abort the process. NCCL's is left
    to torch, as shutting it down is a collective in some NCCL versions."""
    if dist.is_initialized() and dist.get_backend() == "gloo":
        dist.destroy_process_group()


@contextmanager
def _collective() -> Iterator[None]:
    """Turn the error of a collective that another rank left (gloo and NCCL raise RuntimeError)
    into `LostRank`, which says so."""
    try:
        yield
    except RuntimeError as e:
        raise LostRank(e) from e


def all_sum(values: Sequence[float], world: World) -> list[float]:
    """Host values, each summed over the ranks (on the CPU, in float64: counts stay exact)."""
    if world.size == 1:
        return list(values)
    summed = torch.tensor(values, dtype=torch.float64)
    with _collective():
        dist.all_reduce(summed)
    return summed.tolist()


def all_sum_(tensor: torch.Tensor, world: World) -> torch.Tensor:
    """`tensor` summed over the ranks, in place on its device; never read on the host here."""
    if world.size > 1:
        with _collective():
            dist.all_reduce(tensor)
    return tensor


def sum_gradients(parameters: Iterable[nn.Parameter], world: World) -> None:
    """Replace every gradient with its sum over the ranks, in one collective; a rank without a
    gradient (no batch this step) adds zeros."""
    if world.size == 1:
        return
    params = [p for p in parameters if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([grad.reshape(-1) for grad in grads])  # one buffer, one all-reduce
    with _collective():
        dist.all_reduce(flat)
    for param, grad, summed in zip(params, grads, flat.split([g.numel() for g in grads])):
        param.grad = summed.view_as(grad)  # views of the summed buffer


def agree(flags: Sequence[bool], world: World) -> list[bool]:
    """Rank 0's decisions (validate now? stop?), the same on every rank."""
    return [value > 0 for value in from_main_numbers(flags, world)]


def from_main_numbers(values: Sequence[float], world: World) -> list[float]:
    """Rank 0's numbers (bools count as 0/1), the same on every rank: in one collective."""
    values = [float(v) for v in values]
    if world.size == 1:
        return values
    return all_sum([v if world.is_main else 0.0 for v in values], world)


def any_rank(flag: bool, world: World) -> bool:
    """True on every rank when it is true on some rank (a signal one of them received)."""
    if world.size == 1:
        return bool(flag)
    return all_sum([float(bool(flag))], world)[0] > 0


def from_main(value: T, world: World) -> T:
    """Rank 0's `value` (any picklable object), on every rank.

    Inside a `together` block a rank may have failed before this point and be waiting in the
    block's agreement instead: so ranks first agree that none has (`raise_any_failure`).
    """
    if world.size == 1:
        return value
    raise_any_failure(None, world)
    box = [value if world.is_main else None]
    with _collective():
        dist.broadcast_object_list(box, src=0)
    return box[0]


def on_main(work: Callable[[], T], world: World) -> T:
    """`work()` done by rank 0 alone (training the tokenizer); every rank gets its result."""
    return from_main(work() if world.is_main else None, world)


def main_first(work: Callable[[], T], world: World) -> T:
    """`work()` on rank 0, then on the other ranks, which may reuse what rank 0 wrote (an
    encoded corpus) and wait for it in `from_main`. Within `together`, rank 0 failing fails
    them all there."""
    result = work() if world.is_main else None
    from_main(None, world)
    return result if world.is_main else work()


def raise_any_failure(error: Optional[BaseException], world: World) -> None:
    """Every rank says whether it failed (`error`); when some rank did, raise `RankFailed` with
    the lowest failing rank's message (its first line) on every rank. A lone process raises its
    own `error`, if any."""
    if world.size == 1:
        if error is not None:
            raise error
        return
    messages: list[Optional[str]] = [None] * world.size
    with _collective():
        dist.all_gather_object(messages, None if error is None else first_line(error))
    failed = [(rank, message) for rank, message in enumerate(messages) if message is not None]
    if failed:
        raise RankFailed(*failed[0]) from error


@contextmanager
def together(world: World) -> Iterator[None]:
    """Run the block on every rank; when it raises on any rank, every rank raises `RankFailed`
    (a lone process, the error itself). The block's only collectives must be `from_main`'s,
    which agree first, so that a rank failing before one does not leave the others waiting."""
    try:
        yield
    except (RankFailed, LostRank):
        raise  # agreed inside the block, by from_main; or no agreement can be had
    except Exception as error:
        raise_any_failure(error, world)
    raise_any_failure(None, world)
