"""`vitpipe serve`'s page at / in a real headless Chromium (devtools_pipe.py), offline: a tiny ViT is fine-tuned for
two steps on the bundled NIH ChestX-ray14 sample (so it has a model card and val-chosen thresholds.json), served,
and the page is loaded; real NIH images (a 64 px sample image, a full-size 1024 px original, and the same sample image
as a 16-bit DICOM) are chosen in its file input. For each, the probabilities the page shows (its printed digits and
the value it holds, to 1e-6: serve batches images, and at AVX2 the kernels' sums depend on the batch) must equal
`vitpipe predict`'s for the same file, sorted most probable first; the
operating-point flags must be those of the run's thresholds.json; the chosen finding's heatmap must appear. Then with
--token-file: without the token the page shows the API's 401 as text; with the token pasted it works, and the token
is in sessionStorage only. Throughout: no console error, no request to any other origin. `chromium --dump-dom` shows
the card's summary and the "not a medical device" line. A model without a card or thresholds says "no operating
point". The same image dropped on the page gives the same; a file that is not an image shows the API's 400 as text;
the file chooser takes keyboard focus. Skipped (77) without chromium.

    VITPIPE_TRY_PAGE_SCREENSHOT=FILE keeps the page's screenshot (docs/images/try-page.png is made this way)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(__file__))
from devtools_pipe import Browser, find_chromium  # noqa: E402
from serve_common import SOURCE, VITPIPE, Checks, Server, predict_lines, temporary_root, write_dicom  # noqa: E402

SAMPLE = os.path.join(SOURCE, "data", "chestxray14-sample")


def run(*args):
    return subprocess.run([VITPIPE, *args], check=True, capture_output=True, text=True, timeout=300)


def page_rows(browser, name):
    """The result table of file `name` as the page shows it: [{finding, text, value, youden, sensitivity_90}]."""
    return browser.evaluate(f"""(() => {{
      const view = [...document.querySelectorAll('article.result')].find(a => a.dataset.file === {json.dumps(name)});
      return [...view.querySelectorAll('tbody tr')].map(tr => ({{
        finding: tr.dataset.finding, value: tr.dataset.probability,
        text: tr.querySelector('td.probability').textContent,
        youden: tr.children[2].textContent, sensitivity_90: tr.children[3].textContent}}));
    }})()""")


def expected_flag(p, threshold):
    if threshold is None:
        return "no operating point"
    return f"flagged ≥ {threshold:.4f}" if p >= threshold else f"below {threshold:.4f}"


def check_results(browser, checks, images, expected, thresholds, what):
    for path in images:
        name = os.path.basename(path)
        done = f"document.querySelector('article.result[data-file=\"{name}\"][data-state]')"
        browser.wait_for(done, 120)
        state = browser.evaluate(f"{done}.dataset.state")
        error = browser.evaluate(f"{done}.querySelector('.error').textContent")
        if not checks.check(state == "done", f"{what} {name}: the page shows a result ({state}: {error})"):
            continue
        rows = page_rows(browser, name)
        want = expected[path]["probabilities"]
        order = sorted(want, key=lambda k: -want[k])
        checks.check([r["finding"] for r in rows] == order, f"{what} {name}: findings sorted most probable first")
        wrong = [(r["finding"], r["text"], want.get(r["finding"])) for r in rows
                 if r["finding"] not in want or r["text"] != f"{want[r['finding']]:.4f}" or
                 abs(float(r["value"]) - want[r["finding"]]) > 1e-6]
        checks.check(len(rows) == len(want) and not wrong,
                     f"{what} {name}: the page's probabilities = vitpipe predict's (4 printed digits, value to 1e-6)",
                     f"{wrong[:3]}")
        flags = [(r["finding"], r["youden"], r["sensitivity_90"]) for r in rows]
        if thresholds:
            t = thresholds["findings"]
            want_flags = [(f, expected_flag(want[f], t.get(f, {}).get("youden")),
                           expected_flag(want[f], t.get(f, {}).get("sensitivity_90"))) for f in order]
        else:
            want_flags = [(f, "no operating point", "no operating point") for f in order]
        checks.check(flags == want_flags, f"{what} {name}: the operating-point flags are thresholds.json's",
                     f"{[x for x in zip(flags, want_flags) if x[0] != x[1]][:2]}")
        top = order[0]
        heatmap = f"{done}.querySelector('img.heatmap')"
        browser.wait_for(f"!{heatmap}.hidden && {heatmap}.complete && {heatmap}.naturalWidth > 0", 120)
        checks.check(top in browser.evaluate(f"{heatmap}.alt"),
                     f"{what} {name}: the heatmap of the most probable finding ({top}) is drawn")


def main():
    checks = Checks()
    root, cleanup = temporary_root()
    try:
        browser_path = find_chromium()
        if not browser_path:
            print("SKIP: chromium is not installed (scripts/setup.sh --tests installs it)")
            return 77
        # A model with a card and thresholds: two training steps of vit-micro, evaluated on val and test.
        initial = os.path.join(root, "initial")
        run("init", "--preset", "vit-micro", "--labels", "chestxray14", "--seed", "0", "--out", initial)
        run_dir = os.path.join(root, "vit-micro-nih-sample")  # the card's title
        run("train", "--model", initial, "--data", f"chestxray14:{SAMPLE}", "--output-dir", run_dir, "--max-steps",
            "2", "--batch-size", "16", "--lr", "5e-4", "--seed", "0", "--test", "--threads", "2")
        model = os.path.join(run_dir, "model")
        with open(os.path.join(run_dir, "thresholds.json")) as f:
            thresholds = json.load(f)

        sample = os.path.join(SAMPLE, "images", "00000013_005.png")
        full_size = os.path.join(SAMPLE, "full-size", "00000013_003.png")
        pixels = np.asarray(Image.open(sample).convert("L"), dtype=np.uint16) * 16  # 12-bit, as a detector writes
        dicom = write_dicom(os.path.join(root, "00000013_005.dcm"), pixels, 16, 12)
        images = [full_size, sample, dicom]
        expected = predict_lines(model, images, "--threads", "2")

        with Server(model) as server, Browser() as browser:
            url = f"http://127.0.0.1:{server.port}/"
            # --dump-dom: the page as Chromium renders it once its script ran (the card fetched from /v1/model).
            dom = subprocess.run([browser_path, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                  f"--user-data-dir={os.path.join(root, 'dump-profile')}",
                                  "--proxy-server=http://127.0.0.1:9",
                                  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                                  "--virtual-time-budget=10000", "--dump-dom", url],
                                 capture_output=True, text=True, timeout=120).stdout
            checks.check("not a medical device" in dom and "Model card" in dom,
                         "--dump-dom: the page says the model is not a medical device, beside its card")
            with open(os.path.join(model, "README.md")) as f:
                title = next(line[2:].strip() for line in f if line.startswith("# "))
            checks.check(title in dom, f"--dump-dom: the card's title ({title}) is on the page")
            checks.check("chosen on the val split" in dom, "--dump-dom: the operating points are said to be val's")

            browser.open(url)
            browser.wait_for("document.getElementById('model-line').textContent.includes('labels')")
            browser.set_files("#files", images)
            check_results(browser, checks, images, expected, thresholds, "plain")
            # Another finding chosen for the heatmap: its map is drawn.
            name = os.path.basename(sample)
            view = f"document.querySelector('article.result[data-file=\"{name}\"]')"
            least = min(expected[sample]["probabilities"], key=expected[sample]["probabilities"].get)
            browser.evaluate(f"(() => {{ const s = {view}.querySelector('select.finding'); s.value = "
                             f"{json.dumps(least)}; s.dispatchEvent(new Event('change')); }})()")
            browser.wait_for(f"{view}.querySelector('img.heatmap').alt.includes({json.dumps(least)})", 120)
            browser.wait_for(f"{view}.querySelector('img.heatmap').complete", 30)
            checks.check(True, f"the heatmap of a chosen finding ({least}) replaces the first")
            # Dropped instead of chosen: the same answer.
            with open(sample, "rb") as f:
                sample_bytes = list(f.read())
            browser.evaluate("document.getElementById('results').replaceChildren()")
            browser.evaluate(f"""(() => {{
              const data = new DataTransfer();
              data.items.add(new File([new Uint8Array({json.dumps(sample_bytes)})], {json.dumps(name)},
                                      {{type: 'image/png'}}));
              document.getElementById('drop').dispatchEvent(
                  new DragEvent('drop', {{dataTransfer: data, bubbles: true, cancelable: true}}));
            }})()""")
            check_results(browser, checks, [sample], expected, thresholds, "dropped")
            # A file that is not an image: the API's 400, as its own sentence.
            notes = os.path.join(root, "notes.png")
            with open(notes, "w") as f:
                f.write("not an image at all\n")
            browser.set_files("#files", [notes])
            done = "document.querySelector('article.result[data-file=\"notes.png\"][data-state]')"
            browser.wait_for(done)
            shown = browser.evaluate(f"{done}.dataset.state + ': ' + {done}.querySelector('.error').textContent")
            checks.check(shown.startswith("error: The server answered 400: ") and "notes.png" not in shown[:7],
                         "a file that is not an image: the API's 400 shown as text", shown)
            # The file chooser is reachable by keyboard: a focusable input, not display:none.
            reachable = browser.evaluate("(() => { const i = document.getElementById('files'); i.focus(); "
                                         "return document.activeElement === i && i.tabIndex >= 0 && "
                                         "getComputedStyle(i).display !== 'none' && "
                                         "document.querySelector('label[for=files]') !== null; })()")
            checks.check(reachable, "the file chooser takes keyboard focus and has a label")
            browser.evaluate("document.getElementById('results').replaceChildren()")
            browser.set_files("#files", images)
            check_results(browser, checks, images, expected, thresholds, "again")
            shot = os.path.join(root, "try-page.png")
            browser.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
            browser.screenshot(shot, 1280, 1000)
            page = np.asarray(Image.open(shot).convert("L"), dtype=float)
            checks.check(page.std() > 20, "the screenshot is not blank", f"std {page.std():.1f}")
            if os.environ.get("VITPIPE_TRY_PAGE_SCREENSHOT"):
                shutil.copy(shot, os.environ["VITPIPE_TRY_PAGE_SCREENSHOT"])
            origin = url.rstrip("/")
            foreign = [u for u in browser.requests if not (u.startswith(origin + "/") or u.startswith("data:"))]
            checks.check(not foreign, "the page requests nothing from any other origin", f"{foreign[:3]}")
            logged = browser.console + [line for line in browser.log if not line.startswith("verbose") and
                                        "status of 400" not in line]  # the refused non-image
            checks.check(not logged, "no console message or log entry (but Chromium's verbose advice)", f"{logged[:3]}")

        # With a token: the API's 401 shown as text, then the token pasted into the page.
        token_file = os.path.join(root, "token")
        with open(token_file, "w") as f:
            f.write("s3cret-token-for-the-page\n")
        with Server(model, "--token-file", token_file) as server, Browser() as browser:
            browser.open(f"http://127.0.0.1:{server.port}/")
            browser.wait_for("!document.getElementById('page-error').hidden")
            text = browser.evaluate("document.getElementById('page-error').textContent")
            checks.check("401" in text and "bearer token" in text, "without the token the page shows the API's 401",
                         text)
            browser.set_files("#files", [sample])
            done = f"document.querySelector('article.result[data-file=\"{os.path.basename(sample)}\"][data-state]')"
            browser.wait_for(done)
            shown = browser.evaluate(f"{done}.dataset.state + ': ' + {done}.querySelector('.error').textContent")
            checks.check(shown.startswith("error: ") and "401" in shown and "bearer token" in shown,
                         "an upload without the token: the API's error as readable text", shown)
            browser.evaluate("(() => { document.getElementById('token').value = 's3cret-token-for-the-page'; "
                             "document.getElementById('token-form').requestSubmit(); })()")
            browser.wait_for("document.getElementById('model-line').textContent.includes('labels')")
            browser.evaluate("document.getElementById('results').replaceChildren()")
            browser.set_files("#files", [sample])
            check_results(browser, checks, [sample], expected, thresholds, "token")
            stored = browser.evaluate("[sessionStorage.getItem('vitpipe-token'), localStorage.length, "
                                      "document.cookie]")
            checks.check(stored == ["s3cret-token-for-the-page", 0, ""],
                         "the token is kept in sessionStorage only (no localStorage, no cookie)", f"{stored}")
            unexpected = [line for line in browser.console + browser.log if "401" not in line and
                          not line.startswith("verbose")]
            checks.check(not unexpected, "no console message but the 401s", f"{unexpected[:3]}")

        # No card, no thresholds: an initial model says so.
        with Server(initial) as server, Browser() as browser:
            browser.open(f"http://127.0.0.1:{server.port}/")
            browser.wait_for("document.getElementById('no-operating-point')")
            browser.set_files("#files", [sample])
            check_results(browser, checks, [sample], predict_lines(initial, [sample], "--threads", "2"), None,
                          "no card")
            checks.check("no model card" in browser.evaluate("document.getElementById('card-body').textContent"),
                         "a model without README.md: the page says it has no model card")
    finally:
        cleanup()
    checks.finish()


if __name__ == "__main__":
    sys.exit(main())
