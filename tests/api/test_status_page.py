"""The status page in a real headless Chromium against a real API and Valkey: the regions
table renders live values, follows a drain made through the API, and is screenshotted to
tests/artifacts/status-page.png."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import running_api

from state import RegionLoad, StateStore

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    return path


@contextlib.asynccontextmanager
async def chromium_browser(playwright: Any, path: str) -> AsyncIterator[Any]:
    """Chromium at ``path`` (``chromium()``) under ``playwright``, launched as root needs
    it, closed however the block ends."""
    browser = await playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
    try:
        yield browser
    finally:
        await browser.close()


async def test_status_page_shows_live_regions_and_follows_a_drain(tmp_path, valkey, prefix):
    browser_path = chromium()
    playwright_api = pytest.importorskip("playwright.async_api")
    store = StateStore.from_url(valkey.url, prefix=prefix)
    now = time.time()
    loads = {"us-east": 0.42, "eu-west": 0.91, "eu-central": 0.35, "ap-south": 0.12}
    for name, utilization in loads.items():
        store.write_region_load(name, RegionLoad(2, 4, 3.0, 24, utilization, now))
        store.record_probe(name, None, ok=True, rise=1, fall=1)
    store.record_probe("eu-west", "euw1-a100-a", ok=False, rise=1, fall=1)

    async with running_api(tmp_path, valkey.url, prefix) as api, \
            playwright_api.async_playwright() as playwright, \
            chromium_browser(playwright, browser_path) as browser:
        page = await browser.new_page(viewport={"width": 1440, "height": 1000})
        problems: list[str] = []
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on("console", lambda msg: problems.append(msg.text)
                if msg.type == "error" else None)
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))

        await page.goto(f"{api.url}/#token={api.reader}")
        rows = page.locator("#regions tbody tr")
        await rows.nth(3).wait_for(timeout=10_000)
        assert await rows.count() == 4
        assert "#token" not in page.url  # taken out of the address bar
        assert await page.evaluate("sessionStorage.getItem('director.token')") == api.reader

        us = page.locator('tr[data-region="us-east"]')
        await page.wait_for_function(
            """() => document.querySelector('tr[data-region="us-east"] td.load')
                     ?.textContent.includes('42%')""", timeout=10_000)
        assert await us.locator("td.health").inner_text() == "healthy"
        assert await page.locator('tr[data-region="eu-west"] td.health').inner_text() \
            == "degraded"
        assert await page.locator('tr[data-region="eu-west"] td.load').inner_text() \
            == "91%"
        assert await page.locator('tr[data-region="eu-central"] td.drain').inner_text() \
            == "serving"
        paris = page.locator('#samples tr[data-label="Paris, FR"] td[data-service="chat"]')
        assert await paris.inner_text() == "eu-central"
        assert await page.locator("#map circle.region").count() == 4
        assert await page.locator("#tenants-section").is_hidden()  # none declared

        # A drain through the API shows on the page within a few seconds.
        status, _ = await api.post("/api/v1/regions/eu-central/drain")
        assert status == 200
        await page.locator('tr[data-region="eu-central"] td.drain .pill.draining') \
            .wait_for(timeout=5_000)
        await page.wait_for_function(
            """() => document.querySelector(
                '#samples tr[data-label="Paris, FR"] td[data-service="chat"]')
                ?.textContent.startsWith('eu-west')""", timeout=5_000)
        await page.wait_for_timeout(300)  # let the map settle for the picture

        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "status-page.png"), full_page=True)
        assert (ARTIFACTS / "status-page.png").stat().st_size > 10_000

        assert problems == []
        assert all(url.startswith(api.url) for url in requests), requests  # offline

        # A refused token brings the login form back.
        await page.goto(f"{api.url}/#token=wrong")
        await page.locator("#login").wait_for(state="visible", timeout=5_000)
        assert "unknown token" in await page.locator("#login-error").inner_text()
    store.close()


async def test_api_docs_render_offline_from_local_assets(tmp_path, valkey, prefix):
    """/docs (Swagger UI) loads nothing but from the API itself and lists the routes."""
    browser_path = chromium()
    playwright_api = pytest.importorskip("playwright.async_api")
    async with running_api(tmp_path, valkey.url, prefix) as api, \
            playwright_api.async_playwright() as playwright, \
            chromium_browser(playwright, browser_path) as browser:
        page = await browser.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        failed: list[str] = []
        page.on("requestfailed", lambda request: failed.append(request.url))

        await page.goto(f"{api.url}/docs")
        operation = page.locator("#operations-default-get_policy_api_v1_policy_get, "
                                 ".opblock-summary-path[data-path='/api/v1/policy']")
        await operation.first.wait_for(timeout=10_000)
        assert await page.locator(".opblock").count() >= 10
        assert await page.locator("button.authorize").count() == 1  # bearer tokens

        assert problems == [] and failed == []
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
            assert any(url.endswith(f"/docs/assets/{asset}") for url in requests)
        outside = [url for url in requests if not url.startswith((api.url, "data:", "blob:"))]
        assert outside == []  # offline


def documented_screenshot_command() -> str:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    (line,) = [line for line in readme.splitlines() if line.startswith("chromium --headless")]
    return line


async def test_the_readmes_screenshot_recipe_works_as_this_user(tmp_path, valkey, prefix):
    """The documented command, run as is (root included: it carries --no-sandbox) against a
    running API, writes a screenshot of the rendered page."""
    import asyncio
    import os
    import shlex

    chromium()
    command = documented_screenshot_command()
    if os.geteuid() == 0:
        assert "--no-sandbox" in command
    store = StateStore.from_url(valkey.url, prefix=prefix)
    for name in ("us-east", "eu-west", "eu-central", "ap-south"):
        store.record_probe(name, None, ok=True, rise=1, fall=1)
    store.close()
    async with running_api(tmp_path, valkey.url, prefix) as api:
        argv = shlex.split(command.replace('"http://127.0.0.1:8080/#token=$(cat '
                                           '/tmp/director-$UID/read.token)"',
                                           f"{api.url}/#token={api.reader}"))
        argv = [a for a in argv if not a.startswith("--screenshot=")]
        argv.append(f"--screenshot={tmp_path / 'status.png'}")
        argv.append(f"--user-data-dir={tmp_path / 'chromium'}")
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        output, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, output.decode(errors="replace")[-2000:]
    png = (tmp_path / "status.png").read_bytes()
    (ARTIFACTS / "status-page-recipe.png").parent.mkdir(exist_ok=True)
    (ARTIFACTS / "status-page-recipe.png").write_bytes(png)
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
