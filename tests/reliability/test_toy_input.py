"""Bad arguments to the toy tasks get a clear error, before anything trains."""

import pytest
import torch

from translate.toy import answer, right_positions, toy_batch, train_toy


@pytest.mark.parametrize("call", [lambda: answer("sort", [4, 5]),
                                  lambda: right_positions("Reverse", 3),
                                  lambda: train_toy("sort", steps=1)])
def test_an_unknown_task_is_named_with_the_valid_ones(call):
    with pytest.raises(ValueError, match="unknown toy task .*; valid: copy, reverse"):
        call()


@pytest.mark.parametrize("lengths", [(0, 3), (5, 4), (-1, -1)])
def test_impossible_lengths_are_refused(lengths):
    with pytest.raises(ValueError, match="lengths must be 1 <= shortest <= longest"):
        toy_batch("copy", 2, torch.Generator(), lengths=lengths)


def test_fewer_than_two_symbols_are_refused():
    with pytest.raises(ValueError, match="at least 2 symbols"):
        toy_batch("copy", 2, torch.Generator(), symbols=1)


@pytest.mark.parametrize("kwargs", [dict(steps=0), dict(batch_size=0), dict(check_every=-1)])
def test_no_steps_no_batch_or_no_checks_are_refused(kwargs):
    with pytest.raises(ValueError, match="must be >= 1"):
        train_toy("copy", **kwargs)
