"""A screenshot of `translate serve`'s page, driven as a person would in headless Chromium.

    python scripts/serve_screenshot.py RUN -o docs/figures/serve_page.png \
        --text "Two men are sitting on a bench." --nbest 3

Starts `translate serve RUN` on a free port, opens the page, types the sentence, presses
Translate, waits for the German and the attention heatmap, points at a cell and saves the page.
Needs Debian's chromium and chromium-driver (`apt-get install chromium chromium-driver`) and
selenium (the `test` extra). tests/serve/test_browser.py drives the page with `drive` too.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ROOT = Path(__file__).resolve().parent.parent


def missing() -> str | None:
    """What headless Chromium through selenium lacks here, or None."""
    lacking = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        lacking.append("selenium (pip install selenium)")
    return ", ".join(lacking) or None


def browser(width: int = 1100, height: int = 900):
    """Headless Chromium under chromedriver (root needs --no-sandbox)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={width},{height}", "--force-device-scale-factor=1"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def drive(driver, url: str, text: str, nbest: int = 1, role: str | None = None,
          timeout: float = 120) -> dict:
    """Translate `text` on the page at `url` (`nbest` translations), show the attention `role`
    (when the model has it) and point at the brightest cell of a middle row; returns what the
    page then shows."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(driver, timeout)
    driver.get(url)
    wait.until(lambda d: "step" in d.find_element(By.ID, "model").text)
    driver.find_element(By.ID, "source").send_keys(text)
    driver.find_element(By.ID, "nbest").clear()
    driver.find_element(By.ID, "nbest").send_keys(str(nbest))
    driver.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#translations .best")
               or d.find_element(By.ID, "error").is_displayed())
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")
               or d.find_element(By.ID, "error").is_displayed())
    roles = Select(driver.find_element(By.ID, "role"))
    if role in [o.get_attribute("value") for o in roles.options]:
        roles.select_by_value(role)
        driver.execute_script("document.activeElement.blur()")
    cells = driver.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")
    if cells:
        rows = max(int(c.get_attribute("data-q")) for c in cells) + 1
        row = [c for c in cells if int(c.get_attribute("data-q")) == rows // 2]
        target = max(row, key=lambda c: float(c.get_attribute("data-w")))
        ActionChains(driver).move_to_element(target).perform()
        wait.until(lambda d: "weight" in d.find_element(By.ID, "cell").text)
    best = driver.execute_script(  # the best translation's text, without its score
        "const p = document.querySelector('#translations .best');"
        "return p ? p.firstChild.textContent : '';")
    return {"translation": best, "cells": len(cells),
            "cell": driver.find_element(By.ID, "cell").text,
            "error": driver.find_element(By.ID, "error").text,
            "roles": [o.text for o in driver.find_elements(By.CSS_SELECTOR, "#role option")]}


def save_page(driver, output: Path, width: int = 1100) -> Path:
    """The whole page as a PNG: the viewport is made as tall as the page first."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    driver.execute_script("window.scrollTo(0, 0)")
    output.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(output))
    return output


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run folder or a .pt checkpoint")
    ap.add_argument("-o", "--output", default=str(ROOT / "docs/figures/serve_page.png"))
    ap.add_argument("--text", default="Two men are sitting on a bench.")
    ap.add_argument("--nbest", type=int, default=3, help="translations shown (beam 5)")
    ap.add_argument("--role", default="cross-attention", help="the attention shown")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if reason := missing():
        sys.exit(f"Error: cannot drive a browser, missing: {reason}")
    sys.path.insert(0, str(ROOT))
    from translate.serve.server import running

    with running(args.run, "--device", args.device) as url:
        driver = browser()
        try:
            shown = drive(driver, url, args.text, args.nbest, args.role)
            if shown["error"]:
                sys.exit(f"Error: the page says {shown['error']}")
            print(f"translation: {shown['translation']}\n{shown['cell']}")
            print(f"wrote {save_page(driver, Path(args.output))}")
        finally:
            driver.quit()


if __name__ == "__main__":
    main()
