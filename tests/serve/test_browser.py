"""The page in headless Chromium against a real `translate serve`: type, translate, pick the
second n-best candidate and see its attention drawn (every layer x head at once, masked cells
hatched, the word alignment outlined on its layer), enlarge a panel and read a weight, pick by keyboard, download the figure and the
weights, and a German -> English run labelled as one.

Skips, saying what is missing, without /usr/bin/chromium, /usr/bin/chromedriver or selenium
(Debian: apt-get install chromium chromium-driver; selenium is in the test extra).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("starlette", reason="translate serve needs the serve extra")

_spec = importlib.util.spec_from_file_location(
    "serve_screenshot", Path(__file__).resolve().parents[2] / "scripts" / "serve_screenshot.py")
page = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(page)

if reason := page.missing():
    pytest.skip(f"no browser test: missing {reason}", allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from translate.checkpoint import read_checkpoint, write_checkpoint  # noqa: E402
from translate.models.attention import CROSS, DECODER_SELF, ENCODER_SELF  # noqa: E402
from translate.serve import load_translator  # noqa: E402
from translate.serve.attention_json import alignment_json  # noqa: E402
from translate.serve.process import running  # noqa: E402

TEXT = "Two men are sitting on a bench."


@pytest.fixture(scope="module")
def url(trained_run):
    with running(trained_run.run_dir, "--device", "cpu", "--precision", "fp32") as url:
        yield url


@pytest.fixture(scope="module")
def driver():
    driver = page.browser()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def translator(trained_run):
    return load_translator(trained_run.run_dir, "cpu", "fp32")


@pytest.fixture(scope="module")
def shown(url, driver, translator):
    """The page after translating TEXT (3-best) and picking the second translation."""
    return page.drive(driver, url, TEXT, nbest=3, pick=2)


def pieces(translator, text: str) -> list[str]:
    """The target pieces of `text`, EOS last: the rows the page draws for it."""
    return [translator.tokenizer.tgt.id_to_piece(i)
            for i in translator.tokenizer.encode_tgt([text])[0]]


def test_picking_the_second_candidate_draws_its_attention(shown, driver, translator, tmp_path):
    print(f"screenshot: {page.save_page(driver, tmp_path / 'serve_page.png')}")
    candidates = translator.translate(TEXT, beam=5, nbest=3)
    second = candidates[1]
    assert shown["error"] == "" and second, candidates  # (an empty one cannot be picked)
    assert shown["candidates"] == candidates and shown["translation"] == candidates[0]
    assert shown["picked"] == second
    assert shown["out_pieces"] == pieces(translator, second)  # the rows of its cross-attention
    # the enlarged panel: the last layer's cross-attention, head 1, labelled and with its weights
    cfg = translator.recipe.model
    assert shown["detail"] == (f"Cross-attention (target → source), layer "
                               f"{cfg.decoder_layers}, head 1")
    maps = translator.attention(TEXT, second)
    cross = [name for name, (role, _) in maps.roles.items() if role == CROSS][-1]
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#heatmap [id^=query-]')].map(n => n.textContent)")
    assert rows == maps.out_pieces == shown["out_pieces"]
    drawn = driver.execute_script("""return [...document.querySelectorAll('#heatmap rect.cell')]
        .map(c => [Number(c.dataset.q), Number(c.dataset.k), Number(c.dataset.w)])""")
    assert len(drawn) == len(maps.out_pieces) * len(maps.src_pieces)
    expected = maps.weights[cross][0]  # (T, S), head 1
    assert max(abs(w - expected[q, k].item()) for q, k, w in drawn) <= 6e-4  # 3 places
    row = len(maps.out_pieces) // 2  # the row `drive` pointed at
    assert re.fullmatch(rf"query “{re.escape(maps.out_pieces[row])}” → key “.+”: weight "
                        r"[01]\.\d{3}", shown["cell"])
    assert step_down(driver).startswith(f"query “{maps.out_pieces[row + 1]}” → key ")
    # the languages come from the run (/health), not from the page
    assert driver.find_element(By.ID, "direction").text == "English → German"
    assert driver.find_element(By.ID, "attention-translation").get_attribute("lang") == "de"


def test_every_layer_and_head_is_drawn_at_once_masked_cells_hatched(shown, driver, translator):
    cfg = translator.recipe.model
    assert shown["panels"] == {ENCODER_SELF: cfg.encoder_layers * cfg.heads,
                               DECODER_SELF: cfg.decoder_layers * cfg.heads,
                               CROSS: cfg.decoder_layers * cfg.heads}
    # a decoder self-attention panel: cell (0, 0) weighs 1 (the darkest blue), the cells of
    # later pieces are hatched grey, not the white of a zero weight
    colours = driver.execute_script("""
        const panel = document.querySelector('#grids .panel[data-role="decoder self-attention"]');
        const canvas = panel.querySelector('canvas');
        const cell = Number(document.getElementById('grids').dataset.cell);
        const T = JSON.parse(document.getElementById('grids').dataset.outPieces).length;
        const at = (q, k) => [...canvas.getContext('2d').getImageData(
            k * cell + cell / 2, q * cell + cell / 2, 1, 1).data].slice(0, 3);
        const masked = [];
        for (let k = 1; k < T; k++) masked.push(at(0, k));
        return {first: at(0, 0), masked, size: [canvas.width, canvas.height, cell, T]};""")
    width, height, cell, T = colours["size"]
    assert width == height == T * cell
    assert colours["first"] == [8, 48, 107]
    assert all(r == g == b and 100 < r < 230 for r, g, b in colours["masked"]), colours
    # clicking a panel enlarges it, its masked cells marked as such
    driver.find_element(By.CSS_SELECTOR, '#grids .panel[data-role="decoder self-attention"]'
                                         '[data-layer="0"][data-head="1"]').click()
    assert driver.find_element(By.ID, "detail-title").text == \
        "Decoder self-attention (causal), layer 1, head 2"
    masked = driver.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell.masked")
    assert len(masked) == T * (T - 1) // 2
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('mouseover', "
                          "{bubbles: true}))", masked[0])
    assert driver.find_element(By.ID, "cell").text.endswith(
        ": masked: a query does not see later pieces")


def test_the_word_alignment_is_outlined_on_the_map_it_is_read_from(shown, driver, translator):
    """The picked translation's links (as `translate decode --alignments` reads them) outline
    the cells of each linked word pair on the cross-attention layer they come from, any head;
    another layer's map has none."""
    alignment = alignment_json(translator.attention(TEXT, shown["picked"]))
    layer, links = alignment["layer"], {tuple(link) for link in alignment["links"]}
    expected = sorted([q, k] for q, j in enumerate(alignment["out_words"])
                      for k, i in enumerate(alignment["src_words"])
                      if i >= 0 and j >= 0 and (i, j) in links)
    assert expected  # the picked translation has links to show
    for head in (0, 1):
        driver.find_element(By.CSS_SELECTOR, f'#grids .panel[data-role="{CROSS}"]'
                                             f'[data-layer="{layer}"][data-head="{head}"]').click()
        drawn = driver.execute_script("""return [...document.querySelectorAll('#heatmap rect.link')]
            .map(c => [Number(c.dataset.q), Number(c.dataset.k)])""")
        assert sorted(drawn) == expected
        assert driver.find_element(By.ID, "alignment-note").text.startswith(
            "Outlined in red: the word alignment (layer")
    other = translator.recipe.model.decoder_layers - 1 if layer == 0 else 0
    driver.find_element(By.CSS_SELECTOR, f'#grids .panel[data-role="{CROSS}"]'
                                         f'[data-layer="{other}"][data-head="0"]').click()
    assert driver.find_elements(By.CSS_SELECTOR, "#heatmap rect.link") == []
    assert driver.find_element(By.ID, "alignment-note").text == ""


