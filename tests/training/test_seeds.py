"""`translate train --seeds`: one tiny real run per seed, each an ordinary run folder, and a
summary whose mean and sd are those of the runs' own metrics logs."""

import json
import math

import pytest
import torch
from click.testing import CliRunner

from helpers.training import TINY_OVERRIDES
from translate.analysis.seeds import Spread, seed_group, seed_groups, seed_spread
from translate.cli import main
from translate.training.checkpoints import load_run_recipe


@pytest.fixture(scope="module")
def seeded(small_data, recipe_path, tmp_path_factory):
    """`translate train --seeds 1,2` of 20 steps each: (run dir given, the command's result)."""
    run_dir = tmp_path_factory.mktemp("seeds") / "run"
    sets = [a for item in (*TINY_OVERRIDES, "train.max_steps=20", "train.eval_every=20",
                           # outputs of at most 12 pieces: an untrained model runs to the
                           # length limit, and `compare` draws every output's attention
                           "decode.max_len_a=0", "decode.max_len_b=12")
            for a in ("--set", item)]
    result = CliRunner().invoke(main, ["train", str(recipe_path), "--seeds", "1,2", "--data",
                                       str(small_data), "--run-dir", str(run_dir),
                                       "--no-progress", *sets])
    assert result.exit_code == 0, result.output
    return run_dir, result


def records(run_dir, kind):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_each_seed_trains_its_own_ordinary_run_folder(seeded):
    run_dir, _ = seeded
    one, two = run_dir.parent / "run-seed1", run_dir.parent / "run-seed2"
    assert not run_dir.exists()
    for folder, seed in ((one, 1), (two, 2)):
        assert (folder / "best.pt").is_file() and (folder / "run.json").is_file()
        assert load_run_recipe(folder, ()).train.seed == seed  # what --resume would go on with
    a = torch.load(one / "best.pt", weights_only=True)["model"]
    b = torch.load(two / "best.pt", weights_only=True)["model"]
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)
    decoded = CliRunner().invoke(main, ["decode", str(two / "best.pt"), "--beam", "1"],
                                 input="A dog runs.\n")
    assert decoded.exit_code == 0 and len(decoded.output.splitlines()) == 1, decoded.output


def test_the_summary_is_the_mean_and_sample_sd_of_the_runs_records(seeded):
    run_dir, result = seeded
    folders = [run_dir.parent / f"run-seed{s}" for s in (1, 2)]
    dev = [max(r["dev_bleu"] for r in records(f, "valid")) for f in folders]
    test = [next(r for r in records(f, "test") if r["split"] == "test_2016_flickr")
            for f in folders]
    spread = seed_spread(folders).spread
    for got, values in ((spread["dev"]["bleu"], dev),
                        (spread["test_2016_flickr"]["bleu"], [r["bleu"] for r in test]),
                        (spread["test_2016_flickr"]["chrf"], [r["chrf"] for r in test])):
        mean = (values[0] + values[1]) / 2
        sd = abs(values[0] - values[1]) / math.sqrt(2)  # n - 1 = 1
        assert (got.mean, got.sd, got.low, got.high, got.n) == pytest.approx(
            (mean, sd, min(values), max(values), 2))
        assert f"mean {mean:.2f} ± {sd:.2f}  [{min(values):.2f}, {max(values):.2f}]  n=2" \
            in result.output
    assert "== best dev ==" in result.output and "== test_2016_flickr ==" in result.output
    assert f"seed 2: BLEU {test[1]['bleu']:.2f}  chrF {test[1]['chrf']:.2f}" in result.output


def test_one_run_has_no_sd_and_says_so():
    one = Spread.of([31.5])
    assert (one.mean, one.sd, one.low, one.high, one.n) == (31.5, None, 31.5, 31.5, 1)
    assert "sd undefined" in str(one)
    three = Spread.of([30.0, 31.0, 35.0])
    assert three.mean == 32.0 and three.sd == pytest.approx(math.sqrt(7))



def test_compare_gives_the_seeds_as_a_group_with_their_spread(seeded, small_data, tmp_path):
    run_dir, _ = seeded
    folders = [run_dir.parent / f"run-seed{s}" for s in (1, 2)]
    result = CliRunner().invoke(main, ["compare", *map(str, folders), "--data", str(small_data),
                                       "-o", str(tmp_path), "--samples", "0", "--beam", "1"])
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "results.json").read_text())
    bleu = [s["bleu"] for s in results["systems"]]
    [group] = results["seed_groups"]
    assert group["group"] == "run" and group["systems"] == ["run-seed1", "run-seed2"]
    assert group["bleu"]["mean"] == pytest.approx(sum(bleu) / 2)
    assert group["bleu"]["sd"] == pytest.approx(abs(bleu[0] - bleu[1]) / math.sqrt(2))
    md = (tmp_path / "report.md").read_text()
    assert "## Seeds: mean and spread per group" in md
    assert f"| run | run-seed1, run-seed2 | 2 | {group['bleu']['mean']:.2f} ± " in md


def test_groups_of_seeds_differ_by_their_means_with_a_standard_error():
    systems = [{"name": n, "run_dir": f"/runs/{n}", "checkpoint": "best.pt", "bleu": b,
                "chrf": c} for n, b, c in [("a-seed1", 30.0, 50.0), ("b-seed1", 31.0, 52.0),
                                            ("a-seed2", 32.0, 54.0), ("b-seed7", 34.0, 52.0),
                                            ("lone", 20.0, 40.0)]]
    a, b, lone = seed_groups(systems)
    assert (a["group"], a["systems"], b["systems"]) == ("a", ["a-seed1", "a-seed2"],
                                                      ["b-seed1", "b-seed7"])
    assert "difference" not in a and a["bleu"]["mean"] == 31.0
    assert a["bleu"]["sd"] == pytest.approx(math.sqrt(2)) and b["bleu"]["sd"] == pytest.approx(
        math.sqrt(4.5))
    assert b["difference"]["bleu"]["mean"] == pytest.approx(1.5)
    assert b["difference"]["bleu"]["se"] == pytest.approx(math.sqrt(2 / 2 + 4.5 / 2))
    assert b["difference"]["chrf"]["mean"] == pytest.approx(0.0)
    assert lone["bleu"]["sd"] is None and lone["difference"]["bleu"]["se"] is None
    assert seed_groups(systems[:2]) == []  # one run per group: no spread to show
    assert seed_group("/runs/a-seed2", "average_last5.pt") == "a-average_last5"
