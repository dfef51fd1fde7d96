"""`vitpipe serve` as an attacker meets it, on loopback (issue 47): bytes that are not UTF-8, pipelined requests, slow
and idle connections, a second server on the same port, keep-alive latency, a POST without a length, what /v1/model
discloses, and a decompression bomb. Every attack is bounded in time and count; the server must answer each with at
worst a 4xx or 503 and keep serving. Attackers connect from 127.0.0.2 (any 127.x address is loopback on Linux), the
probes from 127.0.0.1, as an attacker and a clinic would be two hosts.

    serve_attacks.py --case non-utf8|pipelining|slow-clients|slow-bodies|page-policy|port-in-use|keep-alive|no-length|model-info|decode-bomb|
                            dicom-node|dicom-nesting|bad-bytes
"""

import http.client
import json
import os
import resource
import re
import shutil
import socket
import statistics
import struct
import subprocess
import threading
import time
import zlib

import numpy as np

from serve_common import (VITPIPE, Server, free_port, make_images, make_model, metric, predict_lines, related_dicom,
                          request, run_case, same_prediction, write_dicom)

ATTACKER = "127.0.0.2"


def read(path):
    with open(path, "rb") as f:
        return f.read()


def connect(port, source="127.0.0.1", timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_responses(sock, count, timeout=10):
    """Up to `count` HTTP responses read off one socket: [(status, headers, body)] (fewer if it closes)."""
    sock.settimeout(timeout)
    data = b""
    out = []
    while len(out) < count:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            data += chunk
            continue
        head = data[:end].decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:] if ":" in line)}
        length = int(headers.get("content-length", "0"))
        while len(data) < end + 4 + length:
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, ConnectionResetError):
                chunk = b""
            if not chunk:
                break
            data += chunk
        out.append((status, headers, data[end + 4:end + 4 + length]))
        data = data[end + 4 + length:]
    return out


def alive(server):
    return server.process.poll() is None and request(server.port, "GET", "/healthz", timeout=5)[0] == 200


def probe_healthz(port, seconds, interval=0.25):
    """Fresh connections from 127.0.0.1 asking /healthz for `seconds`: the share answered 200 within 2 s."""
    answered = total = 0
    end = time.time() + seconds
    while time.time() < end:
        total += 1
        start = time.time()
        try:
            status = request(port, "GET", "/healthz", timeout=2)[0]
            answered += status == 200 and time.time() - start <= 2
        except OSError:
            pass
        time.sleep(interval)
    return answered / max(total, 1), total


def token_server_files(root):
    token = "attack-test-token-0123456789"
    path = os.path.join(root, "token")
    with open(path, "w") as f:
        f.write(token + "\n")
    return token, path


