"""A headless Chromium from Debian's packages (``apt-get install chromium``; scripts/lib.sh's
``ensure_chromium``), driven over the DevTools protocol with ``websockets``: open a URL as a
user would (a top-level navigation), and see what the page did -- its title and DOM after a
while, every request it sent (the Network domain), and any download it became.

No browser is downloaded and nothing leaves the machine: every host name but loopback
resolves to nothing (``--host-resolver-rules``), and Chromium's own background services are off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

#: The flags of a quiet, loopback-only headless Chromium.
FLAGS = (
    "--headless",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-pings",
    "--metrics-recording-only",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--remote-debugging-port=0",
)


def chromium_path() -> str | None:
    """Debian's Chromium, if installed."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_problem() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    if chromium_path() is None:
        return "no chromium (Debian's package: apt-get install chromium; scripts/test.sh installs it in CI)"
    try:
        import websockets.sync.client  # noqa: F401
    except ImportError:  # pragma: no cover - locked in requirements/lock.txt
        return "the websockets package is missing"
    return None


@dataclass
class Visit:
    """What a page did once opened."""

    url: str
    title: str | None
    html: str | None
    requests: list[dict[str, Any]] = field(default_factory=list)
    downloads: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def request_urls(self) -> list[str]:
        return [r["url"] for r in self.requests]


class Browser:
    """One headless Chromium process; :meth:`open` visits a URL in a fresh tab."""

    def __init__(self, base: Path) -> None:
        path = chromium_path()
        assert path is not None, chromium_problem()
        self.base = base
        profile = base / "profile"
        profile.mkdir(parents=True, exist_ok=True)
        self.downloads = base / "downloads"
        self.downloads.mkdir(exist_ok=True)
        flags = list(FLAGS)
        if os.geteuid() == 0:  # Chromium's own sandbox needs an unprivileged user
            flags.append("--no-sandbox")
        env = {**os.environ, "HOME": str(base)}
        self.log = open(base / "chromium.log", "wb")
        self.process = subprocess.Popen(
            [path, *flags, f"--user-data-dir={profile}", "about:blank"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not start: {(base / 'chromium.log').read_text()[-2000:]}")
            time.sleep(0.1)
        port, ws_path = active.read_text().splitlines()[:2]
        self._connection = connect(f"ws://127.0.0.1:{port}{ws_path}", max_size=None)
        self.ws: ClientConnection = self._connection.__enter__()
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.call(
            "Browser.setDownloadBehavior",
            {"behavior": "allowAndName", "downloadPath": str(self.downloads), "eventsEnabled": True},
        )

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            answer = json.loads(self.ws.recv(timeout=30))
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            self.events.append(answer)

    def _drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.events.append(json.loads(self.ws.recv(timeout=left)))
            except TimeoutError:
                return

    def open(self, url: str, settle: float = 3.0) -> Visit:
        """Navigate a fresh tab to ``url``, wait ``settle`` seconds for what its script does,
        and report."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            for domain in ("Page", "Network", "Runtime"):
                self.call(f"{domain}.enable", session=session)
            self.events.clear()
            self.call("Page.navigate", {"url": url}, session=session)
            self._drain(settle)
            title = html = None
            try:
                title = self._evaluate("document.title", session)
                html = self._evaluate("document.documentElement ? document.documentElement.outerHTML : ''", session)
            except RuntimeError:
                pass
            self._drain(0.5)
            visit = Visit(url, title, html)
            for event in self.events:
                if event.get("sessionId") not in (session, None):
                    continue
                method, params = event.get("method"), event.get("params", {})
                if method == "Network.requestWillBeSent":
                    request = params["request"]
                    visit.requests.append(
                        {"url": request["url"], "method": request["method"], "type": params.get("type")}
                    )
                elif method == "Browser.downloadWillBegin":
                    visit.downloads.append(params.get("suggestedFilename", ""))
                elif method == "Runtime.consoleAPICalled":
                    visit.console.append(" ".join(str(a.get("value")) for a in params.get("args", [])))
            return visit
        finally:
            self.call("Target.closeTarget", {"targetId": target})

    def _evaluate(self, expression: str, session: str) -> Any:
        answer = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        return answer.get("result", {}).get("value")

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self._connection.__exit__(None, None, None)
        finally:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            self.log.close()
