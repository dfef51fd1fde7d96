"""A small Hugging Face Hub on loopback, for tests: two HTTP servers, "hub" and "storage", answering the way
huggingface.co and its LFS storage do.

Hub:     GET  /api/models/{repo}/revision/{revision}        -> {"id", "sha", "siblings": [{"rfilename"}], "private"}
         HEAD/GET /{repo}/resolve/{revision}/{file}
             LFS files (*.safetensors, *.bin): 302 to the storage host with X-Repo-Commit, X-Linked-Etag (sha256),
             X-Linked-Size and an ETag of the pointer file.
             Other files: 307 to a relative /api/resolve-cache/... URL (as huggingface.co does), which answers 200
             with X-Repo-Commit, a weak ETag (W/"git blob sha1") and Content-Length.
         Errors carry X-Error-Code / X-Error-Message: RepoNotFound (401 anonymous, 404 with a token),
         RevisionNotFound, EntryNotFound, GatedRepo, "Invalid credentials in Authorization header".
Storage: GET /lfs/{sha256}?X-Amz-Signature=... with Range support. With same_host_storage, LFS redirects go to
         {endpoint}/storage/lfs/{sha256}?... on the Hub's own host and port (a self-hosted mirror or caching proxy),
         which refuses (400) any request that carries an Authorization header: a signed URL must get no token.

Knobs (attributes of HubEmulator): drops[sha256] = n (close the connection halfway through the next n transfers),
unavailable[sha256] = n (answer the next n storage GETs with 503),
corrupt (sha256s served with one byte flipped), throttle_bytes_per_second, ignore_range, hidden (repo, file) pairs
listed by the API but answering EntryNotFound. Every request's method, path and headers are logged in hub_log /
storage_log, so tests can check where the token went.

Upload side (huggingface_hub's create_repo / create_commit / lfs.py, as the Hub answers them):
Hub:     POST /api/repos/create {"name", "organization", "private"}: 200 {"url"} with an initial commit holding the
             Hub's default .gitattributes; 409 when it exists.
         POST /api/models/{repo}/preupload/{revision} {"files": [{"path", "size", "sample"}]}
             -> {"files": [{"path", "uploadMode", "shouldIgnore", "oid"}]} (oid: the file's at the revision, sha256
             of an LFS file, git blob sha1 of a regular one, null if absent); "lfs" by the Hub's rule: the path matches a
             filter=lfs pattern of the revision's .gitattributes, or the file is larger than 10 MiB, or its sample
             holds a NUL byte (binary); "regular" otherwise.
         POST /{repo}.git/info/lfs/objects/batch (Accept: application/vnd.git-lfs+json) {"operation": "upload",
             "objects": [{"oid", "size"}]}: upload and verify actions only for objects it does not hold; a file larger
             than part_size gets the multipart form (header chunk_size and one signed URL per part, href = the
             completion URL).
         POST /api/complete_multipart?oid=...  {"oid", "parts": [{"partNumber", "etag"}]}: assembles the parts.
         POST /{repo}.git/info/lfs/objects/verify {"oid", "size"}: 200 when the uploaded bytes hash to oid.
         POST /api/models/{repo}/commit/{revision}[?create_pr=1] (application/x-ndjson: header, file, lfsFile,
             deletedFile): a new commit on the branch (or on refs/pr/N), readable by the download side; 412 when
             header.parentCommit is not the branch's head; 422 for an lfsFile whose object was not verified.
         Auth: no token 401, an unknown token 401, a namespace the token may not write to 403 (write_access), an
             unknown repository 404 RepoNotFound, an unknown revision 404 RevisionNotFound.
Storage: PUT /upload/{oid}?... and /upload/{oid}/part/{n}?... (signed: 400 with an Authorization header); each
         answers an ETag (the md5 of what it received).
Upload knobs: part_size, upload_unavailable = n (the next n storage PUTs answer 503), upload_drops = n (the next n
storage PUTs lose the connection halfway), commit_unavailable = n (the next n commit calls answer 503 before doing
anything).
"""