def case_non_utf8(root, checks):
    """Bytes that are not UTF-8 in the path, the method, a parameter and a DICOM UID earn a 4xx, never a dead
    process or a 500; the 404s are logged and counted."""
    model = make_model(root)
    images = make_images(root)
    png = read(images[0])
    token, token_file = token_server_files(root)
    auth = {"Authorization": f"Bearer {token}"}
    with Server(model, "--token-file", token_file) as server:
        for name, raw in (("path %FB", b"GET /%FB HTTP/1.1\r\nHost: x\r\n\r\n"),
                          ("raw byte in the path", b"GET /\xfb\xfe HTTP/1.1\r\nHost: x\r\n\r\n"),
                          ("method G\\xfbT", b"G\xfbT /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
                          ("header value", b"GET /nothing HTTP/1.1\r\nHost: \xfb\xff\r\n\r\n")):
            with connect(server.port) as s:
                s.sendall(raw)
                answers = read_responses(s, 1)
            checks.check(len(answers) == 1 and 400 <= answers[0][0] < 500,
                         f"{name}: expected a 4xx, got {[a[0] for a in answers]}")
            if answers:
                body = answers[0][2]
                try:
                    json.loads(body)
                    valid = True
                except ValueError:
                    valid = False
                checks.check(valid, f"{name}: the answer is not valid JSON: {body[:120]!r}")
            checks.check(alive(server), f"{name}: the server died or stopped answering")
        status, _, body = request(server.port, "POST", "/v1/predict?heatmap=%FB", png,
                                  dict(auth, **{"Content-Type": "image/png"}))
        checks.check(status == 400 and b"heatmap" in body, f"?heatmap=%FB: {status} {body[:160]}")
        # A NUL in a parameter: the answer names the whole value, escaped (it was cut at the NUL: '?finding=Mass').
        for query, expected in (("heatmap=rollout&finding=Mass%00x", r"?finding=Mass\x00x: not a label of the model"),
                                ("heatmap=roll%00out", r"?heatmap=roll\x00out: unknown method (expected one of"),
                                ("heatmap=rollout&finding=" + "A" * 10000, "longer than 8192 bytes")):
            status, _, body = request(server.port, "POST", "/v1/predict?" + query, png,
                                      dict(auth, **{"Content-Type": "image/png"}))
            try:
                message = json.loads(body)["error"]
            except (ValueError, KeyError, TypeError):
                message = ""
            checks.check(status in (400, 414) and expected in message, f"?{query[:40]}: {status} {body[:200]}")
        checks.check(alive(server), "the server died or stopped answering after the bad parameters")
        # STOW-RS: one instance with a UID that is not text, one of a class the DICOM node refuses (Enhanced MR,
        # patched over DX's class UID of the same length), one good: the bad ones fail alone.
        good = read(images[-2])
        bad_uid = write_dicom(os.path.join(root, "bad-uid.dcm"), np.zeros((16, 16), np.uint16), 16, 12,
                              instance_uid="1.2.3.4.5.6.7.8.9")
        bad_uid_bytes = read(bad_uid).replace(b"1.2.3.4.5.6.7.8.9", b"1.2.3.4.5.6.7.8.\xfb")
        mr_bytes = read(images[-2]).replace(b"1.2.840.10008.5.1.4.1.1.1.1", b"1.2.840.10008.5.1.4.1.1.4.1")
        ctype, body = related_dicom([bad_uid_bytes, mr_bytes, good])
        status, _, answer = request(server.port, "POST", "/dicomweb/studies", body, dict(auth, **{"Content-Type": ctype}))
        checks.check(status == 202, f"STOW with a non-text UID and an MR instance: {status} {answer[:300]}")
        if status == 202:
            response = json.loads(answer)
            failed = response.get("00081198", {}).get("Value", [])
            reasons = " | ".join(item.get("00091002", {}).get("Value", [""])[0] for item in failed)
            checks.check(len(failed) == 2 and len(response.get("00081199", {}).get("Value", [])) == 1,
                         f"STOW: expected 2 failed and 1 stored: {answer[:400]}")
            checks.check("not a valid UID" in reasons and "SOP Class 1.2.840.10008.5.1.4.1.1.4.1" in reasons,
                         f"STOW failure reasons: {reasons}")
        status, _, text = request(server.port, "GET", "/metrics", headers=auth)
        unmatched = metric(text.decode(), "vitpipe_http_requests_total", {"route": "unmatched", "status": "404"})
        checks.check(unmatched is not None and unmatched >= 2, f"/metrics: 404s counted {unmatched}")
        server.stop()
        checks.check("no route GET /\\xfb\\xfe" in server.output(), "the 404 with raw bytes is not logged escaped")
    checks.check(server.exit_code == 0, f"exit {server.exit_code}: the server died")


def case_pipelining(root, checks):
    """Requests sent back to back in one packet are answered in order; a refused body is never parsed as a request."""
    model = make_model(root)
    images = make_images(root)
    expected = predict_lines(model, images[:2])
    token, token_file = token_server_files(root)
    with Server(model, "--token-file", token_file) as server:
        with connect(server.port) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n"
                      b"Authorization: Bearer " + token.encode() + b"\r\n\r\n")
            answers = read_responses(s, 2)
        checks.check([a[0] for a in answers] == [200, 200] and b"ok" in answers[0][2] and b"ready" in answers[1][2],
                     f"two pipelined GETs: {[(a[0], a[2][:40]) for a in answers]}")
        posts = b""
        for path in images[:2]:
            data = read(path)
            posts += (f"POST /v1/predict HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                      f"Content-Type: image/png\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data
        posts += b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        with connect(server.port) as s:
            s.sendall(posts)
            answers = read_responses(s, 3, timeout=30)
        checks.check([a[0] for a in answers] == [200, 200, 200], f"pipelined POSTs: {[a[0] for a in answers]}")
        for (status, _, body), path in zip(answers, images[:2]):
            if status == 200:
                checks.check(same_prediction(json.loads(body), expected[path]), f"pipelined answer for {path}")
        # A POST without the token, with a body that looks like requests, then a GET: the body is never a request.
        body = b"GET /stolen-" + token.encode()[-6:] + b" HTTP/1.1\r\n\r\n" * 3
        with connect(server.port) as s:
            s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answers = read_responses(s, 5)
        checks.check(answers and answers[0][0] == 401, f"refused POST: {[a[0] for a in answers]}")
        checks.check(all(b"stolen" not in a[2] and a[0] != 404 for a in answers),
                     f"a body was parsed as a request: {[(a[0], a[2][:60]) for a in answers]}")
        checks.check(len(answers) <= 2 and (len(answers) < 2 or answers[1][0] == 200),
                     f"after the refused POST: {[a[0] for a in answers]}")
        checks.check(alive(server), "not serving after pipelining")
    checks.check(server.exit_code == 0, f"exit {server.exit_code}")


def case_slow_clients(root, checks):
    """100 slow-header and 300 idle connections do not silence /healthz; a slow header is cut at --header-timeout
    with 408; past --max-connections-per-address an address gets a fast 503 while others are served."""
    model = make_model(root)
    with Server(model, "--header-timeout", "3", "--max-connections-per-address", "1000", "--http-threads", "4") as server:
        slow = [connect(server.port, ATTACKER) for _ in range(100)]
        stop = threading.Event()

        def dribble():
            for i in range(60):
                for s in slow:
                    try:
                        s.send(b"GET /healthz HTTP/1.1\r\nX-Slow: "[i % 30:i % 30 + 1])
                    except OSError:
                        pass
                if stop.wait(1.0):
                    return

        thread = threading.Thread(target=dribble)
        thread.start()
        share, total = probe_healthz(server.port, 6)
        checks.check(share >= 0.8, f"100 slow-header connections: /healthz within 2 s in {share:.0%} of {total}")
        time.sleep(1.0)  # past the 3 s header deadline
        answers = read_responses(slow[0], 1, timeout=5)
        checks.check(answers and answers[0][0] == 408, f"a slow header: {[a[0] for a in answers]}, expected 408")
        stop.set()
        thread.join()
        for s in slow:
            s.close()
        idle = [connect(server.port, ATTACKER) for _ in range(300)]
        share, total = probe_healthz(server.port, 4)
        checks.check(share >= 0.8, f"300 idle connections: /healthz within 2 s in {share:.0%} of {total}")
        for s in idle:
            s.close()
        status, _, text = request(server.port, "GET", "/metrics")
        timeouts = metric(text.decode(), "vitpipe_http_refused_total", {"reason": "header_timeout"})
        checks.check(timeouts is not None and timeouts >= 100, f"/metrics: header timeouts {timeouts}")
    checks.check(server.exit_code == 0, f"exit {server.exit_code}")
    with Server(model, "--max-connections-per-address", "20") as server:
        held = [connect(server.port, ATTACKER) for _ in range(20)]
        time.sleep(0.3)
        start = time.time()
        refused = []
        for _ in range(5):
            with connect(server.port, ATTACKER) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                refused += [a[0] for a in read_responses(s, 1, timeout=5)] or ["closed"]
        checks.check(all(r in (503, "closed") for r in refused) and time.time() - start < 3,
                     f"past the per-address cap: {refused} in {time.time() - start:.1f} s")
        checks.check(request(server.port, "GET", "/healthz", timeout=2)[0] == 200,
                     "another address is not served while one is at its cap")
        for s in held:
            s.close()
        status, _, text = request(server.port, "GET", "/metrics")
        per_address = metric(text.decode(), "vitpipe_http_refused_total", {"reason": "per_address"})
        checks.check(per_address == 5, f"/metrics: per-address refusals {per_address}")


def case_slow_bodies(root, checks):
    """Connections from one address that send a whole header and then a body byte now and then each held an HTTP
    thread for the 30 s read timeout: 8 of them silenced an 8-thread server. One address now gets half the threads
    (--max-requests-per-address), so /healthz and a prediction from another address are answered at once."""
    model = make_model(root)
    images = make_images(root)
    png = read(images[0])
    with Server(model, "--http-threads", "8") as server:
        header = (b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                  b"Content-Length: 1000000\r\n\r\n")
        slow = []
        for _ in range(40):
            s = connect(server.port, ATTACKER)
            s.sendall(header + b"\x89")
            slow.append(s)
        stop = threading.Event()

        def dribble():
            while not stop.wait(1.0):
                for s in slow:
                    try:
                        s.send(b"P")
                    except OSError:
                        pass

        thread = threading.Thread(target=dribble)
        thread.start()
        time.sleep(0.5)
        try:
            share, total = probe_healthz(server.port, 5)
            checks.check(share >= 0.8, f"40 slow-body connections: /healthz within 2 s in {share:.0%} of {total}")
            start = time.time()
            status, _, _ = request(server.port, "POST", "/v1/predict", png, {"Content-Type": "image/png"}, timeout=10)
            took = time.time() - start
            checks.check(status == 200 and took < 3, f"a prediction beside them: {status} after {took:.1f} s")
        finally:
            stop.set()
            thread.join()
            for s in slow:
                s.close()
        checks.check(alive(server), "the server stopped answering")
    checks.check(server.exit_code == 0, f"exit {server.exit_code}")
    result = subprocess.run([VITPIPE, "serve", "--model", model, "--port", "0",
                             "--max-requests-per-address", "-1"], capture_output=True, text=True, timeout=60)
    checks.check(result.returncode != 0 and "--max-requests-per-address" in result.stderr,
                 f"--max-requests-per-address -1: exit {result.returncode}: {result.stderr.strip()[-200:]}")


def case_page_policy(root, checks):
    """The try page's Content-Security-Policy allows its inline script and style by their SHA-256, not by
    'unsafe-inline' (under which markup injected into the page could run script); the hashes are those of the page
    served (hashlib), and the page's other headers stay."""
    import base64
    import hashlib
    model = make_model(root)
    with Server(model) as server:
        status, headers, page = request(server.port, "GET", "/")
        policy = headers.get("content-security-policy", "")
        checks.check(status == 200 and "'unsafe-inline'" not in policy and "default-src 'none'" in policy,
                     f"GET /: {status}, policy {policy}")
        for tag in (b"script", b"style"):
            bodies = re.findall(b"<" + tag + b">(.*?)</" + tag + b">", page, re.S)
            hashes = ["'sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode() + "'" for body in bodies]
            checks.check(bodies and all(h in policy for h in hashes), f"{tag.decode()}-src lacks {hashes}: {policy}")
        checks.check(headers.get("x-content-type-options") == "nosniff" and "frame-ancestors 'none'" in policy,
                     f"headers: {headers}")


def case_port_in_use(root, checks):
    """A second server on a port in use, HTTP or DICOM, says so in one line and exits 1 (not 134, not silently
    sharing the port)."""
    model = make_model(root)
    with Server(model) as server:
        result = subprocess.run([VITPIPE, "serve", "--model", model, "--port", str(server.port)], capture_output=True,
                                text=True, timeout=120)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        checks.check(result.returncode == 1 and f"port {server.port} is in use" in result.stderr,
                     f"second HTTP server: exit {result.returncode}: {result.stderr.strip()[-300:]}")
        checks.check(len([line for line in lines if "error" in line.lower()]) == 1,
                     f"second HTTP server: not one error line: {lines}")
        checks.check(alive(server), "the first server stopped answering")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        dicom_port = taken.getsockname()[1]
        result = subprocess.run([VITPIPE, "serve", "--model", model, "--port", "0", "--dicom-port",
                                 str(dicom_port), "--spool", os.path.join(root, "spool")],
                                capture_output=True, text=True, timeout=120)
        checks.check(result.returncode == 1 and str(dicom_port) in result.stderr,
                     f"DICOM port in use: exit {result.returncode}: {result.stderr.strip()[-300:]}")
        checks.check("terminate called" not in result.stderr, "DICOM port in use: the process aborted")


def case_port_zero(root, checks):
    """--port 0: the kernel picks a free port and the ready line says which, so two servers started at once both come
    up, on different ports, with no window in which another test could take a port chosen beforehand. Out of range
    is still refused with one line."""
    model = make_model(root)
    with Server(model) as first, Server(model) as second:
        checks.check("--port 0" in " ".join(first.args) and "--port 0" in " ".join(second.args),
                     f"the harness did not start them with --port 0: {first.args}")
        checks.check(first.port != second.port and 0 not in (first.port, second.port),
                     f"ports {first.port} and {second.port}")
        checks.check(alive(first) and alive(second), "a server on a port of its own choosing does not answer")
    checks.check(first.exit_code == 0 and second.exit_code == 0, f"exits {first.exit_code}, {second.exit_code}")
    result = subprocess.run([VITPIPE, "serve", "--model", model, "--port", "65536"], capture_output=True, text=True,
                            timeout=60)
    checks.check(result.returncode == 1 and "--port: expected 0 (any free port) or 1..65535" in result.stderr,
                 f"--port 65536: exit {result.returncode}: {result.stderr.strip()[-200:]}")


def case_keep_alive(root, checks):
    """Requests after the first on a keep-alive connection are as quick as the first (no Nagle/delayed-ACK wait)."""
    model = make_model(root)
    with Server(model) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        times = []
        for _ in range(21):
            start = time.perf_counter()
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            times.append(time.perf_counter() - start)
            checks.check(response.status == 200, f"keep-alive /healthz: {response.status}")
        conn.close()
        median = statistics.median(times[1:])
        print(f"keep-alive /healthz: median {median * 1000:.2f} ms after the first")
        checks.check(median < 0.02, f"keep-alive: median {median * 1000:.1f} ms per request (Nagle waits ~40 ms)")


def case_no_length(root, checks):
    """A POST with neither Content-Length nor chunked encoding is answered 411 at once, not after 30 s."""
    model = make_model(root)
    token, token_file = token_server_files(root)
    with Server(model, "--token-file", token_file) as server:
        with connect(server.port) as s:
            start = time.time()
            s.sendall(f"POST /v1/predict HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                      "Content-Type: image/png\r\n\r\n".encode())
            answers = read_responses(s, 1, timeout=10)
            took = time.time() - start
        checks.check(answers and answers[0][0] == 411 and took < 2,
                     f"POST without a length: {[a[0] for a in answers]} after {took:.1f} s")
        checks.check(alive(server), "not serving after a POST without a length")


def case_model_info(root, checks):
    """/v1/model names the model and its weights' hash, never where they lie on this machine."""
    model = make_model(root)
    with Server(model) as server:
        status, _, body = request(server.port, "GET", "/v1/model")
        info = json.loads(body)
        checks.check(status == 200 and root.encode() not in body and os.path.dirname(root).encode() not in body,
                     f"/v1/model discloses a path: {body[:400]}")
        import hashlib
        with open(os.path.join(model, info["weights"]["file"]), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        checks.check(info["weights"].get("sha256") == digest and info["weights"].get("name") == "model",
                     f"/v1/model weights: {info.get('weights')}")


def bomb_png(path, width=16000, height=16000):
    """A PNG of width x height RGBA at 16 bits, all zero: about 2 MB that decodes to 2 GB."""
    def chunk(kind, data):
        return (len(data).to_bytes(4, "big") + kind + data +
                (zlib.crc32(kind + data) & 0xFFFFFFFF).to_bytes(4, "big"))

    compressor = zlib.compressobj(9)
    row = b"\0" * (1 + width * 8)
    parts = [compressor.compress(row) for _ in range(height)]
    parts.append(compressor.flush())
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([16, 6, 0, 0, 0])))
        f.write(chunk(b"IDAT", b"".join(parts)))
        f.write(chunk(b"IEND", b""))
    return path


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))


