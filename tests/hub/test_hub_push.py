"""`vitpipe push` and `train --push-to-hub` against the Hub emulator's upload side (see hub_emulator.py): the model
comes back byte for byte through `vitpipe download`, LFS objects the Hub holds are not sent again, a rejected token
or namespace leaves the repository as it was, a 503 or a broken connection mid-upload is retried.

Env: VITPIPE (the binary), VITPIPE_SOURCE_DIR (for the bundled ChestX-ray14 sample). No network: every address is
127.0.0.1, and proxies are switched off for the child processes.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hub_emulator import DEFAULT_GITATTRIBUTES, HubEmulator  # noqa: E402

VITPIPE = os.environ.get("VITPIPE", "vitpipe")
SOURCE_DIR = os.environ.get("VITPIPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TOKEN = "hf_test_token_4f6a2c"


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def folder_files(folder):
    """{path in repo: bytes} of what push sends: every file but vitpipe's .vitpipe-output marker."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, folder).replace(os.sep, "/")
            if relative != ".vitpipe-output":
                with open(path, "rb") as f:
                    files[relative] = f.read()
    return files


class HubPushTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="vitpipe-push-")
        self.cache = os.path.join(self.tmp.name, "cache")
        self.home = os.path.join(self.tmp.name, "hf_home")
        os.makedirs(self.home)
        self.hub = HubEmulator()
        self.hub.part_size = 128 * 1024  # the 330 kB weights of vit-micro go up in 3 parts
        self.hub.start()

    def tearDown(self):
        self.hub.stop()
        self.tmp.cleanup()

    # --- helpers ---
    def env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.upper().startswith(("HF_", "HUGGING", "TRANSFORMERS_")) and "PROXY" not in k.upper()}
        env.update(HF_ENDPOINT=self.hub.endpoint, HF_HUB_CACHE=self.cache, HF_HOME=self.home,
                   no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
        env.update({k: v for k, v in extra.items() if v is not None})
        return env

    def run_cli(self, args, expect_rc=0, **env):
        result = subprocess.run([VITPIPE] + [str(a) for a in args], env=self.env(**env), capture_output=True,
                                text=True, timeout=120)
        if (result.returncode == 0) != (expect_rc == 0):
            self.fail(f"{args} exited {result.returncode}, expected {expect_rc}\nstdout: {result.stdout}\n"
                      f"stderr: {result.stderr}")
        return result

    def push(self, folder, repo="acme/vit-micro-xray", *args, expect_rc=0, token=TOKEN):
        return self.run_cli(["push", folder, "--repo", repo, *args], expect_rc=expect_rc, HF_TOKEN=token)

    def model(self, seed=4):
        """A real model folder (config.json, model.safetensors, preprocessor_config.json) from `vitpipe init`."""
        folder = os.path.join(self.tmp.name, "init-%d" % seed)
        self.run_cli(["init", "--preset", "vit-micro", "--seed", seed, "--out", folder])
        return folder

    def head_files(self, repo_id, branch="main"):
        repo = self.hub.repos[repo_id]
        return repo.commits[repo.branches[branch]]

    def state(self, repo_id):
        repo = self.hub.repos.get(repo_id)
        return None if repo is None else (dict(repo.branches), sorted(repo.commits))

    def assert_one_error_line(self, result, *fragments):
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith("error: "), lines[0])
        for fragment in fragments:
            self.assertIn(fragment, lines[0])

    def assert_token_only_on_hub(self):
        for request in self.hub.storage_log:
            self.assertNotIn("authorization", request["headers"], request["path"])
        writes = [r for r in self.hub.hub_log if r["method"] == "POST" and "complete_multipart" not in r["path"]]
        self.assertTrue(writes)
        for request in writes:
            self.assertEqual(request["headers"].get("authorization"), "Bearer " + TOKEN, request["path"])

    # --- cases ---
    def test_train_push_to_hub_then_download_byte_identical(self):
        init = self.model()
        run = os.path.join(self.tmp.name, "run")
        sample = os.path.join(SOURCE_DIR, "data", "chestxray14-sample")
        result = self.run_cli(["train", "--model", init, "--data", "chestxray14:" + sample, "--output-dir", run,
                               "--loader-threads", 1, "--threads", 2, "--max-steps", 2, "--batch-size", 8,
                               "--push-to-hub", "acme/vit-micro-xray"], HF_TOKEN=TOKEN)
        model = os.path.join(run, "model")
        local = folder_files(model)
        self.assertIn("README.md", local)  # the model card travels with the model
        # The repository holds the folder as one commit on top of the Hub's initial .gitattributes commit.
        repo = self.hub.repos["acme/vit-micro-xray"]
        self.assertEqual(len(repo.commits), 2)
        self.assertEqual(self.head_files("acme/vit-micro-xray"), dict(local, **{".gitattributes": DEFAULT_GITATTRIBUTES}))
        self.assertEqual(repo.lfs_paths[repo.branches["main"]], {"model.safetensors"})
        self.assertIn("pushed " + model, result.stderr)
        # The weights went up in parts (multipart), then the completion and the verify call.
        parts = [r["path"] for r in self.hub.storage_puts()]
        self.assertEqual(len(parts), 3, parts)
        self.assertTrue(all("/part/" in p for p in parts), parts)
        posts = [r["path"].split("?")[0] for r in self.hub.hub_log if r["method"] == "POST"]
        self.assertEqual(posts, ["/api/repos/create", "/api/models/acme/vit-micro-xray/preupload/main",
                                 "/acme/vit-micro-xray.git/info/lfs/objects/batch", "/api/complete_multipart",
                                 "/acme/vit-micro-xray.git/info/lfs/objects/verify",
                                 "/api/models/acme/vit-micro-xray/commit/main"])
        self.assert_token_only_on_hub()
        # `vitpipe download` brings it back byte for byte.
        snapshot = self.run_cli(["download", "acme/vit-micro-xray"], HF_TOKEN=TOKEN).stdout.strip()
        downloaded = folder_files(snapshot)
        self.assertIn("model.safetensors", downloaded)
        for name, data in downloaded.items():
            self.assertEqual(sha256(data), sha256(local[name]), name)

    def test_second_push_uploads_no_lfs_again(self):
        folder = self.model()
        first = self.push(folder)
        self.assertTrue(first.stdout.strip().startswith(self.hub.endpoint + "/acme/vit-micro-xray/commit/"))
        self.assertEqual(len(self.hub.storage_puts()), 3)
        repo = self.hub.repos["acme/vit-micro-xray"]
        # The same folder again: every file is on the branch as it is here (the preupload answer's oids), so nothing
        # is sent and no empty commit is made; the answer is the branch's head.
        second = self.push(folder)
        self.assertEqual(second.stdout.strip(), first.stdout.strip())
        self.assertIn("no commit made", second.stderr)
        self.assertEqual(len(repo.commits), 2)
        # A new card: only it is committed; the weights stay as they are.
        with open(os.path.join(folder, "README.md"), "w") as f:
            f.write("---\nlibrary_name: transformers\n---\n# a card\n")
        third = self.push(folder, "acme/vit-micro-xray", "--message", "Add the card")
        self.assertIn("1 changed files (3 unchanged stay)", third.stderr)
        self.assertEqual(len(repo.commits), 3)
        self.assertEqual(self.head_files("acme/vit-micro-xray")["README.md"],
                         open(os.path.join(folder, "README.md"), "rb").read())
        # Other weights are sent; then the first ones again: the Hub holds their LFS object (the batch answer has no
        # actions for it), so the commit goes through with no storage PUT.
        other = self.model(seed=5)
        self.push(other)
        self.assertEqual(len(self.hub.storage_puts()), 6)
        self.assertEqual(self.head_files("acme/vit-micro-xray")["model.safetensors"],
                         open(os.path.join(other, "model.safetensors"), "rb").read())
        back = self.push(folder)
        self.assertIn("0 sent, 1 on the Hub already", back.stderr)
        self.assertEqual(len(self.hub.storage_puts()), 6)
        self.assertEqual(self.head_files("acme/vit-micro-xray"),
                         dict(folder_files(folder), **{".gitattributes": DEFAULT_GITATTRIBUTES}))
        batches = [r for r in self.hub.hub_log if r["path"].endswith("lfs/objects/batch")]
        self.assertEqual(len(batches), 3)
        for request in batches:
            self.assertEqual(request["headers"].get("accept"), "application/vnd.git-lfs+json")

    def test_bad_token_fails_and_leaves_repo_unchanged(self):
        folder = self.model()
        self.push(folder)
        before = self.state("acme/vit-micro-xray")
        puts = len(self.hub.storage_puts())
        other = self.model(seed=5)
        result = self.push(other, expect_rc=1, token="hf_not_a_valid_token")
        self.assert_one_error_line(result, "rejected the token from HF_TOKEN", "401",
                                   "nothing was committed to acme/vit-micro-xray")
        self.assertNotIn("hf_not_a_valid_token", result.stderr)
        self.assertEqual(self.state("acme/vit-micro-xray"), before)
        self.assertEqual(len(self.hub.storage_puts()), puts)
        # The emulator itself, asked without a token (vitpipe never does: see below): 401, as the Hub answers.
        request = urllib.request.Request(self.hub.endpoint + "/api/repos/create", method="POST",
                                         data=json.dumps({"name": "x", "organization": "acme"}).encode())
        with self.assertRaises(urllib.error.HTTPError) as raised:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30)
        self.assertEqual(raised.exception.code, 401)
        self.assertNotIn("acme/x", self.hub.repos)
        # No token at all: said before any request.
        requests = len(self.hub.hub_log)
        result = self.run_cli(["push", other, "--repo", "acme/vit-micro-xray"], expect_rc=1)
        self.assert_one_error_line(result, "needs a Hub token with write access", "HF_TOKEN")
        self.assertEqual(len(self.hub.hub_log), requests)
        # train --push-to-hub without a token says so before training: no run folder is started.
        run = os.path.join(self.tmp.name, "run")
        sample = os.path.join(SOURCE_DIR, "data", "chestxray14-sample")
        result = self.run_cli(["train", "--model", folder, "--data", "chestxray14:" + sample, "--output-dir", run,
                               "--max-steps", 1, "--push-to-hub", "acme/vit-micro-xray"], expect_rc=1)
        self.assert_one_error_line(result, "needs a Hub token with write access")
        self.assertFalse(os.path.exists(run))
        self.assertEqual(len(self.hub.hub_log), requests)
        # The token file huggingface_hub writes ($HF_HOME/token) is used when HF_TOKEN is not set.
        with open(os.path.join(self.home, "token"), "w") as f:
            f.write(TOKEN + "\n")
        self.run_cli(["push", other, "--repo", "acme/vit-micro-xray"])
        self.assertNotEqual(self.state("acme/vit-micro-xray"), before)

    def test_forbidden_namespace_and_missing_revision(self):
        folder = self.model()
        result = self.push(folder, "globex/vit-micro-xray", expect_rc=1)
        self.assert_one_error_line(result, "may not write to globex/vit-micro-xray", "403",
                                   "account that belongs to 'globex'")
        self.assertNotIn("globex/vit-micro-xray", self.hub.repos)
        self.push(folder)
        before = self.state("acme/vit-micro-xray")
        result = self.push(folder, "acme/vit-micro-xray", "--revision", "no-such-branch", expect_rc=1)
        self.assert_one_error_line(result, "revision 'no-such-branch' does not exist in acme/vit-micro-xray",
                                   "create the branch first")
        self.assertEqual(self.state("acme/vit-micro-xray"), before)
        result = self.push(os.path.join(self.tmp.name, "nowhere"), expect_rc=1)
        self.assert_one_error_line(result, "nowhere does not exist")
        result = self.push(os.path.join(folder, "config.json"), expect_rc=1)
        self.assert_one_error_line(result, "config.json is not a directory")
        result = self.push(self.tmp.name, expect_rc=1)
        self.assert_one_error_line(result, "is not a model or adapter folder")
        # A peft adapter folder goes up as a model folder does.
        adapter = os.path.join(self.tmp.name, "adapter")
        os.makedirs(adapter)
        with open(os.path.join(adapter, "adapter_config.json"), "w") as f:
            f.write('{"peft_type": "LORA", "r": 4}')
        with open(os.path.join(adapter, "adapter_model.safetensors"), "wb") as f:
            f.write(bytes(range(256)) * 64)
        # The Hub's rule picks LFS: a .gitattributes pattern, or binary content (a NUL in the first 512 bytes);
        # text in a subfolder goes regular.
        os.makedirs(os.path.join(adapter, "notes"))
        with open(os.path.join(adapter, "notes", "training.txt"), "w") as f:
            f.write("LoRA rank 4 on query and value\n")
        with open(os.path.join(adapter, "scores.raw"), "wb") as f:
            f.write(b"\0\1\2\3" * 100)
        self.push(adapter, "acme/vit-micro-xray-lora")
        repo = self.hub.repos["acme/vit-micro-xray-lora"]
        self.assertEqual(repo.lfs_paths[repo.branches["main"]], {"adapter_model.safetensors", "scores.raw"})
        self.assertEqual(self.head_files("acme/vit-micro-xray-lora"),
                         dict(folder_files(adapter), **{".gitattributes": DEFAULT_GITATTRIBUTES}))
        result = self.push(folder, "not a repo id", expect_rc=1)
        self.assert_one_error_line(result, "not a Hub repo id of the form ORG/NAME")

    def test_local_folder_checked_before_token_and_network(self):
        # Without a token, a mistyped or incomplete folder is named first (before: "needs a Hub token"); no request.
        folder = self.model()
        weightless = os.path.join(self.tmp.name, "weightless")
        os.makedirs(weightless)
        with open(os.path.join(weightless, "config.json"), "w") as f:
            f.write(open(os.path.join(folder, "config.json")).read())
        bare_adapter = os.path.join(self.tmp.name, "bare-adapter")
        os.makedirs(bare_adapter)
        with open(os.path.join(bare_adapter, "adapter_config.json"), "w") as f:
            f.write('{"peft_type": "LORA", "r": 4}')
        missing = os.path.join(self.tmp.name, "mistyped-model")
        for path, expected in [(missing, "does not exist"),
                               (os.path.join(folder, "model.safetensors"), "is not a directory"),
                               (self.home, "is not a model or adapter folder"),
                               (weightless, "has config.json but no weights"),
                               (bare_adapter, "has adapter_config.json but no adapter_model.safetensors")]:
            for token in (None, TOKEN):
                result = self.run_cli(["push", path, "--repo", "acme/vit-micro-xray"], expect_rc=1, HF_TOKEN=token)
                self.assert_one_error_line(result, path, expected)
                self.assertNotIn("token", result.stderr)
        self.assertEqual(self.hub.hub_log, [])
        # The folder fine, the token is what is missing: said before any request.
        result = self.run_cli(["push", folder, "--repo", "acme/vit-micro-xray"], expect_rc=1)
        self.assert_one_error_line(result, "needs a Hub token with write access")
        self.assertEqual(self.hub.hub_log, [])

    def test_unavailable_storage_and_broken_connection_are_retried(self):
        folder = self.model()
        self.hub.upload_unavailable = 1  # the first part answers 503
        self.hub.upload_drops = 1  # its retry loses the connection halfway
        self.hub.commit_unavailable = 1  # and the commit answers 503 once
        result = self.push(folder)
        self.assertEqual((self.hub.upload_unavailable, self.hub.upload_drops, self.hub.commit_unavailable), (0, 0, 0))
        self.assertIn("HTTP 503", result.stderr)
        self.assertEqual(len(self.hub.storage_puts()), 3 + 2)
        commits = [r for r in self.hub.hub_log if "/commit/" in r["path"]]
        self.assertEqual(len(commits), 2)
        local = folder_files(folder)
        self.assertEqual(self.head_files("acme/vit-micro-xray"), dict(local, **{".gitattributes": DEFAULT_GITATTRIBUTES}))
        snapshot = self.run_cli(["download", "acme/vit-micro-xray"], HF_TOKEN=TOKEN).stdout.strip()
        for name, data in folder_files(snapshot).items():
            self.assertEqual(data, local[name], name)

    def test_storage_failing_every_time_commits_nothing(self):
        folder = self.model()
        self.push(folder)
        before = self.state("acme/vit-micro-xray")
        self.hub.upload_unavailable = 100
        other = self.model(seed=5)
        result = self.push(other, expect_rc=1)
        last = result.stderr.strip().splitlines()[-1]
        self.assertTrue(last.startswith("error: the storage host "), last)
        self.assertIn("kept failing with HTTP 503 while uploading model.safetensors", last)
        self.assertIn("nothing was committed to acme/vit-micro-xray", last)
        self.assertEqual(result.stderr.count("warning: uploading model.safetensors: HTTP 503"), 4)  # 5 attempts
        self.assertEqual(self.state("acme/vit-micro-xray"), before)
        self.assertFalse([r for r in self.hub.hub_log if "/commit/" in r["path"]][1:])

    def test_create_pr_into_a_private_repo(self):
        folder = self.model()
        result = self.push(folder, "acme/private-xray", "--private", "--create-pr", "--message", "Proposed weights")
        self.assertEqual(result.stdout.strip(), self.hub.endpoint + "/acme/private-xray/discussions/1")
        repo = self.hub.repos["acme/private-xray"]
        self.assertTrue(repo.private)
        self.assertEqual(self.head_files("acme/private-xray"), {".gitattributes": DEFAULT_GITATTRIBUTES})
        self.assertEqual(self.head_files("acme/private-xray", "refs/pr/1"),
                         dict(folder_files(folder), **{".gitattributes": DEFAULT_GITATTRIBUTES}))
        commit = [r for r in self.hub.hub_log if "/commit/" in r["path"]][0]
        self.assertTrue(commit["path"].endswith("/commit/main?create_pr=1"), commit["path"])
        snapshot = self.run_cli(["download", "acme/private-xray", "--revision", "refs/pr/1"],
                                HF_TOKEN=TOKEN).stdout.strip()
        self.assertEqual(folder_files(snapshot)["model.safetensors"],
                         open(os.path.join(folder, "model.safetensors"), "rb").read())


if __name__ == "__main__":
    unittest.main()
