"""The Python API against hostile arguments: each refusal is a TypeError or ValueError whose
message names the argument and what it takes, and the translator goes on translating; one
translator shared by threads gives each call what it gives alone."""

import threading

import pytest
import torch

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
    (["ok", b"A dog."], TypeError, "texts[1] is bytes, not str"),
    ((s for s in ["ok", 3.5]), TypeError, "texts[1] is float, not str"),
    (["one\ntwo"], ValueError, "texts[0] holds a line break"),
    (["one\rtwo"], ValueError, "texts[0] holds a line break"),
    ("one\ntwo", ValueError, "texts holds a line break"),
    ({"A dog.", "A cat."}, TypeError, "not set (unordered: output i answers input i, so give"),
    (frozenset({"A dog."}), TypeError, "not frozenset (unordered"),
    ({"A dog.": 1}.keys(), TypeError, "not dict_keys (unordered"),
    ({1: "A dog."}.values(), TypeError, "not dict_values (unordered"),
    ("\ud800", ValueError, "texts holds a lone surrogate (U+D800) at character 0, which is not "
                           "text"),
    (["ok", "A dog\udcff."], ValueError, "texts[1] holds a lone surrogate (U+DCFF) at character 5"),
    (bytearray(b"A dog."), TypeError, "not bytearray"),
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
    ({"lenpen": 1e300}, "lenpen: must be at most 10.0"),
    ({"lenpen": -1.0}, "lenpen: must not be negative"),
    ({"lenpen": "0.6"}, "lenpen must be a number, got '0.6'"),
    ({"lenpen": True}, "lenpen must be a number, got True"),
    ({"beam": 5, "nbest": "2"}, "nbest must be an integer from 1 to the beam size (5), got '2'"),
    ({"beam": 5, "nbest": 0}, "nbest must be an integer from 1 to the beam size (5), got 0"),
    ({"nbest": None}, "got None"),
    ({"beam": "4"}, "beam must be a positive integer, got '4'"),  # None: the recipe's
    ({"beam": -3}, "beam must be a positive integer, got -3"),
])
def test_decoding_options_out_of_range_are_refused_by_name(translator, options, says):
    with pytest.raises(ValueError) as refused:
        translator.translate("A dog runs.", **options)
    assert says in str(refused.value)


def test_ordered_collections_translate_as_a_list_does(translator):
    sentences = ["A dog runs.", "Two men play football."]
    as_list = translator.translate(sentences, beam=1)
    assert translator.translate(tuple(sentences), beam=1) == as_list
    assert translator.translate((s for s in sentences), beam=1) == as_list
    assert translator.translate(iter([]), beam=1) == []


def test_return_scores_takes_a_bool_only(translator):
    with pytest.raises(TypeError, match="return_scores must be True or False, not str"):
        translator.translate("A dog runs.", return_scores="yes")


@pytest.mark.parametrize("hypotheses, references, error, says", [
    ([], [], ValueError, "no hypotheses and no references"),
    (iter([]), (), ValueError, "no hypotheses and no references"),
    (["a"], [], ValueError, "1 hypotheses but 0 references"),
    (["a", "b"], ["a"], ValueError, "2 hypotheses but 1 references"),
    ("Ein Hund.", "Ein Hund.", TypeError, "hypotheses must be a list of strings, not str"),
    (["Ein Hund."], "Ein Hund.", TypeError, "references must be a list of strings, not str"),
    (None, ["a"], TypeError, "hypotheses must be a list of strings, not NoneType"),
    ({"a"}, ["a"], TypeError, "hypotheses must be a list of strings, not set (unordered"),
    (["a"], {"a": "b"}, TypeError, "references must be a list of strings, not dict"),
    ([1], ["a"], TypeError, "hypotheses[0] is int, not str"),
    (["a"], [None], TypeError, "references[0] is NoneType, not str"),
    (["a"], [b"a"], TypeError, "references[0] is bytes, not str"),
    (["a\ud800"], ["a"], ValueError, "hypotheses[0] holds a lone surrogate (U+D800)"),
    (["a\nb"], ["a"], ValueError, "hypotheses[0] holds a line break"),
])
def test_score_takes_two_lists_of_lines(translator, hypotheses, references, error, says):
    with pytest.raises(error) as refused:
        translator.score(hypotheses, references)
    assert says in str(refused.value)