def case_decode_bomb(root, checks):
    """A 2 MB PNG that decodes to 2 GB is refused from its header: no more than 1 GiB of extra memory, quickly, and
    the server goes on serving."""
    model = make_model(root)
    images = make_images(root)
    expected = predict_lines(model, images[:1])[images[0]]
    bomb = read(bomb_png(os.path.join(root, "bomb.png")))
    print(f"bomb: {len(bomb)} bytes")
    with Server(model, "--max-body", "8M") as server:
        before = peak_rss_kib(server.process.pid)
        start = time.time()
        statuses = []
        for _ in range(3):
            status, _, body = request(server.port, "POST", "/v1/predict", bomb, {"Content-Type": "image/png"})
            statuses.append(status)
        took = time.time() - start
        grown = (peak_rss_kib(server.process.pid) - before) / 1024
        print(f"bomb x3: {statuses} in {took:.2f} s, peak RSS grew {grown:.0f} MiB")
        checks.check(statuses == [413] * 3 and b"--decode-memory" in body, f"bomb: {statuses} {body[:200]}")
        checks.check(grown < 1024, f"bomb: peak RSS grew {grown:.0f} MiB")
        status, _, body = request(server.port, "POST", "/v1/predict", read(images[0]), {"Content-Type": "image/png"})
        checks.check(status == 200 and same_prediction(json.loads(body), expected), f"after the bomb: {status}")
    checks.check(server.exit_code == 0, f"exit {server.exit_code}")
    # The budget is the service's: a smaller one refuses an ordinary image with a message naming the flag.
    with Server(model, "--decode-memory", "1M") as server:
        big = os.path.join(root, "big.png")
        from PIL import Image
        Image.fromarray(np.zeros((1200, 1200), np.uint16)).save(big)
        status, _, body = request(server.port, "POST", "/v1/predict", read(big), {"Content-Type": "image/png"})
        checks.check(status == 413 and b"--decode-memory" in body, f"1M budget, 1200 px 16-bit PNG: {status} {body}")


