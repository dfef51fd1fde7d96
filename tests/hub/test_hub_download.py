"""`vitpipe download` and resolve_model_reference against a Hub emulator on loopback (see hub_emulator.py).

Env: VITPIPE (the binary), HUB_RESOLVE_MODEL (a driver for resolve_model_reference). No network: every address is
127.0.0.1, and proxies are switched off for the child processes.
"""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hub_emulator import TLS_CERTIFICATE, HubEmulator, git_blob_sha1  # noqa: E402

VITPIPE = os.environ.get("VITPIPE", "vitpipe")
RESOLVE = os.environ.get("HUB_RESOLVE_MODEL", "hub_resolve_model")
TOKEN = "hf_test_token_4f6a2c"

_CACHED_NO_EXIST = object()


def try_to_load_from_cache(cache_dir, repo_id, filename, revision=None):
    """huggingface_hub.try_to_load_from_cache (file_download.py), line for line: what Python tools will do with the
    cache vitpipe writes."""
    if revision is None:
        revision = "main"
    object_id = repo_id.replace("/", "--")
    repo_cache = os.path.join(cache_dir, f"models--{object_id}")
    if not os.path.isdir(repo_cache):
        return None
    refs_dir = os.path.join(repo_cache, "refs")
    snapshots_dir = os.path.join(repo_cache, "snapshots")
    no_exist_dir = os.path.join(repo_cache, ".no_exist")
    if os.path.isdir(refs_dir):
        revision_file = os.path.join(refs_dir, revision)
        if os.path.isfile(revision_file):
            with open(revision_file) as f:
                revision = f.read()
    if os.path.isfile(os.path.join(no_exist_dir, revision, filename)):
        return _CACHED_NO_EXIST
    if not os.path.exists(snapshots_dir):
        return None
    cached_shas = os.listdir(snapshots_dir)
    if revision not in cached_shas:
        return None
    cached_file = os.path.join(snapshots_dir, revision, filename)
    return cached_file if os.path.isfile(cached_file) else None


