"""`vitpipe serve` over real HTTP on loopback, checked against `vitpipe predict` on the same files (predict itself is
checked against transformers in tests/predict): answers under concurrency, overload, bad requests, the token, the
heatmap, STOW-RS, metrics and SIGTERM. Bounded: every case starts one server and sends at most a few hundred requests.

    serve_http.py --case load|overload|bad-requests|token|heatmap|stow|sigterm
"""

import base64
import io
import json
import os
import random
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

from serve_common import (VITPIPE, Server, form_data, make_images, make_model, metric, predict_lines, related_dicom,
                          request, run_case, same_prediction)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def content_type_of(path):
    return {".png": "image/png", ".jpg": "image/jpeg", ".dcm": "application/dicom"}[os.path.splitext(path)[1]]


def case_load(root, checks):
    """Many concurrent clients, single images and multi-image form-data: every answer equals predict's; the metrics
    count what was sent; images shared batches."""
    model = make_model(root)
    images = make_images(root)
    expected = predict_lines(model, images)
    with Server(model, "--max-batch", "8", "--max-delay-ms", "20", "--max-queue", "64") as server:
        rng = random.Random(5)
        jobs = []
        for i in range(96):
            if i % 6 == 5:
                chosen = rng.sample(images, 3)
                jobs.append(("multi", chosen))
            else:
                jobs.append(("single", [rng.choice(images)]))

        def run(job):
            kind, paths = job
            if kind == "single":
                status, _, body = request(server.port, "POST", "/v1/predict", read(paths[0]),
                                          {"Content-Type": content_type_of(paths[0])})
            else:
                ctype, data = form_data([(os.path.basename(p), read(p)) for p in paths])
                status, _, body = request(server.port, "POST", "/v1/predict", data, {"Content-Type": ctype})
            return job, status, body

        with ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(run, jobs))
        singles = sum(1 for (kind, _), _, _ in results if kind == "single")
        images_sent = sum(len(paths) for (_, paths), _, _ in results)
        for (kind, paths), status, body in results:
            checks.check(status == 200, f"{kind} {paths}: status {status}: {body[:200]}")
            if status != 200:
                continue
            answer = json.loads(body)
            answers = [answer] if kind == "single" else answer
            checks.check(len(answers) == len(paths), f"{kind}: {len(answers)} answers for {len(paths)} images")
            for a, p in zip(answers, paths):
                checks.check(same_prediction(a, expected[p]), f"{kind} {p}: answer differs from predict's")
                if kind == "multi":
                    checks.check(a["image"] == os.path.basename(p), f"multi: image name {a['image']} for {p}")
        status, _, text = request(server.port, "GET", "/metrics")
        text = text.decode()
        checks.check(status == 200, f"/metrics: {status}")
        requests_ok = metric(text, "vitpipe_http_requests_total", {"route": "/v1/predict", "status": "200"})
        checks.check(requests_ok == len(jobs), f"/metrics: {requests_ok} predict requests with 200, sent {len(jobs)}")
        warm_up = 8
        total = metric(text, "vitpipe_images_total")
        checks.check(total == images_sent + warm_up, f"/metrics: images_total {total}, sent {images_sent} + warm-up")
        batch_sum, batch_count = metric(text, "vitpipe_batch_size_sum"), metric(text, "vitpipe_batch_size_count")
        checks.check(batch_sum == total, f"/metrics: batch sizes sum to {batch_sum}, images {total}")
        checks.check(batch_count < total - warm_up, f"dynamic batching: {batch_count} batches for {total} images")
        latency_count = metric(text, "vitpipe_http_request_duration_seconds_count", {"route": "/v1/predict"})
        checks.check(latency_count == len(jobs), f"/metrics: latency histogram counts {latency_count}")
        checks.check(metric(text, "vitpipe_queue_depth") == 0, "/metrics: queue depth 0 when idle")
        print(f"{len(jobs)} requests ({singles} single, {len(jobs) - singles} multi), {images_sent} images in "
              f"{batch_count - 1:.0f} batches after warm-up")
    checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


