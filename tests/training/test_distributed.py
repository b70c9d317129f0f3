"""Two gloo processes under torchrun make the updates one process makes with gradient
accumulation over the same batches."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from translate.training.distributed import World

WORKER = Path(__file__).resolve().with_name("ddp_worker.py")
STEPS = 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list[str], cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def run_both(recipe_path: Path, data: Path, root: Path, *overrides: str) -> tuple:
    """(one process with accum_steps 2, [rank 0, rank 1] of two processes with accum_steps 1)."""
    common = [str(WORKER), str(recipe_path), str(data)]
    run([sys.executable, *common, str(root / "alone"), str(STEPS), "2", *overrides], root)
    run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
         *common, str(root / "pair"), str(STEPS), "1", *overrides], root)
    alone = torch.load(root / "alone" / "rank0.pt", weights_only=True)
    pair = [torch.load(root / "pair" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    return alone, pair


@pytest.fixture(scope="module")
def runs(recipe_path, small_data, tmp_path_factory):
    return run_both(recipe_path, small_data, tmp_path_factory.mktemp("ddp"))


def test_two_processes_update_as_one_with_accumulation(runs):
    alone, pair = runs
    assert alone["step"] == pair[0]["step"] == pair[1]["step"] == STEPS
    assert alone["position"] == pair[0]["position"] == 2 * STEPS  # two batches a step
    for name, weight in alone["model"].items():
        if not name.endswith("k_proj.bias"):  # see below
            torch.testing.assert_close(pair[0]["model"][name], weight, atol=1e-6, rtol=1e-5,
                                       msg=lambda m: f"{name}: {m}")
        assert torch.equal(pair[0]["model"][name], pair[1]["model"][name]), name
    torch.testing.assert_close(torch.tensor(pair[0]["losses"]), torch.tensor(alone["losses"]),
                               atol=1e-6, rtol=1e-5)
    assert pair[0]["losses"] == pair[1]["losses"]  # the loss of the whole step, on every rank


def test_with_subword_sampling_too(runs, recipe_path, small_data, tmp_path):
    """Each rank draws its own batches' segmentations; the step's target tokens are summed over
    the ranks, so every rank takes the same step."""
    _, pair = run_both(recipe_path, small_data, tmp_path, "tokenizer.sampling_alpha=0.1")
    assert pair[0]["step"] == pair[1]["step"] == STEPS
    assert all(torch.equal(pair[0]["model"][k], pair[1]["model"][k]) for k in pair[0]["model"])
    assert pair[0]["losses"] == pair[1]["losses"]
    assert pair[0]["tokens"] == pair[1]["tokens"] > runs[1][0]["tokens"] * 1.1  # more pieces


def test_ranks_share_rank_0s_clock_for_a_time_budget_schedule(recipe_path, small_data, tmp_path):
    """A cosine decay over max_minutes reads the clock; every rank takes rank 0's reading, so
    their learning rates, and so their weights, stay equal to the bit."""
    run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(WORKER),
         str(recipe_path), str(small_data), str(tmp_path / "pair"), str(STEPS), "1",
         "train.lr_schedule=cosine", "train.warmup=1", "train.max_minutes=0.2"], tmp_path)
    pair = [torch.load(tmp_path / "pair" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
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
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stderr


def sets(*items: str) -> list[str]:
    from conftest import TINY_OVERRIDES

    return [arg for item in (*TINY_OVERRIDES, *items) for arg in ("--set", item)]


def test_translate_train_under_torchrun_validates_saves_and_resumes(recipe_path, small_data,
                                                                   tmp_path):
    run_dir = tmp_path / "run"

    def torchrun_here(*args: str) -> str:
        return torchrun(small_data, tmp_path, *args)

    out = torchrun_here("train", str(recipe_path), "--run-dir", str(run_dir),
                        *sets("train.eval_every=10", "train.log_every=5", "train.max_steps=20"))
    assert out.count("best checkpoint:") == 1 and "2 processes" in out  # rank 0 reports
    assert (run_dir / "step_20.pt").is_file() and (run_dir / "best.pt").is_file()
    out = torchrun_here("train", "--resume", str(run_dir), "--set", "train.max_steps=30")
    assert f"resuming from {run_dir / 'step_20.pt'}: step 20, epoch 1, batch 40" in out
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [5, 10, 15, 20, 25, 30]  # written once, by rank 0
    assert [r["step"] for r in records if r["kind"] == "valid"] == [10, 20, 30]
    assert all(r["world_size"] == 2 for r in train)
    assert (run_dir / "test_2016_flickr.hyp.de").is_file()


def test_early_stopping_under_torchrun_stops_every_rank_at_once(recipe_path, small_data,
                                                                 tmp_path):
    """Rank 0 validates alone; its patience decision reaches rank 1, which would otherwise train
    on (and wait forever in the next step's all-reduce)."""
    run_dir = tmp_path / "run"
    out = torchrun(small_data, tmp_path, "train", str(recipe_path), "--run-dir", str(run_dir),
                   *sets("train.lr=1e-9", "train.eval_every=5", "train.patience=1",
                         "train.max_steps=1000", "data.test_splits=[]"))
    assert "(step 5 of 10, " in out  # best at step 5, none better at 10: patience 1 is spent
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "valid"] == [5, 10]


def test_two_nodes_meet_through_torchrun_rendezvous(recipe_path, small_data, tmp_path):
    """Multi-node as torchrun does it: one agent per node, meeting at a c10d rendezvous (here two
    agents on this machine, one process each). Rank 0's node writes; both finish together."""
    run_dir, port = tmp_path / "run", free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
         "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "two-nodes",
         "-m", "translate", "train", str(recipe_path), "--run-dir", str(run_dir), "--data",
         str(small_data), "--no-progress",
         *sets("train.eval_every=10", "train.log_every=5", "train.max_steps=10",
               "data.test_splits=[]")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    assert sum(out.count("best checkpoint:") for out in outputs) == 1  # rank 0 alone reports
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [5, 10]  # written once
    assert all(r["world_size"] == 2 for r in records if r["kind"] == "train")
    assert (run_dir / "step_10.pt").is_file()
