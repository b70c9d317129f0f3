"""The Python API against hostile arguments: each refusal is a TypeError or ValueError whose
message names the argument and what it takes, and the translator goes on translating."""

import pytest

from translate import Translator
from translate.checkpoint import CheckpointError


@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator.load(trained_run.run_dir, device="cpu", precision="fp32")


@pytest.mark.parametrize("texts, error, says", [
    (5, TypeError, "texts must be a string or a list of strings, not int"),
    (None, TypeError, "texts must be a string or a list of strings, not NoneType"),
    (b"A dog.", TypeError, "texts must be a string or a list of strings, not bytes"),
    ({"text": "A dog."}, TypeError, "not dict"),
    ([1, 2], TypeError, "texts[0] is int, not str"),
    (["ok", None], TypeError, "texts[1] is NoneType, not str"),
    (["one\ntwo"], ValueError, "texts[0] holds a line break"),
])
def test_texts_that_are_not_sentences_are_refused_by_name(translator, texts, error, says):
    with pytest.raises(error) as refused:
        translator.translate(texts)
    assert says in str(refused.value)
    assert translator.translate("A dog runs.", beam=1)


@pytest.mark.parametrize("options, says", [
    ({"beam": 0}, "beam must be a positive integer, got 0"),
    ({"beam": 2.5}, "beam must be a positive integer, got 2.5"),
    ({"beam": True}, "beam must be a positive integer, got True"),
    ({"beam": 2, "nbest": 3}, "nbest must be an integer from 1 to the beam size (2), got 3"),
    ({"beam": 100_000}, "beam: must be at most 1,024"),
    ({"lenpen": float("nan")}, "lenpen"),
])
def test_decoding_options_out_of_range_are_refused_by_name(translator, options, says):
    with pytest.raises(ValueError) as refused:
        translator.translate("A dog runs.", **options)
    assert says in str(refused.value)


def test_a_missing_model_and_a_text_that_is_not_one_are_refused(translator, tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        Translator.load(tmp_path / "nothing")
    with pytest.raises(TypeError, match="text is int, not str"):
        translator.attention(5)
    assert translator.translate([]) == []


@pytest.mark.parametrize("target, error, says", [
    (5, TypeError, "target is int, not str"),
    (["Ein Hund."], TypeError, "target is list, not str"),
    (b"Ein Hund.", TypeError, "target is bytes, not str"),
    (" ", ValueError, "the target translation is empty"),
    ("Hund " * 500, ValueError, "pieces, over the limit of"),
])
def test_an_attention_target_that_is_not_a_translation_is_refused(translator, target, error,
                                                                   says):
    with pytest.raises(error) as refused:
        translator.attention("A dog runs.", target)
    assert says in str(refused.value)


@pytest.mark.parametrize("device, says", [
    ("gpu", "device='gpu' is not a device: use cpu, cuda, cuda:N or mps"),
    ("cuda:7", "device='cuda:7': "),
])
def test_a_bad_device_is_refused_in_the_apis_words(trained_run, device, says):
    with pytest.raises(ValueError) as refused:
        Translator.load(trained_run.run_dir, device=device)
    assert says in str(refused.value) and "--device" not in str(refused.value)