def echoscu(port, calling_ae="ECHOSCU", host="127.0.0.1"):
    """echoscu's exit status and the seconds it took (DCMTK's tool, installed with the tests)."""
    start = time.time()
    result = subprocess.run(["echoscu", "-to", "5", "-ta", "5", "-aet", calling_ae, "-aec", "VITPIPE", host, str(port)],
                            capture_output=True, timeout=60)
    return result.returncode, time.time() - start


def case_dicom_node(root, checks):
    """The DICOM node: silent connections do not hold up an association; it listens only on the address asked; by
    default only the PACS of --send-results-to may associate, and --allowed-callers names who else."""
    import shutil
    if not shutil.which("echoscu"):
        print("SKIP: echoscu (dcmtk) is not installed")
        raise SystemExit(77)
    model = make_model(root)
    dicom_port = free_port()
    pacs_port = free_port()  # nothing listens there: results wait in the outbox, which is fine here
    with Server(model, "--dicom-port", str(dicom_port), "--spool", os.path.join(root, "spool"),
                "--send-results-to", f"PACS@127.0.0.1:{pacs_port}") as server:
        code, _ = echoscu(dicom_port, "PACS")
        checks.check(code == 0, f"echo from the PACS of --send-results-to: {code}")
        code, _ = echoscu(dicom_port, "INTRUDER")
        checks.check(code != 0, "echo from a caller that is not the PACS was accepted")
        silent = [connect(dicom_port, ATTACKER) for _ in range(8)]
        code, took = echoscu(dicom_port, "PACS")
        checks.check(code == 0 and took < 3, f"echo with 8 silent connections open: {code} after {took:.1f} s")
        for s in silent:
            s.close()
        with socket.socket() as other:
            other.settimeout(3)
            try:
                other.connect(("127.0.0.2", dicom_port))
                reached = True
            except OSError:
                reached = False
        checks.check(not reached, "the node, asked to listen on 127.0.0.1, answers on 127.0.0.2")
        server.stop()
        checks.check("rejected: not in --allowed-callers" in server.output(), "the refused caller is not logged")
    checks.check(server.exit_code == 0, f"exit {server.exit_code}")
    with Server(model, "--dicom-port", str(dicom_port), "--spool", os.path.join(root, "spool2"),
                "--allowed-callers", "MODALITY@127.0.0.1,ANYWHERE") as server:
        checks.check(echoscu(dicom_port, "MODALITY")[0] == 0, "an allowed caller from its address is refused")
        checks.check(echoscu(dicom_port, "ANYWHERE")[0] == 0, "an allowed caller without address is refused")
        checks.check(echoscu(dicom_port, "PACS")[0] != 0, "a caller not in --allowed-callers is accepted")
    result = subprocess.run([VITPIPE, "serve", "--model", model, "--port", "0", "--dicom-port",
                             str(free_port()), "--spool", os.path.join(root, "spool3"), "--allowed-callers", "A\\B"],
                            capture_output=True, text=True, timeout=60)
    checks.check(result.returncode == 1 and "--allowed-callers" in result.stderr,
                 f"a malformed --allowed-callers: exit {result.returncode}: {result.stderr.strip()[-200:]}")