def test_a_candidate_is_picked_with_the_keyboard(shown, driver, translator):
    third = translator.translate(TEXT, beam=5, nbest=3)[2]
    button = driver.find_elements(By.CSS_SELECTOR, "#translations .candidate")[2]
    driver.execute_script("arguments[0].focus()", button)
    button.send_keys(Keys.ENTER)
    WebDriverWait(driver, 60).until(
        lambda d: json.loads(d.find_element(By.ID, "grids").get_attribute("data-out-pieces"))
        == pieces(translator, third))
    pressed = [b.get_attribute("aria-pressed") for b in
               driver.find_elements(By.CSS_SELECTOR, "#translations .candidate")]
    assert pressed == ["false", "false", "true"]


def test_the_downloads_are_a_png_and_the_weights_as_json(shown, driver, translator, tmp_path):
    png = page.download(driver, "download-png", tmp_path / "png")
    assert png.name == "attention.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = page.download(driver, "download-json", tmp_path / "json")
    body = json.loads(saved.read_text())
    target = driver.find_element(By.CSS_SELECTOR, '.candidate[aria-pressed="true"]'
                                 ).get_attribute("data-target")
    maps = translator.attention(TEXT, target)
    assert (body["source"], body["forced"], body["model"]["model"]) == (TEXT, True,
                                                                        "transformer")
    assert body["out_pieces"] == maps.out_pieces and body["src_pieces"] == maps.src_pieces
    assert [m["name"] for m in body["modules"]] == list(maps.weights)
    for module in body["modules"]:
        weights = torch.tensor(module["weights"])  # (H, T_query, T_key) numbers
        assert list(weights.shape) == module["shape"]
        torch.testing.assert_close(weights, maps.weights[module["name"]], atol=2e-5, rtol=0)
        assert (module["masked"] is not None) == (module["role"] == DECODER_SELF)