import base64
import fnmatch
import hashlib
import http.client
import http.server
import json
import os
import socket
import ssl
import threading
import time
import urllib.parse

TLS_CERTIFICATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tls", "hub-test.crt")
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".msgpack", ".h5")
REGULAR_FILE_LIMIT = 10 * 1024 * 1024  # larger files must go through LFS
# The .gitattributes the Hub writes into a new model repository (abridged to its filter=lfs patterns).
DEFAULT_GITATTRIBUTES = "".join("%s filter=lfs diff=lfs merge=lfs -text\n" % pattern for pattern in (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*", "*.mlmodel",
    "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt",
    "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz",
    "*.zip", "*.zst", "*tfevents*")).encode()


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, repo_id, private=False, gated=False):
        self.repo_id = repo_id
        self.private = private
        self.gated = gated
        self.commits = {}  # sha -> {filename: bytes}
        self.branches = {}  # name -> sha
        self.lfs_paths = {}  # sha of a pushed commit -> the paths it holds through LFS
        self.lfs_oids = set()  # the LFS objects uploaded (and verified) for this repository
        self.pull_requests = 0

    def is_lfs(self, sha, filename):
        if sha in self.lfs_paths:
            return filename in self.lfs_paths[sha]
        return filename.endswith(LFS_SUFFIXES)

    def commit(self, files, branch="main"):
        """Adds a commit holding `files` (name -> bytes) and points `branch` at it; returns its sha."""
        digest = hashlib.sha1(repr((self.repo_id, len(self.commits), sorted(files))).encode())
        for name in sorted(files):
            digest.update(files[name])
        sha = digest.hexdigest()
        self.commits[sha] = dict(files)
        if branch:
            self.branches[branch] = sha
        return sha