def nested_dicom(depth):
    """A 16 x 16 8-bit DX image whose Content Sequence nests `depth` sequences of undefined length (explicit VR
    little endian), each in an item of the one above: 36 bytes a level."""
    def element(group, number, vr, value):
        value += b"\0" if len(value) % 2 else b""
        if vr in (b"OB", b"OW", b"SQ", b"UN", b"UT"):
            return struct.pack("<HH", group, number) + vr + b"\0\0" + struct.pack("<I", len(value)) + value
        return struct.pack("<HH", group, number) + vr + struct.pack("<H", len(value)) + value
    uid = b"1.2.826.0.1.3680043.10.1047.7"
    meta = (element(2, 1, b"OB", b"\0\1") + element(2, 2, b"UI", b"1.2.840.10008.5.1.4.1.1.1.1")
            + element(2, 3, b"UI", uid) + element(2, 0x10, b"UI", b"1.2.840.10008.1.2.1"))
    data = (element(8, 0x16, b"UI", b"1.2.840.10008.5.1.4.1.1.1.1") + element(8, 0x18, b"UI", uid)
            + element(0x20, 0xD, b"UI", uid + b".1") + element(0x20, 0xE, b"UI", uid + b".2"))
    data += (struct.pack("<HH", 0x40, 0xA730) + b"SQ\0\0" + b"\xff" * 4 + struct.pack("<HHI", 0xFFFE, 0xE000, 0xFFFFFFFF)) * depth
    data += (struct.pack("<HHI", 0xFFFE, 0xE00D, 0) + struct.pack("<HHI", 0xFFFE, 0xE0DD, 0)) * depth
    for number, vr, value in ((2, b"US", struct.pack("<H", 1)), (4, b"CS", b"MONOCHROME2"),
                              (0x10, b"US", struct.pack("<H", 16)), (0x11, b"US", struct.pack("<H", 16)),
                              (0x100, b"US", struct.pack("<H", 8)), (0x101, b"US", struct.pack("<H", 8)),
                              (0x102, b"US", struct.pack("<H", 7)), (0x103, b"US", struct.pack("<H", 0))):
        data += element(0x28, number, vr, value)
    data += element(0x7FE0, 0x10, b"OW", b"\x80" * 256)
    return b"\0" * 128 + b"DICM" + element(2, 0, b"UL", struct.pack("<I", len(meta))) + meta + data


