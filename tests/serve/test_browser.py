"""The page in headless Chromium against a real `translate serve`: type, translate, read the
German, see the attention heatmap drawn and read a weight by pointing at a cell.

Skips, saying what is missing, without /usr/bin/chromium, /usr/bin/chromedriver or selenium
(Debian: apt-get install chromium chromium-driver; selenium is in the test extra).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="translate serve needs the serve extra")

_spec = importlib.util.spec_from_file_location(
    "serve_screenshot", Path(__file__).resolve().parents[2] / "scripts" / "serve_screenshot.py")
page = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(page)

if reason := page.missing():
    pytest.skip(f"no browser test: missing {reason}", allow_module_level=True)

from translate.serve import load_translator  # noqa: E402
from translate.serve.server import running  # noqa: E402

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


def test_the_page_translates_and_draws_the_attention(url, driver, trained_run, tmp_path):
    shown = page.drive(driver, url, TEXT, nbest=2, role="cross-attention")
    screenshot = page.save_page(driver, tmp_path / "serve_page.png")
    print(f"screenshot: {screenshot}")

    translator = load_translator(trained_run.run_dir, "cpu", "fp32")
    assert shown["error"] == ""
    assert shown["translation"] == translator.translate(TEXT, beam=5, nbest=2)[0]
    from selenium.webdriver.common.by import By

    # the languages come from the run (/health), not from the page
    assert driver.find_element(By.ID, "direction").text == "English → German"
    assert driver.find_element(By.ID, "attention-translation").get_attribute("lang") == "de"
    maps = translator.attention(TEXT)  # the heatmap: predicted pieces by source pieces
    assert shown["cells"] == len(maps.out_pieces) * len(maps.src_pieces)
    row = len(maps.out_pieces) // 2  # the row `drive` pointed at
    assert re.fullmatch(rf"query “{re.escape(maps.out_pieces[row])}” → key “.+”: weight "
                        r"[01]\.\d{3}", shown["cell"])
    assert step_down(driver).startswith(f"query “{maps.out_pieces[row + 1]}” → key ")
    assert shown["roles"] == ["Encoder self-attention", "Decoder self-attention (causal)",
                              "Cross-attention (target → source)"]
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def step_down(driver) -> str:
    """Focus the heatmap, press the down arrow: what the page then says about the cell."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.execute_script("document.querySelector('#heatmap svg').focus()")
    ActionChains(driver).send_keys(Keys.ARROW_DOWN).perform()
    return driver.find_element(By.ID, "cell").text


def test_an_error_from_the_server_is_shown_on_the_page(url, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

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