def test_score_takes_generators_and_tuples(translator):
    lines = ["Ein Hund rennt.", "Zwei Männer spielen."]
    assert translator.score((line for line in lines), tuple(lines)).bleu == pytest.approx(100)


def test_a_missing_model_and_a_text_that_is_not_one_are_refused(translator, tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        Translator.load(tmp_path / "nothing")
    for path in (None, 5, [str(tmp_path)]):
        with pytest.raises(TypeError, match=f"path must be a str or a Path, not "
                                            f"{type(path).__name__}"):
            Translator.load(path)
    with pytest.raises(TypeError, match="text is int, not str"):
        translator.attention(5)
    assert translator.translate([]) == []


@pytest.mark.parametrize("target, error, says", [
    (5, TypeError, "target is int, not str"),
    (["Ein Hund."], TypeError, "target is list, not str"),
    (b"Ein Hund.", TypeError, "target is bytes, not str"),
    (" ", ValueError, "the target translation is empty"),
    ("Hund " * 500, ValueError, "pieces, over the limit of"),
    ("Ein\udc80 Hund.", ValueError, "target holds a lone surrogate (U+DC80) at character 3"),
    ("Ein\nHund.", ValueError, "target holds a line break"),
])
def test_an_attention_target_that_is_not_a_translation_is_refused(translator, target, error,
                                                                   says):
    with pytest.raises(error) as refused:
        translator.attention("A dog runs.", target)
    assert says in str(refused.value)


@pytest.mark.parametrize("text, error, says", [
    (None, TypeError, "text is NoneType, not str"),
    (["A dog."], TypeError, "text is list, not str"),
    ("", ValueError, "the sentence to translate is empty"),
    ("A \ud83d dog.", ValueError, "text holds a lone surrogate (U+D83D) at character 2"),
    ("A dog.\nA cat.", ValueError, "text holds a line break"),
])
def test_an_attention_text_that_is_not_a_sentence_is_refused(translator, text, error, says):
    with pytest.raises(error) as refused:
        translator.attention(text)
    assert says in str(refused.value)


def test_threads_sharing_a_translator_get_what_one_thread_gets(translator):
    """Four threads mix translate() and attention() on one translator: attention's recording
    hooks sit on the shared modules, so without the translator's lock its maps would take in
    other threads' calls (and fail to concatenate)."""
    sentences = ["A dog runs.", "Two men play football in the park.", "A woman reads.",
                 "A child in a red shirt jumps into the lake."]
    alone = {s: (translator.translate(s, beam=2), translator.attention(s)) for s in sentences}
    calls = [(kind, s) for s in sentences for kind in ("translate", "attention")] * 3
    results, errors = [None] * len(calls), []
    start = threading.Barrier(4)

    def work(first: int) -> None:
        start.wait()
        for j in range(first, len(calls), 4):
            kind, s = calls[j]
            try:
                results[j] = (translator.translate(s, beam=2) if kind == "translate"
                              else translator.attention(s))
            except Exception as e:  # noqa: BLE001 (reported below, with the call)
                errors.append(f"{kind}({s!r}): {e!r}")

    threads = [threading.Thread(target=work, args=(first,)) for first in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for (kind, s), got in zip(calls, results):
        text, maps = alone[s]
        if kind == "translate":
            assert got == text
        else:
            assert got.translation == maps.translation and got.weights.keys() == maps.weights.keys()
            assert all(torch.equal(got.weights[name], w) for name, w in maps.weights.items())


@pytest.mark.parametrize("device, says", [
    ("gpu", "device='gpu' is not a device: use cpu, cuda, cuda:N or mps"),
    ("cuda:7", "device='cuda:7': "),
])
def test_a_bad_device_is_refused_in_the_apis_words(trained_run, device, says):
    with pytest.raises(ValueError) as refused:
        Translator.load(trained_run.run_dir, device=device)
    assert says in str(refused.value) and "--device" not in str(refused.value)