def random_bytes(size, seed):
    return random.Random(seed).randbytes(size)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class HubDownloadTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="vitpipe-hub-")
        self.cache = os.path.join(self.tmp.name, "cache")
        self.home = os.path.join(self.tmp.name, "hf_home")
        os.makedirs(self.home)
        self.hub = HubEmulator()
        self.model = self.hub.add_repo("acme/vit-tiny-xray")
        self.config = json.dumps({"model_type": "vit", "hidden_size": 192}).encode()
        self.preprocessor = json.dumps({"image_mean": [0.5, 0.5, 0.5], "size": 224}).encode()
        self.weights = random_bytes(1_500_000, 1)
        self.commit = self.model.commit({
            "config.json": self.config, "preprocessor_config.json": self.preprocessor,
            "model.safetensors": self.weights, "pytorch_model.bin": random_bytes(2000, 2),
            "README.md": b"# a model\n", ".gitattributes": b"*.bin filter=lfs\n"})
        self.hub.start()

    def tearDown(self):
        self.hub.stop()
        self.tmp.cleanup()

    # --- helpers ---
    def env(self, **extra):
        # Nothing from the outside: no Hub settings, no proxies, no CA bundle overrides (the system store applies).
        env = {k: v for k, v in os.environ.items()
               if not k.upper().startswith(("HF_", "HUGGING", "TRANSFORMERS_")) and "PROXY" not in k.upper()
               and k not in ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE")}
        env.update(HF_ENDPOINT=self.hub.endpoint, HF_HUB_CACHE=self.cache, HF_HOME=self.home,
                   no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
        env.update({k: v for k, v in extra.items() if v is not None})
        return env

    def run_cli(self, args, expect_rc=0, program=None, **env):
        result = subprocess.run([program or VITPIPE] + args, env=self.env(**env), capture_output=True, text=True,
                                timeout=90)
        if result.returncode != expect_rc:
            self.fail(f"{args} exited {result.returncode}, expected {expect_rc}\nstdout: {result.stdout}\n"
                      f"stderr: {result.stderr}")
        return result

    def download(self, repo="acme/vit-tiny-xray", *args, expect_rc=0, **env):
        return self.run_cli(["download", repo, *args], expect_rc=expect_rc, **env)

    def repo_folder(self, repo="acme/vit-tiny-xray"):
        return os.path.join(self.cache, "models--" + repo.replace("/", "--"))

    def snapshot(self, commit, repo="acme/vit-tiny-xray"):
        return os.path.join(self.repo_folder(repo), "snapshots", commit)

    def storage_gets(self, data):
        return [r for r in self.hub.storage_log if r["path"].split("?")[0].endswith(sha256(data))]

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def assert_no_partial_files(self, repo="acme/vit-tiny-xray"):
        blobs = os.path.join(self.repo_folder(repo), "blobs")
        leftovers = [n for n in os.listdir(blobs) if ".incomplete" in n or ".tmp" in n] if os.path.isdir(blobs) else []
        self.assertEqual(leftovers, [])

    # --- the cases ---
    def test_first_download_then_offline_reuse(self):
        out = self.download()
        snapshot = self.snapshot(self.commit)
        self.assertEqual(out.stdout.strip(), snapshot)
        self.assertEqual(self.read(os.path.join(snapshot, "config.json")), self.config)
        self.assertEqual(self.read(os.path.join(snapshot, "preprocessor_config.json")), self.preprocessor)
        self.assertEqual(self.read(os.path.join(snapshot, "model.safetensors")), self.weights)
        # Only what the model needs: no pytorch_model.bin next to model.safetensors, no README.
        self.assertEqual(sorted(os.listdir(snapshot)), ["config.json", "model.safetensors",
                                                        "preprocessor_config.json"])
        resolved = [r["path"] for r in self.hub.hub_log if "/resolve/" in r["path"]]
        self.assertFalse(any("pytorch_model.bin" in p or "README" in p for p in resolved), resolved)
        self.assertEqual(len(self.storage_gets(self.weights)), 1)
        self.assert_no_partial_files()

        # Offline, and with the Hub gone: the same directory, from the cache alone.
        self.hub.stop()
        out = self.download(HF_HUB_OFFLINE="1")
        self.assertEqual(out.stdout.strip(), snapshot)
        out = self.run_cli(["acme/vit-tiny-xray"], program=RESOLVE)
        self.assertEqual(out.stdout.strip(), snapshot)
        out = self.run_cli(["acme/vit-tiny-xray"], program=RESOLVE, TRANSFORMERS_OFFLINE="1")
        self.assertEqual(out.stdout.strip(), snapshot)

    def test_cache_layout_matches_huggingface_hub(self):
        self.download()
        folder = self.repo_folder()
        with open(os.path.join(folder, "refs", "main")) as f:
            self.assertEqual(f.read(), self.commit)  # no newline, as huggingface_hub writes it
        expected_etags = {"config.json": git_blob_sha1(self.config),  # W/"..." normalised
                          "preprocessor_config.json": git_blob_sha1(self.preprocessor),
                          "model.safetensors": sha256(self.weights)}  # X-Linked-Etag, not the pointer's ETag
        for name, etag in expected_etags.items():
            pointer = os.path.join(folder, "snapshots", self.commit, name)
            self.assertTrue(os.path.islink(pointer), pointer)
            self.assertEqual(os.readlink(pointer), os.path.join("..", "..", "blobs", etag))
            self.assertTrue(os.path.isfile(os.path.join(folder, "blobs", etag)))
            found = try_to_load_from_cache(self.cache, "acme/vit-tiny-xray", name)
            self.assertEqual(found, pointer)
            found = try_to_load_from_cache(self.cache, "acme/vit-tiny-xray", name, revision=self.commit)
            self.assertEqual(found, pointer)
        self.assertEqual(sorted(os.listdir(os.path.join(folder, "blobs"))), sorted(expected_etags.values()))
        self.assertIsNone(try_to_load_from_cache(self.cache, "acme/vit-tiny-xray", "pytorch_model.bin"))
        locks = os.path.join(self.cache, ".locks", "models--acme--vit-tiny-xray")
        self.assertIn(sha256(self.weights) + ".lock", os.listdir(locks))

    def test_resume_after_interruption(self):
        self.hub.drops[sha256(self.weights)] = 1  # the first transfer stops halfway
        out = self.download()
        self.assertIn("interrupted", out.stderr)
        gets = self.storage_gets(self.weights)
        self.assertEqual(len(gets), 2)
        self.assertNotIn("range", gets[0]["headers"])
        self.assertEqual(gets[1]["headers"].get("range"), "bytes=%d-" % (len(self.weights) // 2))
        self.assertEqual(self.read(os.path.join(self.snapshot(self.commit), "model.safetensors")), self.weights)
        self.assert_no_partial_files()

    def test_resume_after_killed_process(self):
        self.hub.throttle_bytes_per_second = 300_000
        incomplete = os.path.join(self.repo_folder(), "blobs", sha256(self.weights) + ".incomplete")
        process = subprocess.Popen([VITPIPE, "download", "acme/vit-tiny-xray"], env=self.env(),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 30
        while time.time() < deadline and not (os.path.exists(incomplete) and os.path.getsize(incomplete) > 200_000):
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.communicate()
        partial = os.path.getsize(incomplete)
        self.assertGreater(partial, 0)
        self.assertLess(partial, len(self.weights))
        self.assertFalse(os.path.exists(os.path.join(self.snapshot(self.commit), "model.safetensors")))
        self.assertFalse(os.path.exists(os.path.join(self.repo_folder(), "refs", "main")))

        self.hub.throttle_bytes_per_second = None
        out = self.download()
        self.assertIn("resuming model.safetensors", out.stderr)
        self.assertEqual(self.storage_gets(self.weights)[-1]["headers"].get("range"), "bytes=%d-" % partial)
        self.assertEqual(self.read(os.path.join(self.snapshot(self.commit), "model.safetensors")), self.weights)
        self.assert_no_partial_files()

    def test_storage_unavailable_then_retried(self):
        self.hub.unavailable[sha256(self.weights)] = 1
        out = self.download()
        self.assertIn("HTTP 503", out.stderr)
        self.assertEqual(len(self.storage_gets(self.weights)), 2)
        self.assertEqual(self.read(os.path.join(self.snapshot(self.commit), "model.safetensors")), self.weights)

    def test_range_ignored_by_server(self):
        # A server that answers a Range request with the whole file: the partial file must be replaced, not
        # appended to.
        self.hub.drops[sha256(self.weights)] = 1
        self.hub.ignore_range = True
        self.download()
        self.assertEqual(len(self.storage_gets(self.weights)), 2)
        self.assertEqual(self.read(os.path.join(self.snapshot(self.commit), "model.safetensors")), self.weights)

    def test_corrupted_blob_refused(self):
        self.hub.corrupt.add(sha256(self.weights))
        out = self.download(expect_rc=1)
        self.assertIn("corrupted", out.stderr)
        self.assertIn("sha256", out.stderr)
        self.assertEqual(out.stdout, "")
        blobs = os.path.join(self.repo_folder(), "blobs")
        self.assertNotIn(sha256(self.weights), os.listdir(blobs))
        self.assert_no_partial_files()
        self.assertFalse(os.path.lexists(os.path.join(self.snapshot(self.commit), "model.safetensors")))
        self.assertFalse(os.path.exists(os.path.join(self.repo_folder(), "refs", "main")))
        # Offline, the half-fetched model is not mistaken for a cached one.
        out = self.download(expect_rc=1, HF_HUB_OFFLINE="1")
        self.assertIn("not in the Hugging Face cache", out.stderr)

        self.hub.corrupt.clear()
        self.download()
        self.assertEqual(self.read(os.path.join(self.snapshot(self.commit), "model.safetensors")), self.weights)

    def test_token_sent_to_hub_not_storage(self):
        private = self.hub.add_repo("acme/private-xray", private=True)
        weights = random_bytes(300_000, 3)
        commit = private.commit({"config.json": self.config, "model.safetensors": weights})
        out = self.download("acme/private-xray", HF_TOKEN=TOKEN)
        self.assertEqual(self.read(os.path.join(out.stdout.strip(), "model.safetensors")), weights)
        self.assertEqual(out.stdout.strip(), self.snapshot(commit, "acme/private-xray"))
        hub_requests = [r for r in self.hub.hub_log if "private-xray" in r["path"]]
        self.assertTrue(hub_requests)
        for request in hub_requests:
            self.assertEqual(request["headers"].get("authorization"), "Bearer " + TOKEN, request["path"])
        storage_requests = self.storage_gets(weights)
        self.assertEqual(len(storage_requests), 1)
        self.assertNotIn("authorization", storage_requests[0]["headers"])
        self.assertNotIn(TOKEN, out.stdout + out.stderr)

    def test_token_not_sent_to_same_host_storage(self):
        # A mirror whose LFS redirects stay on its own host and port: the signed storage URL must get no token
        # (the emulator answers 400 when it does), while every api/ and resolve/ request carries it.
        self.hub.same_host_storage = True
        private = self.hub.add_repo("acme/private-xray", private=True)
        weights = random_bytes(300_000, 3)
        commit = private.commit({"config.json": self.config, "model.safetensors": weights})
        out = self.download("acme/private-xray", HF_TOKEN=TOKEN)
        self.assertEqual(out.stdout.strip(), self.snapshot(commit, "acme/private-xray"))
        self.assertEqual(self.read(os.path.join(out.stdout.strip(), "model.safetensors")), weights)
        storage_requests = self.storage_gets(weights)
        self.assertEqual(len(storage_requests), 1)
        self.assertTrue(storage_requests[0]["path"].startswith("/storage/lfs/"), storage_requests[0]["path"])
        self.assertNotIn("authorization", storage_requests[0]["headers"])
        hub_requests = [r for r in self.hub.hub_log if "private-xray" in r["path"]]
        self.assertTrue(any("/resolve/" in r["path"] for r in hub_requests))
        self.assertTrue(any(r["path"].startswith("/api/") for r in hub_requests))
        for request in hub_requests:
            self.assertEqual(request["headers"].get("authorization"), "Bearer " + TOKEN, request["path"])

    def test_token_from_hf_home_file(self):
        private = self.hub.add_repo("acme/private-xray", private=True)
        private.commit({"config.json": self.config, "model.safetensors": random_bytes(1000, 4)})
        with open(os.path.join(self.home, "token"), "w") as f:
            f.write(TOKEN + "\n")
        self.download("acme/private-xray")
        self.assertTrue(all(r["headers"].get("authorization") == "Bearer " + TOKEN for r in self.hub.hub_log))

    def test_missing_or_wrong_token(self):
        private = self.hub.add_repo("acme/private-xray", private=True)
        private.commit({"config.json": self.config, "model.safetensors": random_bytes(1000, 4)})
        out = self.download("acme/private-xray", expect_rc=1)
        self.assertIn("repository 'acme/private-xray' was not found", out.stderr)
        self.assertIn("HF_TOKEN", out.stderr)
        out = self.download("acme/private-xray", expect_rc=1, HF_TOKEN="hf_wrong_secret_99")
        self.assertIn("rejected the token from HF_TOKEN", out.stderr)
        self.assertNotIn("hf_wrong_secret_99", out.stderr + out.stdout)
        self.assertFalse(os.path.exists(self.repo_folder("acme/private-xray")))

    def test_gated_repo(self):
        gated = self.hub.add_repo("acme/gated-xray", gated=True)
        gated.commit({"config.json": self.config, "model.safetensors": random_bytes(1000, 5)})
        out = self.download("acme/gated-xray", expect_rc=1)
        self.assertIn("is gated", out.stderr)
        self.assertIn("Set HF_TOKEN", out.stderr)
        self.hub.valid_tokens.add("hf_no_access_token")
        out = self.download("acme/gated-xray", expect_rc=1, HF_TOKEN="hf_no_access_token")
        self.assertIn("is gated", out.stderr)
        self.assertIn("has no access", out.stderr)
        self.download("acme/gated-xray", HF_TOKEN=TOKEN)

    def test_revision_pinning_by_branch_and_commit(self):
        old_config = json.dumps({"model_type": "vit", "hidden_size": 96}).encode()
        old_weights = random_bytes(200_000, 6)
        old = self.model.commit({"config.json": old_config, "model.safetensors": old_weights}, branch="v1")
        pr = self.model.commit({"config.json": b"{}", "model.safetensors": random_bytes(100, 7)}, branch="refs/pr/1")

        out = self.download("acme/vit-tiny-xray", "--revision", "v1")
        self.assertEqual(out.stdout.strip(), self.snapshot(old))
        self.assertEqual(self.read(os.path.join(self.snapshot(old), "config.json")), old_config)
        with open(os.path.join(self.repo_folder(), "refs", "v1")) as f:
            self.assertEqual(f.read(), old)
        self.assertFalse(os.path.exists(os.path.join(self.repo_folder(), "refs", "main")))
        self.assertEqual(try_to_load_from_cache(self.cache, "acme/vit-tiny-xray", "config.json", "v1"),
                         os.path.join(self.snapshot(old), "config.json"))

        # By commit: nothing written under refs/, and the files are those of that commit.
        out = self.download("acme/vit-tiny-xray", "--revision", self.commit)
        self.assertEqual(out.stdout.strip(), self.snapshot(self.commit))
        self.assertEqual(self.read(os.path.join(self.snapshot(self.commit), "config.json")), self.config)
        self.assertEqual(sorted(os.listdir(os.path.join(self.repo_folder(), "refs"))), ["v1"])
        self.assertTrue(any("/resolve/" + self.commit + "/" in r["path"] for r in self.hub.hub_log))

        # A branch name with slashes is URL-quoted and stored as nested refs, as huggingface_hub does.
        out = self.download("acme/vit-tiny-xray", "--revision", "refs/pr/1")
        self.assertEqual(out.stdout.strip(), self.snapshot(pr))
        self.assertTrue(any("/revision/refs%2Fpr%2F1" in r["path"] for r in self.hub.hub_log))
        with open(os.path.join(self.repo_folder(), "refs", "refs", "pr", "1")) as f:
            self.assertEqual(f.read(), pr)

        # Offline, each pin resolves to its own snapshot.
        self.hub.stop()
        for revision, commit in (("v1", old), (self.commit, self.commit), ("refs/pr/1", pr)):
            out = self.run_cli(["acme/vit-tiny-xray", "--revision", revision], program=RESOLVE, HF_HUB_OFFLINE="1")
            self.assertEqual(out.stdout.strip(), self.snapshot(commit))
        out = self.run_cli(["acme/vit-tiny-xray"], program=RESOLVE, expect_rc=1, HF_HUB_OFFLINE="1")
        self.assertIn("refs/main", out.stderr)

    def test_unknown_repo_revision_and_file(self):
        out = self.download("acme/no-such-model", expect_rc=1)
        self.assertIn("repository 'acme/no-such-model' was not found on " + self.hub.endpoint, out.stderr)
        out = self.download("acme/vit-tiny-xray", "--revision", "no-such-branch", expect_rc=1)
        self.assertIn("revision 'no-such-branch' does not exist in repository 'acme/vit-tiny-xray'", out.stderr)
        self.hub.hidden.add(("acme/vit-tiny-xray", "model.safetensors"))  # listed, but the resolve says 404
        out = self.download(expect_rc=1)
        self.assertIn("file 'model.safetensors' does not exist in repository 'acme/vit-tiny-xray'", out.stderr)
        empty = self.hub.add_repo("acme/not-a-model")
        empty.commit({"README.md": b"hi"})
        out = self.download("acme/not-a-model", expect_rc=1)
        self.assertIn("has no config.json", out.stderr)
        no_weights = self.hub.add_repo("acme/no-weights")
        no_weights.commit({"config.json": b"{}", "tf_model.h5": b"x"})
        out = self.download("acme/no-weights", expect_rc=1)
        self.assertIn("has no weights vitpipe can read", out.stderr)
        out = self.download("not a repo id!", expect_rc=1)
        self.assertIn("not a valid Hub repo id", out.stderr)

    def test_offline_with_empty_cache(self):
        for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            out = self.download(expect_rc=1, **{variable: "1"})
            message = out.stderr
            self.assertIn("model 'acme/vit-tiny-xray' (revision 'main') is not in the Hugging Face cache", message)
            self.assertIn(self.repo_folder(), message)  # what was looked for, where
            self.assertIn("`vitpipe download acme/vit-tiny-xray`", message)  # how to get it
            self.assertIn("huggingface-cli download acme/vit-tiny-xray", message)
            out = self.run_cli(["acme/vit-tiny-xray"], program=RESOLVE, expect_rc=1, **{variable: "1"})
            self.assertIn("not in the Hugging Face cache", out.stderr)
        self.assertEqual(self.hub.hub_log, [])  # not one request
        self.assertFalse(os.path.exists(self.cache))
        out = self.run_cli(["acme/vit-tiny-xray", "--no-download"], program=RESOLVE, expect_rc=1)
        self.assertIn("Downloading is disabled", out.stderr)
        self.assertEqual(self.hub.hub_log, [])

    def test_missing_optional_file_recorded(self):
        repo = self.hub.add_repo("acme/bare")
        commit = repo.commit({"config.json": self.config, "model.safetensors": random_bytes(5000, 8)})
        out = self.download("acme/bare")
        self.assertEqual(sorted(os.listdir(out.stdout.strip())), ["config.json", "model.safetensors"])
        self.assertTrue(os.path.isfile(os.path.join(self.repo_folder("acme/bare"), ".no_exist", commit,
                                                    "preprocessor_config.json")))
        self.assertIs(try_to_load_from_cache(self.cache, "acme/bare", "preprocessor_config.json"), _CACHED_NO_EXIST)
        out = self.download("acme/bare", HF_HUB_OFFLINE="1")
        self.assertEqual(out.stdout.strip(), self.snapshot(commit, "acme/bare"))

    def test_sharded_safetensors(self):
        repo = self.hub.add_repo("acme/sharded")
        shards = {"model-00001-of-00002.safetensors": random_bytes(70_000, 9),
                  "model-00002-of-00002.safetensors": random_bytes(50_000, 10)}
        index = {"metadata": {"total_size": 120_000},
                 "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                                "b.weight": "model-00002-of-00002.safetensors",
                                "c.weight": "model-00001-of-00002.safetensors"}}
        files = dict(shards, **{"config.json": self.config, "model.safetensors.index.json": json.dumps(index).encode(),
                                "pytorch_model-00001-of-00001.bin": b"unused"})
        commit = repo.commit(files)
        out = self.download("acme/sharded")
        snapshot = out.stdout.strip()
        self.assertEqual(snapshot, self.snapshot(commit, "acme/sharded"))
        for name, data in shards.items():
            self.assertEqual(self.read(os.path.join(snapshot, name)), data)
        self.assertFalse(os.path.exists(os.path.join(snapshot, "pytorch_model-00001-of-00001.bin")))
        no_exist = os.path.join(self.repo_folder("acme/sharded"), ".no_exist", commit)
        self.assertIn("model.safetensors", os.listdir(no_exist))
        # A shard lost from the cache makes the snapshot incomplete.
        os.unlink(os.path.join(snapshot, "model-00002-of-00002.safetensors"))
        out = self.download("acme/sharded", expect_rc=1, HF_HUB_OFFLINE="1")
        self.assertIn("lacks model-00002-of-00002.safetensors", out.stderr)

    def test_pytorch_bin_only(self):
        repo = self.hub.add_repo("acme/legacy-xray")
        weights = random_bytes(40_000, 11)
        commit = repo.commit({"config.json": self.config, "pytorch_model.bin": weights, "tf_model.h5": b"x"})
        out = self.download("acme/legacy-xray")
        self.assertEqual(sorted(os.listdir(out.stdout.strip())), ["config.json", "pytorch_model.bin"])
        no_exist = os.listdir(os.path.join(self.repo_folder("acme/legacy-xray"), ".no_exist", commit))
        self.assertEqual(sorted(no_exist), ["model.safetensors", "model.safetensors.index.json",
                                            "preprocessor_config.json"])

    def test_concurrent_downloads_share_one_transfer(self):
        self.hub.throttle_bytes_per_second = 3_000_000
        processes = [subprocess.Popen([VITPIPE, "download", "acme/vit-tiny-xray"], env=self.env(),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [p.communicate(timeout=90) + (p.returncode,) for p in processes]
        for stdout, stderr, rc in results:
            self.assertEqual(rc, 0, stderr)
            self.assertEqual(stdout.strip(), self.snapshot(self.commit))
        self.assertEqual(len(self.storage_gets(self.weights)), 1)  # the second process waited on the lock
        self.assertTrue(any("waiting for another process" in stderr for _, stderr, _ in results))
        self.assertEqual(self.read(os.path.join(self.snapshot(self.commit), "model.safetensors")), self.weights)
        self.assert_no_partial_files()

    def test_implicit_download_through_model_reference(self):
        out = self.run_cli(["acme/vit-tiny-xray"], program=RESOLVE)
        self.assertEqual(out.stdout.strip(), self.snapshot(self.commit))
        self.assertIn("not in the Hugging Face cache", out.stderr)
        self.assertEqual(self.read(os.path.join(self.snapshot(self.commit), "model.safetensors")), self.weights)
        requests = len(self.hub.hub_log)
        out = self.run_cli(["acme/vit-tiny-xray"], program=RESOLVE)  # cached now: no network at all
        self.assertEqual(out.stdout.strip(), self.snapshot(self.commit))
        self.assertEqual(len(self.hub.hub_log), requests)
        out = self.run_cli(["acme/no-such-model"], program=RESOLVE, expect_rc=1)
        self.assertIn("downloading it failed", out.stderr)
        self.assertIn("was not found", out.stderr)

    def test_adapter_repository(self):
        """A peft adapter repo (adapter_config.json + adapter_model.safetensors, no config.json) resolves as a model
        reference: both files fetched, then found in the cache offline."""
        adapter = self.hub.add_repo("acme/vit-tiny-xray-lora")
        config = json.dumps({"peft_type": "LORA", "base_model_name_or_path": "acme/vit-tiny-xray", "r": 4,
                             "target_modules": ["query", "value"]}).encode()
        weights = random_bytes(5000, 7)
        commit = adapter.commit({"adapter_config.json": config, "adapter_model.safetensors": weights,
                                 "README.md": b"# an adapter\n"})
        out = self.run_cli(["acme/vit-tiny-xray-lora"], program=RESOLVE)
        snapshot = self.snapshot(commit, "acme/vit-tiny-xray-lora")
        self.assertEqual(out.stdout.strip(), snapshot)
        self.assertEqual(self.read(os.path.join(snapshot, "adapter_config.json")), config)
        self.assertEqual(self.read(os.path.join(snapshot, "adapter_model.safetensors")), weights)
        self.assertFalse(os.path.exists(os.path.join(snapshot, "README.md")))
        requests = len(self.hub.hub_log)
        out = self.run_cli(["acme/vit-tiny-xray-lora"], program=RESOLVE, HF_HUB_OFFLINE="1")
        self.assertEqual(out.stdout.strip(), snapshot)
        self.assertEqual(len(self.hub.hub_log), requests)
        broken = self.hub.add_repo("acme/adapter-without-weights")
        broken.commit({"adapter_config.json": config})
        out = self.run_cli(["acme/adapter-without-weights"], program=RESOLVE, expect_rc=1)
        self.assertIn("no adapter_model.safetensors", out.stderr)

    def test_model_reference_paths_and_ids(self):
        local = os.path.join(self.tmp.name, "my-model")
        os.makedirs(local)
        self.assertEqual(self.run_cli([local], program=RESOLVE).stdout.strip(), local)
        for path in ("./no-such-dir", os.path.join(self.tmp.name, "missing"), "a/b/c", "models/"):
            out = self.run_cli([path], program=RESOLVE, expect_rc=1)
            self.assertIn(": not a directory (no such path)", out.stderr)
        out = self.run_cli(["bad id!"], program=RESOLVE, expect_rc=1)
        self.assertIn("neither an existing directory nor a valid Hub repo id", out.stderr)
        file_path = os.path.join(self.tmp.name, "config.json")
        with open(file_path, "w") as f:
            f.write("{}")
        out = self.run_cli([file_path], program=RESOLVE, expect_rc=1)
        self.assertIn("is a file", out.stderr)
        self.assertEqual(self.hub.hub_log, [])

    def test_tls_verified_against_ca_bundle(self):
        self.hub.stop()
        self.hub.start(tls=True)
        self.assertTrue(self.hub.endpoint.startswith("https://"))
        # The test certificate is in no system store: refused, and not retried as if the network were flaky.
        out = self.download(expect_rc=1)
        self.assertIn("certificate", out.stderr.lower())
        self.assertIn("CURL_CA_BUNDLE", out.stderr)
        self.assertEqual(self.hub.hub_log, [])  # the TLS handshake failed before any request
        for variable in ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE"):
            shutil.rmtree(self.cache, ignore_errors=True)
            out = self.download(**{variable: TLS_CERTIFICATE})
            self.assertEqual(self.read(os.path.join(out.stdout.strip(), "model.safetensors")), self.weights)

    def test_proxy_from_environment(self):
        proxy = self.hub.start_proxy()
        out = self.download(http_proxy=proxy, no_proxy="", NO_PROXY="")
        self.assertEqual(self.read(os.path.join(out.stdout.strip(), "model.safetensors")), self.weights)
        through = [r["path"] for r in self.hub.proxy_log]
        self.assertTrue(any(p.startswith(self.hub.endpoint + "/api/models/") for p in through), through)
        self.assertTrue(any(p.startswith(self.hub.storage_url + "/lfs/") for p in through), through)

    def test_hub_unreachable(self):
        self.hub.stop()
        out = self.download(expect_rc=1)
        self.assertIn("cannot reach the Hub at " + self.hub.endpoint, out.stderr)
        self.assertIn("not in the cache", out.stderr)
        # Once cached, an unreachable Hub only costs a warning, as with huggingface_hub.
        self.hub.start()
        self.download(HF_ENDPOINT=self.hub.endpoint)
        endpoint = self.hub.endpoint
        self.hub.stop()
        out = self.download(HF_ENDPOINT=endpoint)
        self.assertEqual(out.stdout.strip(), self.snapshot(self.commit))
        self.assertIn("cannot reach the Hub", out.stderr)


if __name__ == "__main__":
    unittest.main()
