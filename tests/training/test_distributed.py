"""Two gloo processes under torchrun make the updates one process makes with gradient
accumulation over the same batches.

The lone process and each rank compute on one thread (ddp_worker.py), so a batch's gradients are
added up in the same order in both. What still differs is where the two batches' gradients meet:
the lone process accumulates them, the ranks sum them in gloo's all-reduce. So the comparison
(`assert_same_updates`) is tight where rounding cannot grow, the first step's gradients and every
step's loss, and bounded by Adam's step size for the weights, where it can.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.limits import within
from translate.checkpoint import read_checkpoint
from translate.training.distributed import World

WORKER = Path(__file__).resolve().with_name("ddp_worker.py")
STEPS = 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_env(**extra: str) -> dict[str, str]:
    """The environment for a lone process or a torchrun run: no torchrun variables of an outer
    run, and one thread a process (two ranks on a two-core machine, as torchrun gives them
    with OMP_NUM_THREADS unset, said here so that it holds wherever the tests run)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def run(args: list[str], cwd: Path, **env: str) -> None:
    result = subprocess.run(args, cwd=cwd, env=process_env(**env), capture_output=True,
                            text=True, timeout=within(starts=150, floor=300))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def run_pair(recipe_path: Path, data: Path, root: Path, *overrides: str, **env: str) -> list:
    """[rank 0, rank 1] of two processes with accum_steps 1."""
    run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(WORKER),
         str(recipe_path), str(data), str(root / "pair"), str(STEPS), "1", *overrides], root,
        **env)
    return [torch.load(root / "pair" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]


def run_both(recipe_path: Path, data: Path, root: Path, *overrides: str) -> tuple:
    """(one process with accum_steps 2, [rank 0, rank 1] of two processes with accum_steps 1)."""
    run([sys.executable, str(WORKER), str(recipe_path), str(data), str(root / "alone"),
         str(STEPS), "2", *overrides], root)
    alone = torch.load(root / "alone" / "rank0.pt", weights_only=True)
    return alone, run_pair(recipe_path, data, root, *overrides)


def noise_only(name: str) -> bool:
    """A key bias: its true gradient is zero, what backward computes is rounding noise (see
    test_key_biases_differ_by_rounding_alone)."""
    return name.endswith("k_proj.bias")


def assert_same_updates(alone: dict, pair: list[dict]) -> None:
    """The pair's ranks agree with each other to the bit, and with the lone process:
    - the first step's gradients (summed over the ranks, before clipping), to 1e-5 of each
      weight's gradient norm: they add the same products in another order;
    - every step's loss, to 1e-6 relative;
    - the weights after the last step, each within 2 * (the learning rates' sum) of the lone
      process's (Adam moves a weight by at most about its learning rate a step, so even a weight
      whose gradient is all rounding noise, and moves either way, stays within it), and all of a
      tensor's differences together within 1% of its update's norm (the few such weights)."""
    assert alone["threads"] == pair[0]["threads"] == pair[1]["threads"] == 1
    assert alone["step"] == pair[0]["step"] == pair[1]["step"] == STEPS
    assert alone["position"] == pair[0]["position"] == 2 * STEPS  # two batches a step
    for name, grad in alone["grads"].items():
        if not noise_only(name):
            error = (pair[0]["grads"][name] - grad).norm() / grad.norm()
            assert error < 1e-5, f"{name}: the first step's gradient is off by {error:.2e}"
    for name in alone["model"]:
        assert torch.equal(pair[0]["model"][name], pair[1]["model"][name]), name
    assert pair[0]["losses"] == pair[1]["losses"]  # the loss of the whole step, on every rank
    torch.testing.assert_close(torch.tensor(pair[0]["losses"]), torch.tensor(alone["losses"]),
                               atol=0, rtol=1e-6)
    assert pair[0]["lrs"] == alone["lrs"] and len(alone["lrs"]) == STEPS
    bound = 2 * sum(alone["lrs"])
    for name, weight in alone["model"].items():
        torch.testing.assert_close(pair[0]["model"][name], weight, atol=bound, rtol=0,
                                   msg=lambda m: f"{name}: {m}")
        if not noise_only(name):
            update = (weight - alone["init"][name]).norm()
            off = (pair[0]["model"][name] - weight).norm()
            assert off <= 0.01 * update, f"{name}: off by {off / update:.1%} of its update"


@pytest.fixture(scope="module")
def runs(recipe_path, small_data, tmp_path_factory):
    return run_both(recipe_path, small_data, tmp_path_factory.mktemp("ddp"))


def test_two_processes_update_as_one_with_accumulation(runs):
    assert_same_updates(*runs)


@pytest.mark.parametrize("how", [pytest.param("skip", marks=pytest.mark.slow), "mean"])
def test_a_broken_gradient_sum_fails_the_comparison(how, runs, recipe_path, small_data,
                                                    tmp_path):
    """No sum at all (each rank steps on its own batch), or an average where the loss is
    already divided by the step's tokens over every rank (each gradient half its size)."""
    alone, _ = runs
    broken = run_pair(recipe_path, small_data, tmp_path, BREAK_GRADIENT_SUM=how)
    with pytest.raises(AssertionError, match="the first step's gradient is off by"):
        assert_same_updates(alone, broken)


@pytest.mark.slow  # ~11 s; sampling is tested in one process by default
def test_with_subword_sampling_too(runs, recipe_path, small_data, tmp_path):
    """Each rank draws its own batches' segmentations; the step's target tokens are summed over
    the ranks, so every rank takes the same step."""
    pair = run_pair(recipe_path, small_data, tmp_path, "tokenizer.sampling_alpha=0.1")
    assert pair[0]["step"] == pair[1]["step"] == STEPS
    assert all(torch.equal(pair[0]["model"][k], pair[1]["model"][k]) for k in pair[0]["model"])
    assert pair[0]["losses"] == pair[1]["losses"]
    assert pair[0]["tokens"] == pair[1]["tokens"] > runs[1][0]["tokens"] * 1.1  # more pieces


def test_ranks_share_rank_0s_clock_for_a_time_budget_schedule(recipe_path, small_data, tmp_path):
    """A cosine decay over max_minutes reads the clock; every rank takes rank 0's reading, so
    their learning rates, and so their weights, stay equal to the bit."""
    pair = run_pair(recipe_path, small_data, tmp_path, "train.lr_schedule=cosine",
                    "train.warmup=1", "train.max_minutes=0.2")
    assert 0 < pair[0]["lr"] == pair[1]["lr"] < 3e-3  # on its way down from the peak
    for name, weight in pair[0]["model"].items():
        assert torch.equal(pair[1]["model"][name], weight), name


def test_key_biases_differ_by_rounding_alone(runs):
    """A key bias adds q . b_k to every score of a query alike, which softmax cancels: its true
    gradient is zero, and what backward computes is rounding noise. Adam divides that noise by
    its own size, so the bias moves by full steps of either sign, and one process and two need
    not agree on it. Ranks agree with each other exactly, and the biases stay at Adam's scale."""
    alone, pair = runs
    names = [n for n in alone["model"] if n.endswith("k_proj.bias")]
    assert names
    for name in names:
        assert torch.equal(pair[0]["model"][name], pair[1]["model"][name]), name
        assert alone["model"][name].abs().max() < 1e-3 * STEPS, name


def test_each_rank_takes_every_other_batch():
    group = ["b0", "b1", "b2", "b3", "b4"]
    assert World(0, 2).share(group) == ["b0", "b2", "b4"]
    assert World(1, 2).share(group) == ["b1", "b3"]
    assert World().share(group) == group and World().is_main and not World(1, 2).is_main


def torchrun(data: Path, cwd: Path, *args: str) -> str:
    """`torchrun --nproc_per_node 2 -m translate ARGS --data DATA`; what it reported (stderr),
    once it passed."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "-m", "translate",
           *args, "--data", str(data), "--no-progress"]
    result = subprocess.run(cmd, cwd=cwd, env=process_env(), capture_output=True, text=True,
                            timeout=within(starts=150, floor=300))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stderr


def sets(*items: str) -> list[str]:
    from helpers.training import TINY_OVERRIDES

    return [arg for item in (*TINY_OVERRIDES, *items) for arg in ("--set", item)]


@pytest.mark.slow  # 30-40 s; test_early_stopping_under_torchrun_... trains under torchrun by default
def test_translate_train_under_torchrun_validates_saves_and_resumes_exactly(recipe_path,
                                                                           small_data, tmp_path):
    """With dropout on, a run stopped at step 20 and resumed to 30 logs every loss and ends with
    every weight as a run of 30 steps straight does: each rank's dropout is drawn from (seed,
    rank, step), so no rank needs a random state that rank 0's checkpoint cannot hold."""
    run_dir, straight = tmp_path / "run", tmp_path / "straight"
    dropout = ("model.dropout=0.3", "train.eval_every=10", "train.log_every=5",
               "data.test_splits=[]")

    def torchrun_here(*args: str) -> str:
        return torchrun(small_data, tmp_path, *args)

    out = torchrun_here("train", str(recipe_path), "--run-dir", str(run_dir),
                        *sets(*dropout, "train.max_steps=20"))
    assert out.count("best checkpoint:") == 1 and "2 processes" in out  # rank 0 reports
    assert (run_dir / "step_20.pt").is_file() and (run_dir / "best.pt").is_file()
    out = torchrun_here("train", "--resume", str(run_dir), "--set", "train.max_steps=30")
    assert f"resuming from {run_dir / 'last.pt'}: step 20, epoch 1, batch 40" in out
    torchrun_here("train", str(recipe_path), "--run-dir", str(straight),
                  *sets(*dropout, "train.max_steps=30"))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [5, 10, 15, 20, 25, 30]  # written once, by rank 0
    assert [r["step"] for r in records if r["kind"] == "valid"] == [10, 20, 30]
    assert all(r["world_size"] == 2 for r in train)
    assert_resumed_as_straight(run_dir, straight, 30)