class HubEmulator:
    def __init__(self):
        self.repos = {}
        self.valid_tokens = {"hf_test_token_4f6a2c"}
        self.gated_access = {"hf_test_token_4f6a2c"}
        self.hub_log = []
        self.storage_log = []
        self.proxy_log = []
        self.drops = {}
        self.unavailable = {}  # sha256 -> how many GETs answer 503 first
        self.corrupt = set()
        self.throttle_bytes_per_second = None
        self.ignore_range = False
        self.hidden = set()
        self.same_host_storage = False
        # upload side
        self.write_access = {"hf_test_token_4f6a2c": {"acme", "tester"}}  # token -> namespaces it may write to
        self.part_size = 256 * 1024
        self.lfs_objects = {}  # sha256 -> bytes: uploaded and verified (for the repos whose lfs_oids name it)
        self.uploaded = {}  # sha256 -> bytes: PUT (or assembled), not yet verified
        self.parts = {}  # sha256 -> {part number: bytes}
        self.upload_unavailable = 0
        self.upload_drops = 0
        self.commit_unavailable = 0
        self.lock = threading.Lock()
        self._servers = []

    # --- content ---
    def add_repo(self, repo_id, private=False, gated=False):
        repo = Repo(repo_id, private, gated)
        self.repos[repo_id] = repo
        return repo

    def blob(self, sha256):
        if sha256 in self.lfs_objects:
            return self.lfs_objects[sha256]
        for repo in self.repos.values():
            for files in repo.commits.values():
                for data in files.values():
                    if hashlib.sha256(data).hexdigest() == sha256:
                        return data
        return None

    # --- servers ---
    def start(self, tls=False):
        """tls=True serves HTTPS with the self-signed certificate in tls/ (a test-only key, valid for 127.0.0.1)."""
        self.hub = self._serve(HubHandler, tls)
        self.storage = self._serve(StorageHandler, tls)
        scheme = "https" if tls else "http"
        self.endpoint = "%s://127.0.0.1:%d" % (scheme, self.hub.server_address[1])
        self.storage_url = "%s://127.0.0.1:%d" % (scheme, self.storage.server_address[1])
        return self

    def start_proxy(self):
        """A forward HTTP proxy; its URL is returned (for http_proxy)."""
        proxy = self._serve(ProxyHandler, False)
        return "http://127.0.0.1:%d" % proxy.server_address[1]

    def _serve(self, handler, tls):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(TLS_CERTIFICATE, os.path.join(os.path.dirname(TLS_CERTIFICATE), "hub-test.key"))
            server.socket = context.wrap_socket(server.socket, server_side=True)
        server.daemon_threads = True
        server.emulator = self
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self._servers.append(server)
        return server

    def stop(self):
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers = []

    def log(self, where, handler):
        with self.lock:
            where.append({"method": handler.command, "path": handler.path,
                          "headers": {k.lower(): v for k, v in handler.headers.items()}})

    def storage_puts(self):
        return [r for r in self.storage_log if r["method"] == "PUT"]

    def take(self, knob):
        """Decrements the counter attribute `knob` if it is positive; True when it was."""
        with self.lock:
            value = getattr(self, knob)
            if value > 0:
                setattr(self, knob, value - 1)
                return True
            return False

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: a dropped transfer is a closed socket

    def log_message(self, *args):
        pass

    @property
    def emulator(self):
        return self.server.emulator

    def reply(self, status, headers=None, body=b""):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def read_body(self):
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def reply_json(self, status, value, content_type="application/json"):
        self.reply(status, {"Content-Type": content_type}, json.dumps(value).encode())

    def error(self, status, code, message):
        headers = {"X-Error-Message": message, "Content-Type": "application/json"}
        if code:
            headers["X-Error-Code"] = code
        self.reply(status, headers, json.dumps({"error": message}).encode())

    def send_bytes(self, data, headers, status=200):
        """Serves `data` honouring Range, with the drop/corrupt/throttle knobs."""
        emulator = self.emulator
        sha = hashlib.sha256(data).hexdigest()
        if sha in emulator.corrupt:
            middle = len(data) // 2
            data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]
        start = 0
        range_header = self.headers.get("Range")
        if range_header and not emulator.ignore_range:
            spec = range_header.replace("bytes=", "").split("-")[0]
            start = int(spec)
            if start >= len(data) and len(data) > 0:
                self.reply(416, {"Content-Range": "bytes */%d" % len(data)})
                return
            status = 206
            headers = dict(headers, **{"Content-Range": "bytes %d-%d/%d" % (start, len(data) - 1, len(data))})
        body = data[start:]
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if self.command == "HEAD":
            return
        with emulator.lock:
            drop = emulator.drops.get(sha, 0) > 0
            if drop:
                emulator.drops[sha] -= 1
        if drop:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        chunk = 64 * 1024
        for offset in range(0, len(body), chunk):
            try:
                self.wfile.write(body[offset: offset + chunk])
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return
            rate = emulator.throttle_bytes_per_second
            if rate:
                time.sleep(chunk / rate)


