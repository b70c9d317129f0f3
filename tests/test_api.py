"""The Python API, used as a notebook would: load a trained run, translate, look, score."""

import pytest

from helpers.files import read_jsonl


@pytest.fixture(scope="module")
def translator(trained_run):
    from translate import Translator

    return Translator.load(trained_run.run_dir, device="cpu", precision="fp32")


def test_three_lines_translate_a_list_with_beam_5(trained_run, small_data):
    from translate import Translator

    translator = Translator.load(trained_run.run_dir)
    sources = [row["en"] for row in read_jsonl(small_data / "test_2016_flickr.jsonl", 20)]
    german = translator.translate(sources, beam=5)

    assert len(german) == 20 and all(isinstance(line, str) for line in german)
    from dataclasses import replace

    from translate.inference import translate_sentences
    from translate.ready import Ready

    ready = Ready.load(trained_run.run_dir)  # what `translate decode --beam 5` runs
    assert (ready.device, ready.precision, ready.engine) == (translator.device,
                                                             translator.precision,
                                                             translator.engine)
    cfg = replace(ready.recipe.decode, beam=5)
    assert german == translate_sentences(ready, sources, cfg)


def test_one_sentence_in_one_out_and_order_kept(translator, small_data):
    sources = [row["en"] for row in read_jsonl(small_data / "test_2016_flickr.jsonl", 6)]
    together = translator.translate(sources + [""], beam=3)
    assert together[-1] == ""
    assert together[:-1] == [translator.translate(s, beam=3) for s in sources]


def test_nbest_with_scores_best_first(translator):
    found = translator.translate(["A man rides a bike.", "Two dogs play."], beam=4, nbest=3,
                                 return_scores=True)
    assert [len(hyps) for hyps in found] == [3, 3]
    for hyps in found:
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)
        assert len({h.text for h in hyps}) == 3
    assert found[0][0].text == translator.translate("A man rides a bike.", beam=4)


def test_attention_has_every_module_with_roles_and_labels(translator):
    maps = translator.attention("A dog runs in the snow.")
    cfg = translator.recipe.model
    roles = [role for role, _ in maps.roles.values()]
    assert len(maps.weights) == 2 * cfg.decoder_layers + cfg.encoder_layers
    assert {roles.count(r) for r in set(roles)} == {2}
    S, T = len(maps.src_pieces), len(maps.tgt_in_pieces)
    assert maps.translation == translator.translate("A dog runs in the snow.", beam=1)
    for name, w in maps.weights.items():
        assert w.shape[0] == cfg.heads and w.shape[-1] in (S, T)
        assert w.sum(-1).sub(1).abs().max() < 1e-4  # each query's weights sum to one


def test_score_matches_sacrebleu(translator):
    import sacrebleu

    hyps = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]
    refs = ["Ein Mann fährt ein Fahrrad.", "Zwei Hunde spielen im Schnee."]
    assert translator.score(hyps, refs).bleu == pytest.approx(
        sacrebleu.corpus_bleu(hyps, [refs]).score)


@pytest.mark.parametrize("call, message", [
    (lambda t: t.translate(["fine", 3]), "texts\\[1\\] is int"),
    (lambda t: t.translate("x", beam=0), "beam must be a positive integer"),
    (lambda t: t.translate("x", beam=2, nbest=3), "nbest must be an integer from 1 to"),
    (lambda t: t.translate(["one\ntwo"]), "line break"),
    (lambda t: t.score(["a"], ["a", "b"]), "1 hypotheses but 2 references"),
    (lambda t: t.attention(""), "empty"),
])
def test_bad_arguments_say_what_is_wrong(translator, call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call(translator)


def test_a_missing_checkpoint_is_one_clear_error(tmp_path):
    from translate import Translator
    from translate.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="checkpoint not found"):
        Translator.load(tmp_path / "nothing.pt")


def test_the_default_beam_is_the_recipes(translator, monkeypatch):
    """A WMT14 model decodes at its recipe's beam 4, a Multi30k one at 5, unless asked."""
    from dataclasses import replace

    import translate.api
    from translate import Translator

    beams = []
    real = translate.api.decode_sentences

    def spy(ready, sentences, cfg, **options):
        beams.append(cfg.beam)
        return real(ready, sentences, cfg, **options)

    monkeypatch.setattr(translate.api, "decode_sentences", spy)
    recipe = translator.recipe
    four = Translator(replace(translator.ready, recipe=replace(
        recipe, decode=replace(recipe.decode, beam=4))))
    translator.translate("A dog runs.")
    four.translate("A dog runs.")
    four.translate("A dog runs.", beam=2)
    assert beams == [recipe.decode.beam, 4, 2]
    assert four.decode_config().beam == 4
