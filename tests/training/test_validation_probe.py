"""Validation of an untrained model: the first PROBE_SENTENCES dev sentences, not all of dev."""

import json
import shutil

import pytest

from helpers.training import tiny_trainer
from translate.training.validation import PROBE_SENTENCES, UNTRAINED_BLEU


@pytest.fixture(scope="module")
def long_dev(small_data, tmp_path_factory):
    """The sample with a 300-pair dev split (train pairs stand in for dev ones)."""
    folder = shutil.copytree(small_data, tmp_path_factory.mktemp("data") / "multi30k")
    lines = (folder / "train.jsonl").read_text(encoding="utf-8").splitlines(True)
    (folder / "validation.jsonl").write_text("".join(lines[:300]), encoding="utf-8")
    return folder


@pytest.fixture
def untrained(recipe_path, long_dev, tmp_path):
    return tiny_trainer(recipe_path, long_dev, tmp_path / "run", "train.monitor_splits=[test_2017_flickr]")


def test_an_untrained_model_is_scored_on_the_first_sentences_alone(untrained):
    validation, model = untrained.validation, untrained.updater.eval_model
    losses, bleus = validation(model, best_bleu=-1.0)  # nothing scored yet
    first = validation.dev.src[:PROBE_SENTENCES], validation.dev.tgt[:PROBE_SENTENCES]
    assert bleus == {"dev_bleu": validation.scores(model, {"dev": first})["dev_bleu"],
                     "dev_bleu_sentences": PROBE_SENTENCES}
    assert bleus["dev_bleu"] < UNTRAINED_BLEU and losses["dev_loss"] > 5  # untrained indeed
    whole_losses, whole = validation(model, best_bleu=UNTRAINED_BLEU)  # once it has translated
    assert whole_losses == losses and set(whole) == {"dev_bleu", "test_2017_flickr_bleu"}
    everything = {"dev": (validation.dev.src, validation.dev.tgt), **validation.monitor}
    assert whole == validation.scores(model, everything)


def test_the_log_and_the_metrics_say_which_sentences_were_scored(untrained, caplog):
    with caplog.at_level("INFO", logger="translate"):
        untrained.validate()
    record = json.loads((untrained.run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["kind"] == "valid" and record["dev_bleu_sentences"] == PROBE_SENTENCES
    assert f"(first {PROBE_SENTENCES} sentences)" in caplog.text
    assert (untrained.run_dir / "best.pt").is_file()  # a probe validation saves as any does
