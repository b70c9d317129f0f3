"""Training across processes: which rank this is, and the sums every rank agrees on.

Every rank builds the same seeded batch order and takes its share of each optimizer step's
batches (`World.share`). Gradients are then summed across ranks, not averaged, and divided by the
step's target tokens over every rank's batches (which each rank counts from the shared order), so
the update equals the one a single process makes with all of the step's batches (gradient
accumulation). In a lone process every function here is a no-op.

On CUDA the ranks talk over NCCL for device tensors (gradients, a step's loss) and over gloo for
host values (decisions such as "validate now"), so agreeing on a host value never waits for the
GPU's queue to drain.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Sequence, TypeVar

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
    """The world torchrun describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK, ...),
    joined over gloo, and on CUDA over NCCL too; a lone process when there is none.

    On CUDA each process takes the GPU numbered by its LOCAL_RANK as its current device, which
    the device "cuda" (no index) then names.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return World()
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo")
    return World(dist.get_rank(), dist.get_world_size())


def all_sum(values: Sequence[float], world: World) -> list[float]:
    """Host values, each summed over the ranks (on the CPU, in float64: counts stay exact)."""
    if world.size == 1:
        return list(values)
    summed = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(summed)
    return summed.tolist()


def all_sum_(tensor: torch.Tensor, world: World) -> torch.Tensor:
    """`tensor` summed over the ranks, in place on its device; never read on the host here."""
    if world.size > 1:
        dist.all_reduce(tensor)
    return tensor


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


def agree(flags: Sequence[bool], world: World) -> list[bool]:
    """Rank 0's decisions (validate now? stop?), the same on every rank."""
    if world.size == 1:
        return [bool(f) for f in flags]
    return [s > 0 for s in all_sum([float(bool(f)) if world.is_main else 0.0 for f in flags],
                                   world)]


def any_rank(flag: bool, world: World) -> bool:
    """True on every rank when it is true on some rank (a signal one of them received)."""
    if world.size == 1:
        return bool(flag)
    return all_sum([float(bool(flag))], world)[0] > 0


def from_main(value: T, world: World) -> T:
    """Rank 0's `value` (any picklable object), on every rank."""
    if world.size == 1:
        return value
    box = [value if world.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]
