"""The Dagster UI in a real browser: Debian's Chromium driven by Selenium and chromium-driver.

Opens the drain's asset page, dismisses first-visit dialogs, launches "Materialize…" for all
levels, waits for the run to succeed, switches the asset's metadata view to plots and checks
that the per-level series are drawn by partition. Screenshots go to the test's tmp_path. The
browser never reaches the internet: Selenium uses /usr/bin/chromedriver (no Selenium Manager
download) and Chromium runs headless with background networking, sync and updates off.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from drainer.kafka.producer import synthetic_records
from tests.support.stack import produce_records

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
LEVEL_KEYS = ("reserved", "burst", "allocated", "planned", "drained", "fill_ratio")


@pytest.fixture
def browser(tmp_path):
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail(
            "Chromium is missing: `make test` installs it (apt-get install chromium chromium-driver)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1600,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def _buttons(driver, label: str) -> list:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    found = []
    for button in driver.find_elements(By.CSS_SELECTOR, "button"):
        try:
            if button.is_displayed() and button.text.strip().startswith(label):
                found.append(button)
        except StaleElementReferenceException:
            continue
    return found


def click(driver, label: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for button in _buttons(driver, label):
            try:
                button.click()
                return
            except Exception:  # re-rendered or covered for a moment: look again
                pass
        time.sleep(0.5)
    raise AssertionError(f"no button {label!r} to click")


def dismiss_first_visit_dialogs(driver) -> None:
    """The community/newsletter prompt (and any like it) of a fresh browser profile."""
    for label in ("Skip", "Dismiss", "Got it"):
        for button in _buttons(driver, label):
            button.click()
            time.sleep(0.5)


def body_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def wait_text(driver, text: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in body_text(driver):
            return
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never appeared")


def test_materialize_all_levels_from_the_ui_and_plot_each_level(
    dagster_stack, dagster_drains, browser, tmp_path: Path
):
    from selenium.webdriver.common.by import By

    ui, drain = dagster_stack, dagster_drains.browser
    for level in range(drain.levels):
        produce_records(drain, synthetic_records(100 * (level + 1), seed=level), level=level)
    shots = tmp_path / "screenshots"
    shots.mkdir()

    browser.get(f"{ui.url}/assets/{drain.name}")
    wait_text(browser, "Materialize")
    time.sleep(2)  # first-visit dialogs open a moment after the page
    dismiss_first_visit_dialogs(browser)
    browser.save_screenshot(str(shots / "1_asset_page.png"))

    click(browser, "Materialize")
    wait_text(browser, "Partition selection")
    click(browser, "All")
    wait_text(browser, f"{drain.levels} partitions")
    browser.save_screenshot(str(shots / "2_materialize_all_levels.png"))
    click(browser, "Launch backfill")

    # the daemon turns the backfill into one run; wait for it as the UI's Runs page would
    deadline = time.monotonic() + 600
    runs = []
    while time.monotonic() < deadline:
        runs = [
            r
            for r in ui.runs({})
            if r["tags"].get("dagster/backfill")
            and any(m["runId"] == r["runId"] for m in ui.materializations(drain.name))
        ]
        if runs and all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in runs):
            break
        time.sleep(1)
    assert [r["status"] for r in runs] == ["SUCCESS"], runs
    browser.get(f"{ui.url}/runs/{runs[0]['runId']}")
    wait_text(browser, "Success")
    browser.save_screenshot(str(shots / "3_run_succeeded.png"))

    browser.get(f"{ui.url}/assets/{drain.name}")
    wait_text(browser, "Metadata")
    dismiss_first_visit_dialogs(browser)
    click(browser, "Plots")
    wait_text(browser, "fill_ratio")
    time.sleep(2)  # let the charts draw
    browser.save_screenshot(str(shots / "4_metadata_plots.png"))
    text = body_text(browser)
    # plotted by partition: one chart per per-level key, each with a point per level
    assert "Partitions" in text and "Plots" in text
    for key in LEVEL_KEYS:
        assert f"\n{key}\n" in f"\n{text}\n", key
    assert len(browser.find_elements(By.CSS_SELECTOR, "canvas")) >= len(LEVEL_KEYS)
    # and the series differ by level: each partition's point is its own level's number
    latest = {}
    for m in ui.materializations(drain.name):
        latest.setdefault(m["partition"], m["metadata"])
    assert {p: latest[p]["drained"] for p in ("0", "1", "2")} == {"0": 100, "1": 200, "2": 300}