def case_overload(root, checks):
    """More concurrent requests than --max-queue: the excess is answered 503 with Retry-After at once, every request
    gets an answer, the admitted ones are right, the metrics add up, and the server still serves afterwards."""
    model = make_model(root)
    images = make_images(root)[:3]
    expected = predict_lines(model, images)
    with Server(model, "--max-batch", "2", "--max-delay-ms", "50", "--max-queue", "2", "--http-threads", "64") as server:
        barrier = threading.Barrier(48)

        def run(i):
            path = images[i % len(images)]
            barrier.wait()
            return path, *request(server.port, "POST", "/v1/predict", read(path), {"Content-Type": "image/png"})

        with ThreadPoolExecutor(max_workers=48) as pool:
            results = list(pool.map(run, range(48)))
        statuses = [status for _, status, _, _ in results]
        checks.check(all(s in (200, 503) for s in statuses), f"overload: statuses {sorted(set(statuses))}")
        checks.check(statuses.count(503) > 0 and statuses.count(200) > 0,
                     f"overload: {statuses.count(200)} answered, {statuses.count(503)} refused")
        for path, status, headers, body in results:
            if status == 503:
                checks.check(headers.get("retry-after") == "1", "503 without Retry-After")
                checks.check(b"--max-queue" in body, f"503 body: {body[:120]}")
            elif status == 200:
                checks.check(same_prediction(json.loads(body), expected[path]), f"{path}: wrong answer under load")
        _, _, text = request(server.port, "GET", "/metrics")
        text = text.decode()
        for code in (200, 503):
            counted = metric(text, "vitpipe_http_requests_total", {"route": "/v1/predict", "status": str(code)})
            checks.check(counted == statuses.count(code), f"/metrics: {counted} x {code}, sent {statuses.count(code)}")
        status, _, body = request(server.port, "POST", "/v1/predict", read(images[0]), {"Content-Type": "image/png"})
        checks.check(status == 200 and same_prediction(json.loads(body), expected[images[0]]), "serving after overload")
        print(f"overload: {statuses.count(200)} answered, {statuses.count(503)} refused with 503")
    checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