def step_down(driver) -> str:
    """Focus the enlarged panel, press the down arrow: what the page then says about the cell."""
    from selenium.webdriver.common.action_chains import ActionChains

    driver.execute_script("document.querySelector('#heatmap svg').focus()")
    ActionChains(driver).send_keys(Keys.ARROW_DOWN).perform()
    return driver.find_element(By.ID, "cell").text


def test_an_error_from_the_server_is_shown_on_the_page(url, driver):
    driver.get(url)
    beam = driver.find_element(By.ID, "beam")
    beam.clear()
    beam.send_keys("99")
    source = driver.find_element(By.ID, "source")
    source.send_keys("A dog runs.")
    source.send_keys(Keys.CONTROL, Keys.ENTER)  # the shortcut for Translate
    error = driver.find_element(By.ID, "error")
    WebDriverWait(driver, 60).until(lambda d: error.is_displayed())
    assert error.text == "Error: beam must be an integer from 1 to 16, got 99 (HTTP 400)"
    assert error.get_attribute("role") == "alert"


def test_a_german_to_english_run_is_labelled_so(trained_run, driver, tmp_path):
    """The same weights under a recipe that says de -> en: the page follows the run."""
    data = read_checkpoint(trained_run.best_checkpoint)
    data["recipe"]["data"].update(src_lang="de", tgt_lang="en")
    write_checkpoint(tmp_path / "de_en.pt", data)
    with running(tmp_path / "de_en.pt", "--device", "cpu", "--precision", "fp32") as url:
        driver.get(url)
        WebDriverWait(driver, 60).until(
            lambda d: "steps" in d.find_element(By.ID, "model").text)
        assert driver.find_element(By.ID, "direction").text == "German → English"
        assert driver.find_element(By.ID, "source-label").text == "German, one sentence a line"
        assert driver.find_element(By.ID, "output-heading").get_attribute(
            "textContent") == "English"
        facts = driver.find_element(By.ID, "model").text
        assert "Languages German → English" in facts.replace("\n", " "), facts
        assert driver.title == "translate: German → English, with attention"
