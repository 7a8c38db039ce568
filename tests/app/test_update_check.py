"""The opt-in update check against a real HTTP server on 127.0.0.1 (stopped after each test) and
with no server at all: it never blocks the window, says so when a newer release exists, and is
quiet without a network or with a broken feed."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from app import updates
from app.gui.settings import AppSettings
from app.gui.update_notice import UpdateNotice, start_update_check


@dataclass
class Feed:
    url: str
    body: bytes = b""
    gate: threading.Event = field(default_factory=threading.Event)
    requests: int = 0


@pytest.fixture
def feed() -> Iterator[Feed]:
    """``latest.json`` served on 127.0.0.1; each answer waits for ``feed.gate`` (set by default)."""
    state = Feed("")
    state.gate.set()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests += 1
            state.gate.wait(timeout=30)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/releases/latest/download/latest.json"
    try:
        yield state
    finally:
        state.gate.set()
        server.shutdown()
        server.server_close()


def _latest(version: str) -> bytes:
    return json.dumps(
        {"version": version, "tag": f"v{version}", "url": f"https://example.org/v{version}"}
    ).encode()


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/latest.json"


def test_release_order() -> None:
    key = updates.version_key
    assert key("0.10.0") > key("0.9.1") > key("0.9.1rc2") > key("0.9.1rc1") > key("0.9.0")
    assert key("v1.2") == key("1.2.0") == key("1.2.0+cu130")
    with pytest.raises(ValueError):
        key("latest")


def test_check_finds_a_newer_release(feed: Feed) -> None:
    feed.body = _latest("0.2.0")
    result = updates.check(feed.url, "0.1.0")
    assert result.error is None and result.newer == updates.Release("0.2.0", "https://example.org/v0.2.0")
    assert updates.check(feed.url, "0.2.0").newer is None  # up to date
    assert updates.check(feed.url, "0.3.0rc1").newer is None  # a pre-release newer than the feed


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html>captive portal</html>", "not readable"),
        (json.dumps({"version": "0.2.0"}).encode(), "not readable"),
        (json.dumps({"version": "0.2.0", "url": "javascript:alert(1)"}).encode(), "names no web page"),
        (b"{" + b" " * (updates.MAX_BYTES + 10) + b"}", "larger than"),
    ],
)
def test_a_broken_feed_is_a_quiet_could_not_check(feed: Feed, body: bytes, why: str) -> None:
    feed.body = body
    result = updates.check(feed.url, "0.1.0")
    assert result.newer is None and result.error is not None and why in result.error


def test_no_network_is_a_quiet_could_not_check() -> None:
    result = updates.check(_closed_port_url(), "0.1.0", timeout=2.0)
    assert result.newer is None and result.error is not None and "could not reach" in result.error


def test_off_by_default_and_without_a_feed_no_request_is_made(
    feed: Feed, make_window, store, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert AppSettings.load(store).check_updates is False
    window = make_window()
    monkeypatch.setenv(updates.FEED_ENV, feed.url)
    assert start_update_check(window, AppSettings.load(store).check_updates) is None
    monkeypatch.delenv(updates.FEED_ENV)
    assert updates.feed_url() is None  # a development install bundles no feed
    assert start_update_check(window, True) is None
    assert feed.requests == 0


def test_the_window_says_so_without_waiting_for_the_network(
    qtbot, feed: Feed, make_window, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed.body = _latest("99.0.0")
    feed.gate.clear()  # the server holds its answer until the window has gone on working
    monkeypatch.setenv(updates.FEED_ENV, feed.url)
    window = make_window()
    notice = start_update_check(window, True)
    assert isinstance(notice, UpdateNotice) and notice.thread is not None
    qtbot.waitUntil(lambda: feed.requests == 1, timeout=10000)
    qtbot.wait(50)  # the event loop runs while the request waits
    assert notice.result is None and notice.thread.is_alive() and not window.message.isVisible()
    feed.gate.set()
    qtbot.waitUntil(lambda: notice.result is not None, timeout=10000)
    assert window.message.isVisible() and window.message.level == "info"
    assert "Loadout 99.0.0 is released" in window.message.text.text()
    assert window.message.action.text() == "Open the release page"


def test_the_window_stays_quiet_without_a_network(qtbot, make_window, monkeypatch) -> None:
    monkeypatch.setenv(updates.FEED_ENV, _closed_port_url())
    window = make_window()
    notice = start_update_check(window, True)
    assert notice is not None
    qtbot.waitUntil(lambda: notice.result is not None, timeout=15000)
    assert notice.result.error is not None and not window.message.isVisible()


def test_the_setting_is_kept(store) -> None:
    AppSettings(check_updates=True).save(store)
    assert AppSettings.load(store).check_updates is True
