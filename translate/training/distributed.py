"""Training across processes: which rank this is, and the sums every rank agrees on.

Every rank builds the same seeded batch order and takes its share of each optimizer step's
batches (`World.share`). Target-token counts and gradients are then summed across ranks, not
averaged, so the update equals the one a single process makes with all of the step's batches
(gradient accumulation). In a lone process every function here is a no-op.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, TypeVar

import torch
import torch.distributed as dist
from torch import nn

T = TypeVar("T")


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


def join(device: torch.device) -> World:
    """The world torchrun describes in the environment (RANK, WORLD_SIZE, MASTER_ADDR, ...),
    joined over gloo on the CPU and NCCL on CUDA; a lone process when there is none."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return World()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return World(dist.get_rank(), dist.get_world_size())


def all_sum(values: Sequence[float], world: World, device: torch.device) -> list[float]:
    """Each value summed over the ranks (float64, so token counts stay exact)."""
    if world.size == 1:
        return list(values)
    summed = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(summed)
    return summed.tolist()


def sum_gradients(parameters: Iterable[nn.Parameter], world: World) -> None:
    """Replace every gradient with its sum over the ranks, in one collective; a rank without a
    gradient (no batch this step) adds zeros."""
    if world.size == 1:
        return
    params = [p for p in parameters if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    for param, summed in zip(params, torch._utils._unflatten_dense_tensors(flat, grads)):
        param.grad = summed


def agree(flags: Sequence[bool], world: World, device: torch.device) -> list[bool]:
    """Rank 0's decisions (validate now? stop?), the same on every rank."""
    if world.size == 1:
        return [bool(f) for f in flags]
    return [s > 0 for s in all_sum([float(bool(f)) if world.is_main else 0.0 for f in flags],
                                   world, device)]


def any_rank(flag: bool, world: World, device: torch.device) -> bool:
    """True on every rank when it is true on some rank (a signal one of them received)."""
    if world.size == 1:
        return bool(flag)
    return all_sum([float(bool(flag))], world, device)[0] > 0


def from_main(value: T, world: World) -> T:
    """Rank 0's `value` (any picklable object), on every rank."""
    if world.size == 1:
        return value
    box = [value if world.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]



def on_main(work: Callable[[], T], world: World) -> T:
    """`work()` done by rank 0 alone; every rank gets its result (picklable), or raises its
    error, so no rank is left waiting in a collective when rank 0 fails."""
    if world.size == 1:
        return work()
    result, error = _attempt(work) if world.is_main else (None, None)
    result, error = from_main((result, error), world)
    if error is not None:
        raise error
    return result


def main_first(work: Callable[[], T], world: World) -> T:
    """`work()` on rank 0, then on the other ranks, which may reuse what rank 0 wrote (an
    encoded corpus). When it fails on rank 0, every rank raises rank 0's error."""
    if world.size == 1:
        return work()
    result, error = _attempt(work) if world.is_main else (None, None)
    error = from_main(error, world)
    if error is not None:
        raise error
    return result if world.is_main else work()


def _attempt(work: Callable[[], T]) -> tuple:
    try:
        return work(), None
    except Exception as e:  # raised on every rank by the caller
        return None, e
