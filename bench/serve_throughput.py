#!/usr/bin/env python3
"""`vitpipe serve` against `vitpipe predict` on the same images and model, in one run (these machines are shared and
noisy: compare within a run, not across runs).

1. predict's batch throughput: `vitpipe predict --batch-size B` over N images, minus the time of a 1-image run (model
   loading, the same in both).
2. serve at saturation: C clients each sending one image per request, back to back, for --seconds; answers/s.
3. latency at fixed request rates (open loop: requests start on a schedule whatever the answers do): p50 and p99 at
   25%, 50% and 75% of the saturated rate.

    bench/serve_throughput.py --vitpipe build/vitpipe [--model DIR | --preset vit-tiny --image-size 224]
        [--images DIR] [--count 512] [--batch 16] [--clients 32] [--seconds 20] [--threads 2]
"""

import argparse
import http.client
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/predict", body=body, headers={"Content-Type": "image/png"})
    response = conn.getresponse()
    response.read()
    if own:
        conn.close()
    return response.status


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vitpipe", default="build/vitpipe")
    parser.add_argument("--model", help="model directory (default: a fresh --preset model from vitpipe init)")
    parser.add_argument("--preset", default="vit-tiny")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--images", default="data/chestxray14-sample/images")
    parser.add_argument("--count", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="serve-bench-")
    model = args.model
    if not model:
        model = os.path.join(work, "model")
        subprocess.run([args.vitpipe, "init", "--preset", args.preset, "--image-size", str(args.image_size),
                        "--out", model], check=True, capture_output=True)
    files = sorted(os.path.join(args.images, f) for f in os.listdir(args.images) if f.endswith(".png"))
    files = (files * (args.count // max(1, len(files)) + 1))[: args.count]
    bodies = [open(f, "rb").read() for f in files]
    info = json.loads(subprocess.run([args.vitpipe, "info", "--json"], capture_output=True, text=True).stdout or "{}")
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; vitpipe kernels: {info.get('cpu_kernels', '?')}")
    print(f"model: {model} ({args.preset if not args.model else 'given'}), {len(files)} images from {args.images}, "
          f"batch {args.batch}, {args.threads} threads")

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))

    def timed_predict(paths):
        start = time.perf_counter()
        subprocess.run([args.vitpipe, "predict", "--model", model, "--threads", str(args.threads), "--batch-size",
                        str(args.batch), *paths], check=True, capture_output=True, env=env)
        return time.perf_counter() - start

    startup = min(timed_predict(files[:1]) for _ in range(2))
    whole = timed_predict(files)
    predict_rate = len(files) / (whole - startup)
    print(f"predict: {len(files)} images in {whole - startup:.2f} s after {startup:.2f} s of loading: "
          f"{predict_rate:.1f} images/s")

    port = free_port()
    log = open(os.path.join(work, "serve.log"), "w")
    server = subprocess.Popen([args.vitpipe, "serve", "--model", model, "--port", str(port), "--threads",
                               str(args.threads), "--max-batch", str(args.batch), "--max-delay-ms", "5",
                               "--max-queue", str(4 * args.clients)], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)

        # Saturation: each client keeps one request in flight, on a kept-alive connection.
        done = []
        stop_at = time.perf_counter() + args.seconds
        lock = threading.Lock()

        def client(index):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            count, i = 0, index
            while time.perf_counter() < stop_at:
                status = post(port, bodies[i % len(bodies)], conn)
                count += status == 200
                i += args.clients
            conn.close()
            with lock:
                done.append(count)

        start = time.perf_counter()
        threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        serve_rate = sum(done) / (time.perf_counter() - start)
        print(f"serve at saturation ({args.clients} clients, one image per request): {serve_rate:.1f} images/s = "
              f"{serve_rate / predict_rate:.2f} x predict's batch throughput")

        # Latency at fixed rates (open loop).
        for fraction in (0.25, 0.5, 0.75):
            rate = fraction * serve_rate
            latencies = []
            workers = []
            begin = time.perf_counter()
            n = int(rate * min(args.seconds, 15))

            def one(k):
                t0 = time.perf_counter()
                status = post(port, bodies[k % len(bodies)])
                with lock:
                    latencies.append((time.perf_counter() - t0, status))

            for k in range(n):
                delay = begin + k / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                w = threading.Thread(target=one, args=(k,))
                w.start()
                workers.append(w)
            for w in workers:
                w.join()
            ok = sorted(l for l, s in latencies if s == 200)
            p50 = statistics.median(ok) * 1000
            p99 = ok[min(len(ok) - 1, int(0.99 * len(ok)))] * 1000
            print(f"  at {rate:6.1f} requests/s ({fraction:.0%} of saturation): p50 {p50:6.1f} ms, p99 {p99:6.1f} ms "
                  f"({len(ok)}/{n} answered 200)")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        log.close()


if __name__ == "__main__":
    main()
