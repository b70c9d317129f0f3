"""Decode a split and score it: one path for training's test decode, `evaluate` and `compare`."""

import json

import pytest
import torch
from click.testing import CliRunner

from translate.checkpoint import load_checkpoint
from translate.cli import main
from translate.data.read import load_split
from translate.engine import resolve_engine
from translate.evaluation import evaluate_split
from translate.inference import decoding_model, translate_sentences
from translate.scoring import score

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def evaluated(trained_run):
    """The tiny Transformer's test_2016_flickr split, decoded and scored with the recipe's
    precision and the default engine, as training and `translate evaluate` do."""
    loaded = load_checkpoint(trained_run.best_checkpoint)
    engine = resolve_engine("auto", CPU)
    model, precision = decoding_model(loaded.model, loaded.recipe.train.precision, CPU, engine)
    src, ref = load_split(loaded.recipe.data, "test_2016_flickr")
    result = evaluate_split(model, loaded.tokenizer, src, ref, loaded.recipe.decode, "de", CPU,
                            precision, engine)
    return loaded, model, precision, engine, src, ref, result


def test_the_result_is_the_translations_and_their_scores(evaluated):
    loaded, model, precision, engine, src, ref, result = evaluated
    assert result.hypotheses == translate_sentences(model, loaded.tokenizer, src,
                                                    loaded.recipe.decode, CPU, precision,
                                                    engine=engine)
    assert result.scores == score(result.hypotheses, ref, "de")
    assert result.scores.sentences == 100 and result.seconds > 0


def test_training_and_evaluate_score_the_test_split_alike(evaluated, trained_run, small_data):
    result = evaluated[-1]
    run = trained_run.run_dir
    assert (run / "test_2016_flickr.hyp.de").read_text(encoding="utf-8").splitlines() == \
        result.hypotheses
    assert trained_run.test_scores["test_2016_flickr"] == result.scores
    cli = CliRunner().invoke(main, ["evaluate", str(trained_run.best_checkpoint), "--split",
                                    "test_2016_flickr", "--data", str(small_data), "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout)["test_2016_flickr"]["bleu"] == result.scores.bleu


def test_sources_and_references_must_pair_up(evaluated):
    loaded, model, precision, engine, src, ref, _ = evaluated
    with pytest.raises(ValueError, match="100 sources but 99 references"):
        evaluate_split(model, loaded.tokenizer, src, ref[:99], loaded.recipe.decode, "de")


def test_length_ratio_is_hypothesis_over_reference_tokens():
    refs = ["Ein Hund rennt.", "Zwei Katzen spielen im Schnee."]  # 4 + 6 tokens (13a); 3 + 4 below
    assert score(["Ein Hund.", "Zwei Katzen spielen."], refs).length_ratio == pytest.approx(0.7)
    assert score(refs, refs).length_ratio == pytest.approx(1.0)