def case_dicom_nesting(root, checks):
    """DICOM sequences nested thousands deep (DCMTK reads them by recursion: about 5,000 levels overflowed an 8 MB
    stack) are refused with a reason on every door, and the service lives on: POST /v1/predict, STOW-RS, a C-STORE,
    and a file already in the spool's received/ at start (before, serve died at every start on it)."""
    model = make_model(root)
    images = make_images(root)
    deep = nested_dicom(8000)
    spool = os.path.join(root, "spool")
    os.makedirs(os.path.join(spool, "received"))
    with open(os.path.join(spool, "received", "1.2.826.0.1.3680043.10.1047.7.dcm"), "wb") as f:
        f.write(deep)
    dicom_port = free_port()
    server = Server(model, "--dicom-port", str(dicom_port), "--spool", spool, "--allowed-callers", "any")
    try:
        server.__enter__()  # not `with`: a start that fails is this case's finding, not an error
    except RuntimeError as error:
        checks.check(False, f"serve with a deeply nested file in received/: {str(error)[-300:]}")
        return
    try:
        deadline = time.time() + 30
        dead = os.path.join(spool, "dead-letter", "1.2.826.0.1.3680043.10.1047.7.dcm.reason.txt")
        while time.time() < deadline and not os.path.exists(dead):
            time.sleep(0.2)
        checks.check(os.path.exists(dead) and "nest more than 64 deep" in read(dead).decode(),
                     "the nested file in received/ is not in dead-letter/ with its reason")
        status, _, body = request(server.port, "POST", "/v1/predict", deep, {"Content-Type": "application/dicom"})
        checks.check(status == 400 and b"sequences nest more than 64 deep" in body, f"POST: {status} {body[:200]}")
        ctype, stow = related_dicom([deep])
        status, _, body = request(server.port, "POST", "/dicomweb/studies", stow, {"Content-Type": ctype})
        checks.check(status == 409 and b"nest more than 64" in body, f"STOW-RS: {status} {body[:300]}")
        if shutil.which("storescu"):
            path = os.path.join(root, "deep.dcm")
            with open(path, "wb") as f:
                f.write(deep)
            # storescu reads the file with DCMTK too: it needs the stack that vitpipe no longer does.
            unlimited = lambda: resource.setrlimit(resource.RLIMIT_STACK, (resource.RLIM_INFINITY,) * 2)
            result = subprocess.run(["storescu", "-to", "30", "-aet", "ATTACKER", "-aec", "VITPIPE", "127.0.0.1",
                                     str(dicom_port), path], capture_output=True, timeout=120, preexec_fn=unlimited)
            print(f"storescu of the nested file: exit {result.returncode}")
            checks.check(alive(server), "the service died after a C-STORE of a deeply nested file")
            checks.check("refused: instance 1.2.826.0.1.3680043.10.1047.7: sequences nest more than 64" in
                         server.output(), "the refused C-STORE is not logged with its reason")
            checks.check(not os.listdir(os.path.join(spool, "received")), "the refused instance was stored")
        else:
            print("storescu (dcmtk) is not installed: the C-STORE part is not run")
        status, _, body = request(server.port, "POST", "/v1/predict", read(images[0]), {"Content-Type": "image/png"})
        checks.check(status == 200, f"an ordinary image after the attacks: {status}")
    finally:
        server.__exit__(None, None, None)
    checks.check(server.exit_code == 0, f"exit {server.exit_code}")


