"""Decode a split and score it: one path for training's test decode, `evaluate` and `compare`."""

import json

import pytest
from click.testing import CliRunner

from translate.cli import main
from translate.data.read import load_split
from translate.evaluation import evaluate_split
from translate.inference import translate_sentences
from translate.ready import Ready
from translate.scoring import score


@pytest.fixture(scope="module")
def evaluated(trained_run):
    """The tiny Transformer's test_2016_flickr split, decoded and scored with the recipe's
    precision and the default engine on the CPU, as training and `translate evaluate` do."""
    ready = Ready.load(trained_run.best_checkpoint, "cpu")
    src, ref = load_split(ready.recipe.data, "test_2016_flickr")
    result = evaluate_split(ready, src, ref, ready.recipe.decode, "de")
    return ready, src, ref, result


def test_the_result_is_the_translations_and_their_scores(evaluated):
    ready, src, ref, result = evaluated
    assert result.hypotheses == translate_sentences(ready, src, ready.recipe.decode)
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
    ready, src, ref, _ = evaluated
    with pytest.raises(ValueError, match="100 sources but 99 references"):
        evaluate_split(ready, src, ref[:99], ready.recipe.decode, "de")


def test_length_ratio_is_hypothesis_over_reference_tokens():
    refs = ["Ein Hund rennt.", "Zwei Katzen spielen im Schnee."]  # 4 + 6 tokens (13a); 3 + 4 below
    assert score(["Ein Hund.", "Zwei Katzen spielen."], refs).length_ratio == pytest.approx(0.7)
    assert score(refs, refs).length_ratio == pytest.approx(1.0)