class HubHandler(Handler):
    def do_HEAD(self):
        self.handle_request()

    def do_GET(self):
        self.handle_request()

    def authorize(self, repo_id):
        """Returns the repo, or None after sending the error huggingface.co would send."""
        emulator = self.emulator
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        if auth and token not in emulator.valid_tokens:
            self.error(401, None, "Invalid credentials in Authorization header")
            return None
        repo = emulator.repos.get(repo_id)
        if repo is None or (repo.private and token is None):
            self.error(404 if token else 401, "RepoNotFound", "Repository not found")
            return None
        if repo.gated and token not in emulator.gated_access:
            self.error(403 if token else 401, "GatedRepo",
                       "Access to model %s is restricted. You must have access to it and be authenticated to "
                       "access it. Please log in." % repo_id)
            return None
        return repo

    def commit_of(self, repo, revision):
        if revision in repo.branches:
            return repo.branches[revision]
        if revision in repo.commits:
            return revision
        self.error(404, "RevisionNotFound", "Invalid rev id: %s" % revision)
        return None

    def handle_request(self):
        emulator = self.emulator
        emulator.log(emulator.hub_log, self)
        path = urllib.parse.urlsplit(self.path).path
        if path.startswith("/storage/lfs/"):
            emulator.log(emulator.storage_log, self)
            if "Authorization" in self.headers:
                self.error(400, None, "the Authorization header was sent to a signed storage URL")
                return
            serve_storage(self, path[len("/storage"):])
        elif path.startswith("/api/models/") and "/revision/" in path:
            repo_id, revision = path[len("/api/models/"):].split("/revision/", 1)
            self.model_info(repo_id, urllib.parse.unquote(revision))
        elif path.startswith("/api/resolve-cache/models/"):
            parts = path[len("/api/resolve-cache/models/"):].split("/")
            # org/name/commit/file... or name/commit/file...
            for cut in (2, 1):
                repo_id = "/".join(parts[:cut])
                if repo_id in emulator.repos:
                    self.resolve(repo_id, parts[cut], urllib.parse.unquote("/".join(parts[cut + 1:])), cached=True)
                    return
            self.error(404, "RepoNotFound", "Repository not found")
        elif "/resolve/" in path:
            repo_id, rest = path.lstrip("/").split("/resolve/", 1)
            revision, _, filename = rest.partition("/")
            self.resolve(repo_id, urllib.parse.unquote(revision), urllib.parse.unquote(filename))
        else:
            self.error(404, None, "Not found")

    def model_info(self, repo_id, revision):
        repo = self.authorize(repo_id)
        if repo is None:
            return
        sha = self.commit_of(repo, revision)
        if sha is None:
            return
        body = {"id": repo_id, "sha": sha, "private": repo.private, "gated": repo.gated,
                "siblings": [{"rfilename": name} for name in sorted(repo.commits[sha])]}
        self.reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())

    def resolve(self, repo_id, revision, filename, cached=False):
        emulator = self.emulator
        repo = self.authorize(repo_id)
        if repo is None:
            return
        sha = self.commit_of(repo, revision)
        if sha is None:
            return
        files = repo.commits[sha]
        if filename not in files or (repo_id, filename) in emulator.hidden:
            self.error(404, "EntryNotFound", "Entry not found")
            return
        data = files[filename]
        common = {"X-Repo-Commit": sha, "Vary": "Origin, Accept-Encoding"}
        if repo.is_lfs(sha, filename):
            sha256 = hashlib.sha256(data).hexdigest()
            pointer = ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256, len(data)))
            storage = emulator.endpoint + "/storage" if emulator.same_host_storage else emulator.storage_url
            location = "%s/lfs/%s?X-Amz-Signature=deadbeef&X-Amz-Expires=3600" % (storage, sha256)
            headers = dict(common, **{"ETag": '"%s"' % git_blob_sha1(pointer.encode()),
                                      "X-Linked-Etag": '"%s"' % sha256, "X-Linked-Size": str(len(data)),
                                      "Location": location})
            self.reply(302, headers, ("Found. Redirecting to %s" % location).encode())
        elif not cached:
            location = "/api/resolve-cache/models/%s/%s/%s" % (repo_id, sha, urllib.parse.quote(filename))
            self.reply(307, dict(common, Location=location), b"Temporary Redirect")
        else:
            self.send_bytes(data, dict(common, **{"ETag": 'W/"%s"' % git_blob_sha1(data)}))


    # --- upload side ---
    def do_POST(self):
        emulator = self.emulator
        emulator.log(emulator.hub_log, self)
        parts = urllib.parse.urlsplit(self.path)
        path, query = parts.path, urllib.parse.parse_qs(parts.query)
        body = self.read_body()
        if path == "/api/repos/create":
            self.create_repo(body)
        elif path == "/api/complete_multipart":
            self.complete_multipart(query, body)
        elif path.startswith("/api/models/") and "/preupload/" in path:
            repo_id, revision = path[len("/api/models/"):].split("/preupload/", 1)
            self.preupload(repo_id, urllib.parse.unquote(revision), body)
        elif path.startswith("/api/models/") and "/commit/" in path:
            repo_id, revision = path[len("/api/models/"):].split("/commit/", 1)
            self.commit(repo_id, urllib.parse.unquote(revision), body, query.get("create_pr") == ["1"])
        elif path.endswith(".git/info/lfs/objects/batch"):
            self.lfs_batch(path.lstrip("/")[: -len(".git/info/lfs/objects/batch")], body)
        elif path.endswith(".git/info/lfs/objects/verify"):
            self.lfs_verify(path.lstrip("/")[: -len(".git/info/lfs/objects/verify")], body)
        else:
            self.error(404, None, "Not found")

    def write_token(self):
        """The token of an Authorization header (Bearer, or Basic as git-lfs clients send it), or None."""
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[len("Bearer "):]
        if auth.startswith("Basic "):
            try:
                return base64.b64decode(auth[len("Basic "):]).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                return ""
        return None

    def authorize_write(self, repo_id, creating=False):
        """The repo (or True when creating) if the token may write to it, else None after the Hub's error."""
        emulator = self.emulator
        token = self.write_token()
        if token is None:
            self.error(401, None, "Invalid username or password.")
            return None
        if token not in emulator.valid_tokens:
            self.error(401, None, "Invalid credentials in Authorization header")
            return None
        namespace = repo_id.split("/")[0]
        if namespace not in emulator.write_access.get(token, set()):
            self.error(403, None, "You don't have the rights to write to %s: it belongs to %s" % (repo_id, namespace))
            return None
        if creating:
            return True
        repo = emulator.repos.get(repo_id)
        if repo is None:
            self.error(404, "RepoNotFound", "Repository not found")
        return repo

    def json_body(self, body):
        try:
            return json.loads(body)
        except ValueError:
            self.error(400, None, "the body is not JSON")
            return None

    def create_repo(self, body):
        payload = self.json_body(body)
        if payload is None:
            return
        name, organization = payload.get("name"), payload.get("organization")
        repo_id = "%s/%s" % (organization, name) if organization else name
        if self.authorize_write(repo_id, creating=True) is None:
            return
        emulator = self.emulator
        with emulator.lock:
            if repo_id in emulator.repos:
                self.reply_json(409, {"error": "You already created this model repo",
                                      "url": "%s/%s" % (emulator.endpoint, repo_id)})
                return
            repo = emulator.add_repo(repo_id, private=bool(payload.get("private")))
            sha = repo.commit({".gitattributes": DEFAULT_GITATTRIBUTES})
            repo.lfs_paths[sha] = set()
        self.reply_json(200, {"url": "%s/%s" % (emulator.endpoint, repo_id), "name": repo_id})

    def preupload(self, repo_id, revision, body):
        repo = self.authorize_write(repo_id)
        if repo is None:
            return
        sha = self.commit_of(repo, revision)
        payload = self.json_body(body) if sha is not None else None
        if payload is None:
            return
        patterns = []
        for line in repo.commits[sha].get(".gitattributes", b"").decode().splitlines():
            fields = line.split()
            if len(fields) > 1 and "filter=lfs" in fields[1:]:
                patterns.append(fields[0])
        answer = []
        for entry in payload.get("files", []):
            path, size = entry["path"], int(entry["size"])
            sample = base64.b64decode(entry.get("sample", ""))
            lfs = (any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], p) for p in patterns)
                   or size > REGULAR_FILE_LIMIT or b"\0" in sample)
            current = repo.commits[sha].get(path)
            oid = None if current is None else \
                hashlib.sha256(current).hexdigest() if repo.is_lfs(sha, path) else git_blob_sha1(current)
            answer.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                           "oid": oid})
        self.reply_json(200, {"files": answer, "commitOid": sha})

    def lfs_batch(self, repo_id, body):
        emulator = self.emulator
        if self.headers.get("Accept") != "application/vnd.git-lfs+json":
            self.error(406, None, "Accept must be application/vnd.git-lfs+json")
            return
        repo = self.authorize_write(repo_id)
        if repo is None:
            return
        payload = self.json_body(body)
        if payload is None:
            return
        if payload.get("operation") != "upload" or payload.get("hash_algo", "sha256") != "sha256":
            self.error(400, None, "only sha256 uploads are supported")
            return
        objects = []
        signature = "X-Amz-Signature=c0ffee&X-Amz-Expires=900"
        for entry in payload.get("objects", []):
            oid, size = entry["oid"], int(entry["size"])
            answer = {"oid": oid, "size": size}
            if oid not in repo.lfs_oids:
                verify = {"href": "%s/%s.git/info/lfs/objects/verify" % (emulator.endpoint, repo_id)}
                if size > emulator.part_size:
                    count = (size + emulator.part_size - 1) // emulator.part_size
                    header = {"chunk_size": str(emulator.part_size)}
                    for n in range(1, count + 1):
                        header[str(n)] = "%s/upload/%s/part/%d?%s" % (emulator.storage_url, oid, n, signature)
                    upload = {"href": "%s/api/complete_multipart?oid=%s&%s" % (emulator.endpoint, oid, signature),
                              "header": header}
                else:
                    upload = {"href": "%s/upload/%s?%s" % (emulator.storage_url, oid, signature)}
                answer["actions"] = {"upload": upload, "verify": verify}
            objects.append(answer)
        self.reply_json(200, {"transfer": "basic", "objects": objects}, "application/vnd.git-lfs+json")

    def complete_multipart(self, query, body):
        emulator = self.emulator
        payload = self.json_body(body)
        if payload is None:
            return
        oid = (query.get("oid") or [""])[0]
        received = emulator.parts.get(oid, {})
        listed = payload.get("parts", [])
        if payload.get("oid") != oid or [p["partNumber"] for p in listed] != list(range(1, len(received) + 1)) or \
                any(p["etag"] != '"%s"' % hashlib.md5(received[p["partNumber"]]).hexdigest() for p in listed):
            self.error(400, None, "the parts listed do not match the parts uploaded")
            return
        emulator.uploaded[oid] = b"".join(received[n] for n in sorted(received))
        del emulator.parts[oid]
        self.reply_json(200, {"message": "ok"})

    def lfs_verify(self, repo_id, body):
        emulator = self.emulator
        repo = self.authorize_write(repo_id)
        if repo is None:
            return
        payload = self.json_body(body)
        if payload is None:
            return
        oid, size = payload.get("oid"), payload.get("size")
        data = emulator.uploaded.get(oid)
        if data is None or len(data) != size or hashlib.sha256(data).hexdigest() != oid:
            self.error(404, None, "Object %s was not uploaded completely" % oid)
            return
        emulator.lfs_objects[oid] = data
        repo.lfs_oids.add(oid)
        emulator.uploaded.pop(oid, None)
        self.reply_json(200, {"message": "ok"})

    def commit(self, repo_id, revision, body, create_pr):
        emulator = self.emulator
        repo = self.authorize_write(repo_id)
        if repo is None:
            return
        head = self.commit_of(repo, revision)
        if head is None:
            return
        if emulator.take("commit_unavailable"):
            self.reply(503, {}, b"Service Unavailable")
            return
        if self.headers.get("Content-Type") != "application/x-ndjson":
            self.error(400, None, "the commit body must be application/x-ndjson")
            return
        try:
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        except ValueError:
            self.error(400, None, "the commit body is not NDJSON")
            return
        if not lines or lines[0].get("key") != "header" or not lines[0]["value"].get("summary"):
            self.error(400, None, "the first line must be the header with a summary")
            return
        header = lines[0]["value"]
        if header.get("parentCommit") not in (None, head):
            self.error(412, None, "A commit has happened since. Please refresh and try again.")
            return
        files = dict(repo.commits[head])
        lfs_paths = {name for name in files if repo.is_lfs(head, name)}
        for line in lines[1:]:
            key, value = line.get("key"), line.get("value", {})
            path = value.get("path")
            if key == "file":
                data = base64.b64decode(value["content"]) if value.get("encoding") == "base64" else \
                    value["content"].encode()
                if len(data) > REGULAR_FILE_LIMIT:
                    self.error(400, None, "%s is larger than 10 MiB: it must go through LFS" % path)
                    return
                files[path] = data
                lfs_paths.discard(path)
            elif key == "lfsFile":
                data = emulator.lfs_objects.get(value.get("oid")) if value.get("oid") in repo.lfs_oids else None
                if value.get("algo") != "sha256" or data is None or \
                        ("size" in value and value["size"] != len(data)):
                    self.error(422, None, "Your push was rejected because an LFS pointer pointed to a file that "
                                          "does not exist: %s" % path)
                    return
                files[path] = data
                lfs_paths.add(path)
            elif key == "deletedFile":
                if path not in files:
                    self.error(404, "EntryNotFound", "%s does not exist" % path)
                    return
                del files[path]
                lfs_paths.discard(path)
            else:
                self.error(400, None, "unknown commit operation %r" % key)
                return
        with emulator.lock:
            if create_pr:
                repo.pull_requests += 1
                number = repo.pull_requests
                sha = repo.commit(files, branch="refs/pr/%d" % number)
                pr_url = "%s/%s/discussions/%d" % (emulator.endpoint, repo_id, number)
            else:
                sha = repo.commit(files, branch=revision)
                pr_url = None
            repo.lfs_paths[sha] = lfs_paths
        self.reply_json(200, {"success": True, "commitOid": sha, "commitMessage": header["summary"],
                              "commitUrl": "%s/%s/commit/%s" % (emulator.endpoint, repo_id, sha),
                              "pullRequestUrl": pr_url})