def case_bad_requests(root, checks):
    """Each bad request gets its own clear answer, and the server keeps serving after every one."""
    model = make_model(root)
    images = make_images(root)
    png = read(images[0])
    expected = predict_lines(model, images[:1])[images[0]]
    ctype, multi = form_data([("a.png", png), ("b.png", png)])
    stow_type, stow = related_dicom([read(images[-1])])
    cases = [
        ("wrong content type", "/v1/predict", b"hello", {"Content-Type": "text/plain"}, 415, "Content-Type"),
        ("empty body", "/v1/predict", b"", {"Content-Type": "image/png"}, 400, "empty"),
        ("garbage PNG", "/v1/predict", b"\x89PNG\r\n\x1a\n" + b"\0" * 64, {"Content-Type": "image/png"}, 400, "body"),
        ("not an image", "/v1/predict", b"GIF89a" + b"\0" * 64, {"Content-Type": "image/png"}, 400, "body"),
        ("garbage DICOM", "/v1/predict", b"\0" * 128 + b"DICM" + b"\xff" * 64, {"Content-Type": "application/dicom"},
         400, "body"),
        ("truncated DICOM", "/v1/predict", read(images[-2])[:300], {"Content-Type": "application/dicom"}, 400, "body"),
        ("truncated form-data", "/v1/predict", multi[: len(multi) // 2], {"Content-Type": ctype}, 400, "multipart"),
        ("form-data without boundary", "/v1/predict", multi, {"Content-Type": "multipart/form-data"}, 400, ""),
        ("oversize body", "/v1/predict", b"\0" * 300_000, {"Content-Type": "image/png"}, 413, "--max-body"),
        ("unknown heatmap method", "/v1/predict?heatmap=magic", png, {"Content-Type": "image/png"}, 400, "heatmap"),
        ("a finding without a heatmap", "/v1/predict?finding=A", png, {"Content-Type": "image/png"}, 400, "finding"),
        ("an unknown finding", "/v1/predict?heatmap=gradcam&finding=Nope", png, {"Content-Type": "image/png"}, 400,
         "finding"),
        ("STOW with a wrong type", "/dicomweb/studies", stow, {"Content-Type": "application/dicom"}, 415,
         "multipart/related"),
        ("truncated STOW", "/dicomweb/studies", stow[: len(stow) - 40], {"Content-Type": stow_type}, 400, "multipart"),
        ("STOW of non-DICOM parts", "/dicomweb/studies", related_dicom([png])[1], {"Content-Type": stow_type}, 409,
         "00081198"),
        ("unknown route", "/v2/predict", png, {"Content-Type": "image/png"}, 404, "no route"),
    ]
    with Server(model, "--max-body", "200K") as server:
        for name, path, body, headers, want, text in cases:
            status, _, answer = request(server.port, "POST", path, body, headers)
            checks.check(status == want, f"{name}: status {status}, expected {want}: {answer[:200]}")
            checks.check(text.encode() in answer, f"{name}: answer lacks '{text}': {answer[:200]}")
            if want != 409:
                with_error = json.loads(answer) if answer.startswith(b"{") else {}
                checks.check(isinstance(with_error.get("error"), str) and with_error["error"],
                             f"{name}: no error message: {answer[:200]}")
            status, _, answer = request(server.port, "POST", "/v1/predict", png, {"Content-Type": "image/png"})
            checks.check(status == 200 and same_prediction(json.loads(answer), expected),
                         f"after {name}: not serving ({status})")
            print(f"{name}: {want}")
        # A chunked body over --max-body (no Content-Length to check up front) is counted as it arrives.
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.putrequest("POST", "/v1/predict")
        conn.putheader("Content-Type", "image/png")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        try:
            for _ in range(40):
                chunk = b"\0" * 16384
                conn.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server may close once it has seen enough
        response = conn.getresponse()
        checks.check(response.status == 413, f"chunked oversize body: {response.status}")
        conn.close()
        status, _, _ = request(server.port, "POST", "/v1/predict", png, {"Content-Type": "image/png"})
        checks.check(status == 200, "serving after a chunked oversize body")
    checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


def case_token(root, checks):
    """--token-file: every route but /healthz needs it; a wrong one is refused; it is never logged."""
    model = make_model(root)
    png = read(make_images(root)[0])
    token = "s3cr3t-Token_" + "%08x" % random.Random(2).getrandbits(32)
    token_file = os.path.join(root, "token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    with Server(model, "--token-file", token_file) as server:
        checks.check(request(server.port, "GET", "/healthz")[0] == 200, "/healthz needs no token")
        for method, path, body in (("GET", "/v1/model", None), ("GET", "/readyz", None), ("GET", "/metrics", None),
                                   ("POST", "/v1/predict", png)):
            headers = {"Content-Type": "image/png"}
            status, answer_headers, _ = request(server.port, method, path, body, headers)
            checks.check(status == 401 and answer_headers.get("www-authenticate") == "Bearer",
                         f"{path} without a token: {status}")
            status, _, _ = request(server.port, method, path, body, dict(headers, Authorization="Bearer wrong"))
            checks.check(status == 401, f"{path} with a wrong token: {status}")
            status, _, _ = request(server.port, method, path, body, dict(headers, Authorization=f"Bearer {token}x"))
            checks.check(status == 401, f"{path} with the token plus a character: {status}")
            status, _, _ = request(server.port, method, path, body, dict(headers, Authorization=f"bearer {token}"))
            checks.check(status == 200, f"{path} with the token: {status}")
        server.stop()
        checks.check(token not in server.output(), "the token appears in the server's log")
    checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")
    empty = os.path.join(root, "empty-token")
    open(empty, "w").close()
    import subprocess
    from serve_common import VITPIPE
    result = subprocess.run([VITPIPE, "serve", "--model", model, "--token-file", empty], capture_output=True,
                            text=True, timeout=60)
    checks.check(result.returncode != 0 and "--token-file" in result.stderr and "empty" in result.stderr,
                 f"empty token file: exit {result.returncode}: {result.stderr.strip()}")


def case_heatmap(root, checks):
    """?heatmap=METHOD: the overlay of the most probable label, the same picture `predict --heatmap` writes."""
    model = make_model(root)
    images = make_images(root)
    path = images[1]
    expected = predict_lines(model, [path])[path]
    out = os.path.join(root, "maps")
    predict_lines(model, [path], "--heatmap", out)
    written = [f for f in os.listdir(out) if f.endswith(".png")]
    with Server(model) as server:
        status, _, body = request(server.port, "POST", "/v1/predict?heatmap=grad-rollout", read(path),
                                  {"Content-Type": "image/png"})
        checks.check(status == 200, f"heatmap: status {status}: {body[:200]}")
        answer = json.loads(body)
        checks.check(same_prediction(answer, expected), "heatmap: prediction differs from predict's")
        top = max(expected["probabilities"], key=expected["probabilities"].get)
        heatmap = answer.get("heatmap", {})
        checks.check(heatmap.get("finding") == top and heatmap.get("method") == "grad-rollout",
                     f"heatmap: {heatmap.get('finding')} / {heatmap.get('method')}, expected {top}")
        served = np.asarray(Image.open(io.BytesIO(base64.b64decode(heatmap.get("png_base64", "")))).convert("RGB"))
        checks.check(len(written) == 1, f"predict --heatmap wrote {written}")
        reference = np.asarray(Image.open(os.path.join(out, written[0])).convert("RGB"))
        checks.check(served.shape == reference.shape and np.array_equal(served, reference),
                     "heatmap: the served overlay differs from predict --heatmap's")
        # &finding=NAME (the try-it page's choice): that label's map, the picture `explain --finding NAME` writes.
        least = min(expected["probabilities"], key=expected["probabilities"].get)
        status, _, body = request(server.port, "POST", f"/v1/predict?heatmap=gradcam&finding={least}", read(path),
                                  {"Content-Type": "image/png"})
        checks.check(status == 200, f"heatmap of {least}: status {status}: {body[:200]}")
        chosen = json.loads(body).get("heatmap", {}) if status == 200 else {}
        checks.check(chosen.get("finding") == least and chosen.get("method") == "gradcam",
                     f"heatmap of a chosen finding: {chosen.get('finding')} / {chosen.get('method')}, expected {least}")
        explained = os.path.join(root, "explained")
        subprocess.run([VITPIPE, "explain", "--model", model, "--method", "gradcam", "--finding", least, "--out",
                        explained, path], check=True, capture_output=True)
        drawn = [f for f in os.listdir(explained) if f.endswith(".png")]
        checks.check(len(drawn) == 1, f"explain --finding wrote {drawn}")
        if chosen and len(drawn) == 1:
            served = np.asarray(Image.open(io.BytesIO(base64.b64decode(chosen["png_base64"]))).convert("RGB"))
            reference = np.asarray(Image.open(os.path.join(explained, drawn[0])).convert("RGB"))
            checks.check(served.shape == reference.shape and np.array_equal(served, reference),
                         "heatmap of a chosen finding: the served overlay differs from explain --finding's")
    checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


def case_stow(root, checks):
    """STOW-RS: each instance listed with its predictions (private (0009,1001) of creator VITPIPE), no RetrieveURL;
    an undecodable instance goes to the Failed SOP Sequence and the answer is 202."""
    import pydicom
    model = make_model(root)
    images = make_images(root)
    dicoms = [p for p in images if p.endswith(".dcm")]
    expected = predict_lines(model, dicoms)
    with Server(model) as server:
        ctype, body = related_dicom([read(p) for p in dicoms])
        status, headers, answer = request(server.port, "POST", "/dicomweb/studies", body, {"Content-Type": ctype})
        checks.check(status == 200, f"STOW: status {status}: {answer[:300]}")
        checks.check(headers.get("content-type", "").startswith("application/dicom+json"), "STOW: content type")
        response = json.loads(answer)
        items = response.get("00081199", {}).get("Value", [])
        checks.check(len(items) == len(dicoms) and "00081198" not in response, f"STOW: {len(items)} referenced")
        checks.check("00081190" not in response and all("00081190" not in i for i in items), "STOW: a RetrieveURL")
        dataset = pydicom.Dataset.from_json(response)  # the answer is valid DICOM JSON
        checks.check(len(dataset.ReferencedSOPSequence) == len(dicoms), "STOW: pydicom reads the answer")
        for item, path in zip(items, dicoms):
            ds = pydicom.dcmread(path)
            checks.check(item["00081155"]["Value"] == [ds.SOPInstanceUID], f"STOW {path}: SOP instance UID")
            checks.check(item["00081150"]["Value"] == [ds.SOPClassUID], f"STOW {path}: SOP class UID")
            checks.check(item["00090010"]["Value"] == ["VITPIPE"], f"STOW {path}: private creator")
            prediction = json.loads(item["00091001"]["Value"][0])
            checks.check(same_prediction(prediction, expected[path]), f"STOW {path}: predictions differ")
        ctype, body = related_dicom([read(dicoms[0]), b"\0" * 128 + b"DICM" + b"\x02\x00" * 8])
        status, _, answer = request(server.port, "POST", "/dicomweb/studies", body, {"Content-Type": ctype})
        response = json.loads(answer)
        checks.check(status == 202, f"STOW with a bad instance: {status}")
        checks.check(len(response.get("00081199", {}).get("Value", [])) == 1 and
                     len(response.get("00081198", {}).get("Value", [])) == 1, f"STOW partial: {answer[:300]}")
    checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


def case_sigterm(root, checks):
    """SIGTERM while requests are in flight: each gets its answer, then the server exits 0."""
    model = make_model(root)
    images = make_images(root)[:2]
    expected = predict_lines(model, images)
    server = Server(model, "--max-batch", "4", "--max-delay-ms", "200")
    with server:
        def run(i):
            path = images[i % 2]
            return path, *request(server.port, "POST", "/v1/predict", read(path), {"Content-Type": "image/png"})

        with ThreadPoolExecutor(max_workers=6) as pool:
            futures = [pool.submit(run, i) for i in range(6)]
            time.sleep(0.1)  # the requests are in: waiting up to 200 ms to batch
            server.stop()
            results = [f.result() for f in futures]
        for path, status, _, body in results:
            checks.check(status == 200 and same_prediction(json.loads(body), expected[path]),
                         f"in flight at SIGTERM: {status} {body[:120]}")
        checks.check("SIGTERM: finishing the requests in flight" in server.output(), "SIGTERM not logged")
    checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


CASES = {"load": case_load, "overload": case_overload, "bad-requests": case_bad_requests, "token": case_token,
         "heatmap": case_heatmap, "stow": case_stow, "sigterm": case_sigterm}


if __name__ == "__main__":
    run_case(CASES)
