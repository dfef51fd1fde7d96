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
"""

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


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, repo_id, private=False, gated=False):
        self.repo_id = repo_id
        self.private = private
        self.gated = gated
        self.commits = {}  # sha -> {filename: bytes}
        self.branches = {}  # name -> sha

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
        self.lock = threading.Lock()
        self._servers = []

    # --- content ---
    def add_repo(self, repo_id, private=False, gated=False):
        repo = Repo(repo_id, private, gated)
        self.repos[repo_id] = repo
        return repo

    def blob(self, sha256):
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
        if filename.endswith(LFS_SUFFIXES):
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
