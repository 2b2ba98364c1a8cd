"""The status page's tenants table in a real headless Chromium against a real API and
Valkey: each tenant's usage over the last hour and its throttling render from the status
document, and are screenshotted to tests/artifacts/status-page-tenants.png."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from api_helpers import ROOT, running_api
from test_status_page import ARTIFACTS, chromium, chromium_browser
from test_status_tenants import record

from director.api import PolicyDocument
from state import AsyncStateStore, EmbeddedValkey

TENANTS = ROOT / "policies" / "examples" / "tenants" / "tenants.dp"


async def test_the_page_shows_each_tenants_usage_and_throttling(tmp_path: Path,
                                                               valkey: EmbeddedValkey,
                                                               prefix: str) -> None:
    browser_path = chromium()
    playwright_api = pytest.importorskip("playwright.async_api")
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    await record(store, time.time())
    document = PolicyDocument.from_file(str(TENANTS))[0]
    async with running_api(tmp_path, valkey.url, prefix, document=document) as api, \
            playwright_api.async_playwright() as playwright, \
            chromium_browser(playwright, browser_path) as browser:
        page = await browser.new_page(viewport={"width": 1440, "height": 1100})
        problems: list[str] = []
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on("console", lambda msg: problems.append(msg.text)
                if msg.type == "error" else None)
        await page.goto(f"{api.url}/#token={api.reader}")
        rows = page.locator("#tenants tbody tr")
        await rows.nth(3).wait_for(timeout=10_000)
        assert await page.locator("#tenants-section").is_visible()
        names = [await rows.nth(i).get_attribute("data-tenant") for i in range(4)]
        assert names == ["acme", "batch-jobs", "free_tier", "initech"]

        acme = page.locator('#tenants tr[data-tenant="acme"]')
        cells = {name: await acme.locator(f"td.{name}").inner_text() for name in
                 ("tier", "quota", "requests", "input", "output", "cancelled",
                  "gpu-seconds")}
        assert cells == {"tier": "1 · 2", "quota": "600 req/min · 200k in/min · "
                         "100k out/min · 16 at once", "requests": "2", "input": "150",
                         "output": "30", "cancelled": "1", "gpu-seconds": "0.5"}
        throttled = await acme.locator("td.throttled").inner_text()
        assert throttled.replace("\n", " ").split() == \
            ["4", "output_tokens", "1,", "requests", "3", "·", "503", "1"]
        batch = page.locator('#tenants tr[data-tenant="batch-jobs"]')
        assert await batch.locator("td.throttled").inner_text() == "0"
        assert await batch.locator("td.quota").inner_text() == \
            "600 req/min · 64 at once"  # 10/s
        initech = page.locator('#tenants tr[data-tenant="initech"]')
        assert await initech.locator("td.quota").inner_text() == "not declared"
        assert await page.locator("#tenants-error").is_hidden()

        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "status-page-tenants.png"),
                              full_page=True)
        assert problems == []
    await store.close()


async def test_the_page_says_when_usage_cannot_be_read(tmp_path: Path) -> None:
    browser_path = chromium()
    playwright_api = pytest.importorskip("playwright.async_api")
    document = PolicyDocument.from_file(str(TENANTS))[0]
    with EmbeddedValkey() as own:
        async with running_api(tmp_path, own.url, "down", document=document) as api, \
                playwright_api.async_playwright() as playwright:
            own.stop()
            async with chromium_browser(playwright, browser_path) as browser:
                page = await browser.new_page()
                await page.goto(f"{api.url}/#token={api.reader}")
                error = page.locator("#tenants-error")
                await error.wait_for(state="visible", timeout=15_000)
                assert (await error.inner_text()).startswith("usage unavailable:")
                assert await page.locator("#tenants tbody tr").count() == 3
