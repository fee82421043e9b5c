"""Headless Chromium for end-to-end tests of pages dmlkit serves or writes (search page, HTML reports).

The browser is Debian's ``chromium`` (``/usr/bin/chromium``, installed for CI by
``scripts/install_system_packages.sh``, which ``.ci/run`` calls before ``make test``), driven from
Python by the PyPI package ``playwright`` (in the ``test`` extra). Playwright's own browser download
(``playwright install``) is never used: the pip wheel ships its node driver, and we point it at the
system browser with ``executable_path``.

Use it by importing the fixture into a test module (pytest then sees it there)::

    from browser import browser_page  # noqa: F401  (pytest fixture)

    def test_report_renders(browser_page, tmp_path):
        report = tmp_path / "report.html"
        write_my_report(report)
        page = browser_page.page                      # a playwright.sync_api.Page
        page.goto(report.as_uri())                    # file:// or http://127.0.0.1:PORT/ only
        assert page.locator("h1").inner_text() == "Results"
        page.screenshot(path=str(tmp_path / "shot.png"))
        browser_page.assert_no_console_errors()       # console.error, uncaught exceptions, failed loads

``browser_page`` (function scope) gives a ``BrowserPage``: ``.page`` is a fresh tab in a browser
launched once per test session with a fresh, temporary user-data-dir and the flags in
``CHROMIUM_ARGS`` (headless, no sandbox, no GPU, no QUIC, no first-run, no background networking,
component updates or sync, so the browser's own background traffic stays off; pages should only load
file:// or loopback URLs). Console messages of type
``error``, uncaught page exceptions and failed requests (except loads aborted by a navigation) are
collected in ``.console_errors``;
``assert_no_console_errors()`` fails the test listing them. The default timeout of page operations
is ``TIMEOUT_MS``.

When chromium or playwright is missing the tests using the fixture are *skipped* with the reason,
unless the environment variable ``CI`` is set (as in ``.ci/run``): then they *fail*, so CI can never
silently skip the browser tests. Override the browser binary with ``DMLKIT_CHROMIUM=/path``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
TIMEOUT_MS = 20_000


def chromium_executable() -> Path | None:
    """The system Chromium: ``$DMLKIT_CHROMIUM``, else ``/usr/bin/chromium``, else ``chromium`` on PATH."""
    candidates = [os.environ.get("DMLKIT_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def unavailable(reason: str) -> None:
    """Skip the test (locally) or fail it (when ``CI`` is set): the browser tests must run in CI."""
    if os.environ.get("CI"):
        pytest.fail(f"browser test cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class BrowserPage:
    """A fresh tab and the errors it reported; see the module docstring."""

    page: Any  # playwright.sync_api.Page
    console_errors: list[str] = field(default_factory=list)

    def assert_no_console_errors(self) -> None:
        if self.console_errors:
            listing = "\n  ".join(self.console_errors)
            raise AssertionError(f"the page reported {len(self.console_errors)} error(s):\n  {listing}")


_CONTEXT: dict[str, Any] = {}


def shared_context(config: pytest.Config) -> Any:
    """A playwright ``BrowserContext`` of headless system Chromium with a fresh user-data-dir.

    Started on first use, shared by all tests of the session (starting Chromium takes about a
    second), closed when the session ends. Skips or fails (see ``unavailable``) when it cannot start.
    """
    if "context" in _CONTEXT:
        return _CONTEXT["context"]
    executable = chromium_executable()
    if executable is None:
        unavailable("chromium not found at /usr/bin/chromium; run scripts/install_system_packages.sh (as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the python package 'playwright' is not installed; pip install -e '.[test]'")
    profile = tempfile.mkdtemp(prefix="dmlkit-chromium-")
    pw = sync_playwright().start()
    try:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=str(executable),
            headless=True,
            args=CHROMIUM_ARGS,
            chromium_sandbox=False,
        )
    except Exception as err:
        pw.stop()
        shutil.rmtree(profile, ignore_errors=True)
        unavailable(f"chromium at {executable} did not start: {err}")
    context.set_default_timeout(TIMEOUT_MS)

    def close() -> None:
        _CONTEXT.clear()
        try:
            context.close()
        finally:
            pw.stop()
            shutil.rmtree(profile, ignore_errors=True)

    config.add_cleanup(close)
    _CONTEXT["context"] = context
    return context


@pytest.fixture
def browser_page(request: pytest.FixtureRequest) -> Iterator[BrowserPage]:
    """A new tab that records console errors, page exceptions and failed requests; closed after the test."""
    page = shared_context(request.config).new_page()
    result = BrowserPage(page)

    def on_console(message: Any) -> None:
        if message.type == "error":
            result.console_errors.append(f"console.error: {message.text} ({message.location.get('url', '')})")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: result.console_errors.append(f"uncaught exception: {exc}"))

    def on_failed(request: Any) -> None:
        if "ERR_ABORTED" not in str(request.failure):  # loads cancelled by a navigation are not errors
            result.console_errors.append(f"request failed: {request.url} ({request.failure})")

    page.on("requestfailed", on_failed)
    try:
        yield result
    finally:
        page.close()