def train_losses(run_dir: Path) -> list[tuple[int, float]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["kind"] == "train"]


def assert_resumed_as_straight(run: Path, straight: Path, end: int) -> None:
    """The resumed run logged every loss, and its step_<end>.pt holds every weight, as the run
    never stopped."""
    assert train_losses(run) == train_losses(straight)
    resumed, whole = (read_checkpoint(d / f"step_{end}.pt") for d in (run, straight))
    for name, weight in whole["train_model"].items():
        assert torch.equal(resumed["train_model"][name], weight), name


# slow: a torchrun pair trained to its patience (13 s)
@pytest.mark.slow
def test_early_stopping_under_torchrun_stops_every_rank_at_once(recipe_path, small_data,
                                                                 tmp_path):
    """Rank 0 validates alone; its patience decision reaches rank 1, which would otherwise train
    on (and wait forever in the next step's all-reduce)."""
    run_dir = tmp_path / "run"
    out = torchrun(small_data, tmp_path, "train", str(recipe_path), "--run-dir", str(run_dir),
                   *sets("train.lr=1e-9", "train.eval_every=5", "train.patience=1",
                         "train.max_steps=1000", "data.test_splits=[]"))
    assert "(step 5 of 10, " in out  # best at step 5, none better at 10: patience 1 is spent
    assert out.count("train pairs: ") == 1  # rank 1 logs warnings and errors only
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "valid"] == [5, 10]


@pytest.mark.slow  # ~11 s: two torchrun agents; the one-node torchrun tests run by default
def test_two_nodes_meet_through_torchrun_rendezvous(recipe_path, small_data, tmp_path):
    """Multi-node as torchrun does it: one agent per node, meeting at a c10d rendezvous (here two
    agents on this machine, one process each). Rank 0's node writes; both finish together."""
    run_dir, port, seconds = tmp_path / "run", free_port(), within(starts=150, floor=300)
    env = process_env()
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
         "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "two-nodes",
         "-m", "translate", "train", str(recipe_path), "--run-dir", str(run_dir), "--data",
         str(small_data), "--no-progress",
         *sets("train.eval_every=10", "train.log_every=5", "train.max_steps=10",
               "data.test_splits=[]")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)]
    outputs = [node.communicate(timeout=seconds)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    assert sum(out.count("best checkpoint:") for out in outputs) == 1  # rank 0 alone reports
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [5, 10]  # written once
    assert all(r["world_size"] == 2 for r in records if r["kind"] == "train")
    assert (run_dir / "step_10.pt").is_file()
