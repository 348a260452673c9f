"""How an error answer reads in a ProxyHTTPError: short, one line, never a page."""

from __future__ import annotations

import httpx

from strabo.proxy.errors import http_error


def test_an_html_error_page_is_summed_up_not_dumped() -> None:
    page = "<!DOCTYPE html>\n<html><body>" + "<p>Not here</p>\n" * 500 + "</body></html>"
    error = http_error(httpx.Response(404, text=page))
    assert error.message == "404 Not Found (an HTML page: is this the service's base URL?)"


def test_plain_text_is_one_line_and_bounded() -> None:
    error = http_error(httpx.Response(503, text="the shop\n  is closed\n" + "x" * 1000))
    assert error.message.startswith("503 the shop is closed x")
    assert "\n" not in error.message and len(error.detail) == 200
