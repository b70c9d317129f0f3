"""Screenshots of `translate serve`'s page, driven as a person would in headless Chromium.

    python scripts/serve_screenshot.py RUN -o docs/figures/serve_page.png \
        --text "Two men are sitting on a bench." --nbest 3 --pick 2

Starts `translate serve RUN` on a free port, opens the page, types the sentence, presses
Translate, picks the `--pick`th translation, waits for its attention (every layer x head),
points at a cell of the enlarged panel, saves the page, and saves the figure the page's PNG
download gives beside it (serve_page_figure.png).
Needs Debian's chromium and chromium-driver (`apt-get install chromium chromium-driver`) and
selenium (the `test` extra). tests/serve/test_browser.py drives the page with `drive` too.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
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


def drive(driver, url: str, text: str, nbest: int = 3, pick: int = 1,
          timeout: float = 120) -> dict:
    """Translate `text` on the page at `url` (`nbest` translations), pick translation number
    `pick` (1: the best, which the page draws first), wait for its attention to be drawn and
    point at the brightest cell of a middle row of the enlarged panel; returns what the page
    then shows."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout)
    driver.get(url)
    wait.until(lambda d: "steps" in d.find_element(By.ID, "model").text)
    driver.find_element(By.ID, "source").send_keys(text)
    driver.find_element(By.ID, "nbest").clear()
    driver.find_element(By.ID, "nbest").send_keys(str(nbest))
    driver.find_element(By.ID, "translate").click()

    def drawn(d) -> bool:  # the picked translation's attention, or an error
        return d.find_element(By.ID, "error").is_displayed() or (
            d.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")
            and d.find_element(By.ID, "attention").get_attribute("aria-busy") is None
            and d.find_elements(By.CSS_SELECTOR, '.candidate[aria-pressed="true"]'))

    wait.until(drawn)
    candidates = driver.find_elements(By.CSS_SELECTOR, "#translations .candidate")
    if 1 < pick <= len(candidates):
        candidates[pick - 1].click()  # the click sets aria-busy until the answer is drawn
        wait.until(drawn)
    cells = driver.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell:not(.masked)")
    if cells:
        rows = max(int(c.get_attribute("data-q")) for c in cells) + 1
        row = [c for c in cells if int(c.get_attribute("data-q")) == rows // 2]
        target = max(row, key=lambda c: float(c.get_attribute("data-w")))
        ActionChains(driver).move_to_element(target).perform()
        wait.until(lambda d: "weight" in d.find_element(By.ID, "cell").text)
    return driver.execute_script("""
        const picked = document.querySelector('.candidate[aria-pressed="true"]');
        const grids = document.getElementById("grids").dataset;
        const panels = {};
        document.querySelectorAll("#grids .panel").forEach((p) => {
          panels[p.dataset.role] = (panels[p.dataset.role] || 0) + 1; });
        const best = document.querySelector("#translations .best");
        return {translation: best ? best.firstChild.textContent : "",
                candidates: [...document.querySelectorAll("#translations .candidate")]
                  .map((c) => c.dataset.target),
                picked: picked ? picked.dataset.target : null,
                out_pieces: JSON.parse(grids.outPieces || "[]"), panels,
                cells: document.querySelectorAll("#heatmap rect.cell").length,
                detail: document.getElementById("detail-title").textContent,
                cell: document.getElementById("cell").textContent,
                error: document.getElementById("error").textContent};""")


def download(driver, button: str, folder: Path, timeout: float = 60) -> Path:
    """Press the page's download `button` and wait for the file it saves into `folder`."""
    import time

    from selenium.webdriver.common.by import By

    folder.mkdir(parents=True, exist_ok=True)
    before = set(folder.iterdir())
    driver.execute_cdp_cmd("Page.setDownloadBehavior",
                           {"behavior": "allow", "downloadPath": str(folder.resolve())})
    driver.find_element(By.ID, button).click()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [p for p in set(folder.iterdir()) - before if not p.name.endswith(".crdownload")]
        if done and done[0].stat().st_size > 0:
            return done[0]
        time.sleep(0.1)
    raise TimeoutError(f"no download in {folder} within {timeout:g} s")


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
    ap.add_argument("-o", "--output", default=str(ROOT / "docs/figures/serve_page.png"),
                    help="the whole page; the figure's PNG download goes beside it, as "
                         "NAME_figure.png")
    ap.add_argument("--text", default="Two men are sitting on a bench.")
    ap.add_argument("--nbest", type=int, default=3, help="translations shown (beam 5)")
    ap.add_argument("--pick", type=int, default=2, help="the translation whose attention is "
                                                        "drawn (1: the best)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if reason := missing():
        sys.exit(f"Error: cannot drive a browser, missing: {reason}")
    sys.path.insert(0, str(ROOT))
    from translate.serve.process import running

    output = Path(args.output)
    with running(args.run, "--device", args.device) as url:
        driver = browser()
        try:
            shown = drive(driver, url, args.text, args.nbest, args.pick)
            if shown["error"]:
                sys.exit(f"Error: the page says {shown['error']}")
            print(f"translations: {shown['candidates']}\npicked: {shown['picked']}\n"
                  f"{shown['detail']}: {shown['cell']}")
            print(f"wrote {save_page(driver, output)}")
            with tempfile.TemporaryDirectory() as folder:
                figure = output.with_name(f"{output.stem}_figure.png")
                shutil.move(download(driver, "download-png", Path(folder)), figure)
            print(f"wrote {figure}")
        finally:
            driver.quit()


if __name__ == "__main__":
    main()
