"""`train.pick: dev`: the run ends with best.pt or the raw average of its last step checkpoints,
whichever translates dev better at the decoding beam, and scores the test splits with it."""

import json

import pytest
import torch

from helpers.training import TINY_OVERRIDES, train_tiny
from translate.checkpoint import read_checkpoint
from translate.config import recipe_from_dict
from translate.evaluation import score_checkpoint
from translate.training import pick as pick_module
from translate.training.pick import pick_on_dev


def records(run, kind):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


@pytest.fixture(scope="module")
def picked_run(small_data, recipe_path, tmp_path_factory):
    """A tiny run of 200 steps that keeps its last 3 step checkpoints and picks on dev."""
    run = tmp_path_factory.mktemp("pick") / "run"
    result = train_tiny(recipe_path, [*TINY_OVERRIDES, "train.eval_every=50", "train.keep_last=3",
                                      "train.pick=dev"], small_data, 200, run)
    return run, result


def test_the_pick_is_the_candidate_with_the_higher_dev_bleu(picked_run, small_data):
    run, result = picked_run
    [record] = records(run, "pick")
    assert set(record["dev_bleu"]) == {"best.pt", "average_last3_raw.pt"}
    # each candidate's figure is the one `translate evaluate` gives on dev at the same beam
    for name, bleu in record["dev_bleu"].items():
        scores = score_checkpoint(str(run / name), ["dev"], str(small_data), device="cpu")
        assert scores["dev"].bleu == pytest.approx(bleu, abs=1e-9), name
    best, average = record["dev_bleu"]["best.pt"], record["dev_bleu"]["average_last3_raw.pt"]
    assert record["pick"] == ("average_last3_raw.pt" if average > best else "best.pt")
    assert result.best_checkpoint == run / record["pick"] and best > 1.0  # a model that translates


def test_the_average_is_of_the_raw_weights_of_the_last_step_checkpoints(picked_run):
    run, _ = picked_run
    average = read_checkpoint(run / "average_last3_raw.pt")
    assert average["averaged"] == ["step_100.pt", "step_150.pt", "step_200.pt"]
    assert average["averaged_weights"] == "raw"
    inputs = [read_checkpoint(run / name)["train_model"] for name in average["averaged"]]
    for name in ("output.weight", "encoder_layers.0.self_attn.q_proj.weight"):
        mean = sum(state[name].double() for state in inputs) / 3
        assert torch.equal(average["model"][name], mean.float()), name


def test_the_test_splits_are_scored_with_the_pick(picked_run, small_data):
    run, result = picked_run
    [test] = records(run, "test")
    picked = score_checkpoint(str(result.best_checkpoint), ["test_2016_flickr"], str(small_data),
                              device="cpu")
    assert test["bleu"] == pytest.approx(picked["test_2016_flickr"].bleu, abs=1e-9)
    assert test["step"] == 200 and result.test_scores["test_2016_flickr"].bleu == test["bleu"]


class FakeValidation:
    """What pick_on_dev reads of a run's Validation, for the rule alone."""

    def __init__(self, recipe):
        self.recipe, self.device, self.engine = recipe, torch.device("cpu"), None

        class Dev:
            src, tgt = ["a"], ["b"]
        self.dev = Dev()


@pytest.mark.parametrize("best, average, picked", [(30.0, 31.0, "average_last3_raw.pt"),
                                                   (31.0, 30.0, "best.pt"),
                                                   (30.0, 30.0, "best.pt")])  # a tie: best.pt
def test_the_rule_keeps_the_higher_and_best_pt_on_a_tie(picked_run, monkeypatch, best, average,
                                                        picked):
    run, _ = picked_run
    figures = {"best.pt": best, "average_last3_raw.pt": average}
    steps = iter(["best.pt", "average_last3_raw.pt"])
    loaded = read_checkpoint(run / "best.pt")

    class Result:
        def __init__(self, bleu):
            self.scores = type("Scores", (), {"bleu": bleu})()

    monkeypatch.setattr(pick_module, "load_checkpoint", lambda path, device: type(
        "Loaded", (), {"model": None, "tokenizer": None, "recipe": None, "step": 1})())
    monkeypatch.setattr(pick_module.Ready, "prepare",
                        staticmethod(lambda *a: type("Ready", (), {"step": 1})()))
    monkeypatch.setattr(pick_module, "evaluate_split",
                        lambda *a: Result(figures[next(steps)]))
    written = []
    metrics = type("Metrics", (), {"write": lambda self, r: written.append(r)})()
    recipe = recipe_from_dict(loaded["recipe"], "recipe", resolved=True)
    assert pick_on_dev(run, FakeValidation(recipe), metrics)[0] == run / picked
    assert written[0]["pick"] == picked and written[0]["dev_bleu"] == figures
