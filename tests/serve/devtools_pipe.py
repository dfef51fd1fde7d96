"""A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: commands in on fd 3,
answers and events out on fd 4, each message JSON ended by a NUL byte), so a test needs no websocket library and no
npm package. Only what the serve page test uses: open a tab, evaluate script, set a file input's files, wait for a
condition, take a screenshot; the tab's console messages, log entries and requested URLs are kept for checks."""

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time


def find_chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, width=1280, height=900):
        self.profile = tempfile.mkdtemp(prefix="vitpipe-chromium-")
        self.stderr = open(os.path.join(self.profile, "stderr.log"), "w")
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def fds():  # in the child: its fd 3 reads our commands, its fd 4 writes its answers (dup2: inheritable)
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)

        # Every request to anything but loopback goes to a dead proxy (loopback bypasses proxies), and no name but
        # 127.0.0.1 resolves: the page must need nothing else.
        self.process = subprocess.Popen(
            [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
             "--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr, preexec_fn=fds,
            close_fds=False)  # close_fds would close 3 and 4 after fds() ran; Python's own fds are close-on-exec
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._next_id = 0
        self._answers = {}
        self._answered = threading.Condition()
        self.events = queue.Queue()
        self.console, self.log, self.requests = [], [], []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = None

    def _read(self):
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._answered:
                    self._answers[None] = "closed"
                    self._answered.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                text, buffer = buffer.split(b"\0", 1)
                message = json.loads(text)
                if "id" in message:
                    with self._answered:
                        self._answers[message["id"]] = message
                        self._answered.notify_all()
                else:
                    self._event(message)

    def _event(self, message):
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            self.console.append(f"{params.get('type')}: " +
                                " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console.append("exception: " + str(details.get("exception", {}).get("description", details)))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            self.log.append(f"{entry.get('level')}: {entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        self.events.put(message)

    def send(self, method, params=None, timeout=60, session=True):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        with self._answered:
            while self._next_id not in self._answers:
                if None in self._answers:
                    raise RuntimeError(f"chromium closed the pipe during {method}: {self.output()[-500:]}")
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError(f"{method}: no answer in {timeout} s")
                self._answered.wait(left)
            answer = self._answers.pop(self._next_id)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def output(self):
        with open(self.stderr.name, errors="replace") as f:
            return f.read()

    def open(self, url, timeout=60):
        """A new tab at `url`, attached; returns when its load event fired."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(domain + ".enable")
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'", timeout)

    def evaluate(self, expression, timeout=60):
        """The value of a script expression (awaited when it is a promise), as JSON would carry it."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, timeout)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.evaluate(f"Boolean({expression})"):
                return True
            time.sleep(0.1)
        raise TimeoutError(f"not true within {timeout} s: {expression}")

    def set_files(self, selector, paths):
        """As a user choosing `paths` in the file input `selector` (the input and change events fire)."""
        node = self.send("Runtime.evaluate", {"expression": f"document.querySelector({json.dumps(selector)})"})
        self.send("DOM.setFileInputFiles", {"files": [os.path.abspath(p) for p in paths],
                                            "objectId": node["result"]["objectId"]})

    def screenshot(self, path, width=1280, height=900):
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False})
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