def strict_json(body):
    """The answer decoded as strict UTF-8 JSON, or None."""
    try:
        return json.loads(body.decode("utf-8", errors="strict"))
    except ValueError:
        return None


def case_bad_bytes(root, checks):
    """Bodies with control and non-UTF-8 bytes (a JSON body, a part whose file name carries an escape sequence and
    \\xff): a 4xx whose answer is strict UTF-8 JSON, its message with those bytes written \\xNN (before: the escape
    sequence raw in the decoded message, \\xff as U+FFFD), and the server serving on."""
    model = make_model(root)
    png = read(make_images(root)[0])
    with Server(model) as server:
        status, _, body = request(server.port, "POST", "/v1/predict", b'{"image": \x01\xff\x7f}',
                                  {"Content-Type": "application/json"})
        answer = strict_json(body)
        checks.check(400 <= status < 500 and isinstance(answer, dict) and "error" in answer,
                     f"a JSON body with bad bytes: a 4xx with a JSON error, got {status} {body[:160]!r}")
        status, _, body = request(server.port, "POST", "/v1/predict", b'{"image": \x01\xff\x7f}',
                                  {"Content-Type": "image/png"})
        answer = strict_json(body)
        checks.check(status == 400 and isinstance(answer, dict) and "error" in answer,
                     f"the same body as image/png: 400 with a JSON error, got {status} {body[:160]!r}")
        boundary = b"vitpipe-bad-bytes-boundary-3d9f"
        form = (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="image0"; filename="x\x1b[31m\xff.png"'
                b"\r\nContent-Type: application/octet-stream\r\n\r\n\x01\xffnot an image\r\n--" + boundary + b"--\r\n")
        status, _, body = request(server.port, "POST", "/v1/predict", form,
                                  {"Content-Type": "multipart/form-data; boundary=" + boundary.decode()})
        answer = strict_json(body)
        message = answer.get("error", "") if isinstance(answer, dict) else ""
        checks.check(status == 400 and message, f"a part named with bad bytes: 400 with a JSON error, got {status} "
                     f"{body[:200]!r}")
        checks.check("x\\x1b[31m\\xff.png" in message and not any(ord(c) < 0x20 or ord(c) == 0x7f for c in message)
                     and "\ufffd" not in message, "... naming the part x\\x1b[31m\\xff.png, escaped", repr(message))
        checks.check(alive(server), "the server still answers /healthz")
        status, _, body = request(server.port, "POST", "/v1/predict", png, {"Content-Type": "image/png"})
        checks.check(status == 200 and isinstance(strict_json(body), dict), f"and predicts after: {status} {body[:120]!r}")


CASES = {"non-utf8": case_non_utf8, "pipelining": case_pipelining, "slow-clients": case_slow_clients,
         "slow-bodies": case_slow_bodies, "page-policy": case_page_policy,
         "port-in-use": case_port_in_use, "port-zero": case_port_zero, "keep-alive": case_keep_alive,
         "no-length": case_no_length,
         "model-info": case_model_info, "decode-bomb": case_decode_bomb, "dicom-node": case_dicom_node,
         "dicom-nesting": case_dicom_nesting, "bad-bytes": case_bad_bytes}


if __name__ == "__main__":
    run_case(CASES)
