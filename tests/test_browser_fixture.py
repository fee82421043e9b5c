"""The headless-Chromium fixture of tests/browser.py: it renders a page and reports its console errors."""

import pytest

from browser import browser_page, unavailable  # noqa: F401  (pytest fixture)


def test_page_renders_and_console_errors_are_collected(browser_page, tmp_path):
    good = tmp_path / "good.html"
    good.write_text("<!doctype html><title>t</title><h1 id='x'>hello</h1><script>document.title = 'ok'</script>")
    page = browser_page.page
    page.goto(good.as_uri())
    assert page.locator("#x").inner_text() == "hello"
    assert page.title() == "ok"
    browser_page.assert_no_console_errors()

    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><title>t</title><script>console.error('boom'); undefinedFunction();</script>")
    page.goto(bad.as_uri())
    page.wait_for_timeout(100)
    joined = "\n".join(browser_page.console_errors)
    assert "boom" in joined and "undefinedFunction" in joined
    try:
        browser_page.assert_no_console_errors()
    except AssertionError as err:
        assert "2 error(s)" in str(err)
    else:
        raise AssertionError("assert_no_console_errors accepted a page with errors")


def test_missing_browser_skips_locally_but_fails_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no chromium"):
        unavailable("no chromium")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot run in CI: no chromium"):
        unavailable("no chromium")