class ProxyHandler(Handler):
    """A forward proxy for plain HTTP (absolute-form request lines), logging what passes through."""

    def do_GET(self):
        emulator = self.emulator
        emulator.log(emulator.proxy_log, self)
        parts = urllib.parse.urlsplit(self.path)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "connection")}
        connection.request(self.command, parts.path + ("?" + parts.query if parts.query else ""), headers=headers)
        response = connection.getresponse()
        body = response.read()
        self.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(name, value)
        length = response.getheader("Content-Length")
        self.send_header("Content-Length", length if self.command == "HEAD" and length else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_HEAD = do_GET


def serve_storage(handler, path):
    """GET /lfs/{sha256}: the blob, honouring the unavailable knob."""
    emulator = handler.emulator
    data = emulator.blob(path.rsplit("/", 1)[-1]) if path.startswith("/lfs/") else None
    if data is None:
        handler.reply(404, {}, b"NoSuchKey")
        return
    sha = hashlib.sha256(data).hexdigest()
    with emulator.lock:
        unavailable = emulator.unavailable.get(sha, 0) > 0
        if unavailable:
            emulator.unavailable[sha] -= 1
    if unavailable:
        handler.reply(503, {}, b"SlowDown")
        return
    handler.send_bytes(data, {"Content-Type": "binary/octet-stream", "ETag": '"s3-etag"'})


class StorageHandler(Handler):
    def do_GET(self):
        self.emulator.log(self.emulator.storage_log, self)
        serve_storage(self, urllib.parse.urlsplit(self.path).path)

    do_HEAD = do_GET

    def do_PUT(self):
        """PUT /upload/{oid} or /upload/{oid}/part/{n}: signed URLs, as S3 answers them."""
        emulator = self.emulator
        emulator.log(emulator.storage_log, self)
        path = urllib.parse.urlsplit(self.path).path.split("/")
        length = int(self.headers.get("Content-Length") or 0)
        if emulator.take("upload_drops"):
            self.rfile.read(length // 2)
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        data = self.rfile.read(length)
        if "Authorization" in self.headers:
            self.error(400, None, "the Authorization header was sent to a signed storage URL")
            return
        if emulator.take("upload_unavailable"):
            self.reply(503, {}, b"SlowDown")
            return
        if len(path) == 3 and path[1] == "upload":
            emulator.uploaded[path[2]] = data
        elif len(path) == 5 and path[1] == "upload" and path[3] == "part":
            with emulator.lock:
                emulator.parts.setdefault(path[2], {})[int(path[4])] = data
        else:
            self.reply(404, {}, b"NoSuchUpload")
            return
        self.reply(200, {"ETag": '"%s"' % hashlib.md5(data).hexdigest()})
