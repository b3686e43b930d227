"""A minimal model hub on 127.0.0.1 for the download tests: the subset of the ModelScope and Hugging Face
file APIs that their real clients (modelscope 1.40 / modelscope_hub, huggingface_hub 2.x) use to
download a snapshot. Nothing else; no network beyond loopback.

ModelScope:    GET /api/v1/models/{org}/{name}/repo/files?Revision=&Recursive=   file list (Size, Sha256)
               GET /api/v1/models/{org}/{name}/repo?Revision=&FilePath=          file bytes (Range)
Hugging Face:  GET /api/models/{org}/{name}[/revision/{rev}][?blobs=true]        model info (sha, siblings)
               GET /api/models/{org}/{name}/tree/{rev}[/{path}]?recursive=       tree listing (lfs oid/size)
               HEAD|GET /{org}/{name}/resolve/{rev}/{path}                       ETag, X-Repo-Commit, bytes

Faults for tests: `cut_once[(repo, path)] = n` sends n bytes of the file then drops the connection (once);
`corrupt.add((repo, path))` serves the file with one byte flipped. Every request is logged in `requests`.
"""
from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin")


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class MiniHub:
    def __init__(self, repos: dict[str, dict[str, bytes]]):
        self.repos = repos
        self.commits = {rid: hashlib.sha1(rid.encode()).hexdigest() for rid in repos}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.cut_once: dict[tuple[str, str], int] = {}
        self.corrupt: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> str:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True, name="minihub").start()
        return self.url

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    # -- helpers for tests -------------------------------------------------------------------
    def file_gets(self) -> list[tuple[str, str, str | None]]:
        """GET requests that transferred file content (either hub)."""
        with self._lock:
            return [r for r in self.requests if r[0] == "GET" and ("/resolve/" in r[1] or "/repo?" in r[1])]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def log(self, method: str, path: str, rng: str | None) -> None:
        with self._lock:
            self.requests.append((method, path, rng))

    def content(self, repo: str, path: str) -> bytes:
        data = self.repos[repo][path]
        if (repo, path) in self.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        return data

    def take_cut(self, repo: str, path: str) -> int | None:
        with self._lock:
            return self.cut_once.pop((repo, path), None)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: MiniHub

    def log_message(self, *args):  # quiet
        pass

    def do_HEAD(self):
        self._route("HEAD")

    def do_GET(self):
        self._route("GET")

    # -- routing -------------------------------------------------------------------------------
    def _route(self, method: str) -> None:
        hub = self.hub
        hub.log(method, self.path, self.headers.get("Range"))
        parts = urlsplit(self.path)
        path, query = unquote(parts.path), {k: v[0] for k, v in parse_qs(parts.query).items()}
        repo = r"(?P<repo>[^/]+/[^/]+)"
        routes = [
            (rf"^/api/v1/models/{repo}/repo/files$", self._ms_files),
            (rf"^/api/v1/models/{repo}/repo$", self._ms_file),
            (rf"^/api/models/{repo}/tree/(?P<rev>[^/]+)(?:/(?P<sub>.*))?$", self._hf_tree),
            (rf"^/api/models/{repo}(?:/revision/(?P<rev>[^/]+))?$", self._hf_info),
            (rf"^/{repo}/resolve/(?P<rev>[^/]+)/(?P<file>.+)$", self._hf_resolve),
        ]
        for pattern, handler in routes:
            match = re.match(pattern, path)
            if match:
                args = {k: v for k, v in match.groupdict().items()}
                if args["repo"] not in hub.repos:
                    return self._json(404, {"Code": 10010205001, "Success": False, "Message": "model not exist",
                                            "error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                return handler(method, query, **args)
        self._json(404, {"error": "not found"})

    # -- ModelScope ----------------------------------------------------------------------------
    def _ms_rev_ok(self, repo: str, rev: str | None) -> bool:
        return rev in (None, "master", self.hub.commits[repo])

    def _ms_files(self, method, query, repo):
        if not self._ms_rev_ok(repo, query.get("Revision")):
            return self._json(404, {"Code": 10010205001, "Success": False, "Message": "revision not exist"})
        files = [{"Name": p.rsplit("/", 1)[-1], "Path": p, "Type": "blob", "Size": len(d),
                  "Sha256": hashlib.sha256(d).hexdigest(), "Revision": self.hub.commits[repo],
                  "IsLFS": p.endswith(LFS_SUFFIXES)} for p, d in sorted(self.hub.repos[repo].items())]
        self._json(200, {"Code": 200, "Success": True, "Data": {"Files": files}})

    def _ms_file(self, method, query, repo):
        name = query.get("FilePath", "")
        if not self._ms_rev_ok(repo, query.get("Revision")) or name not in self.hub.repos[repo]:
            return self._json(404, {"Code": 10010205001, "Success": False, "Message": "file not exist"})
        self._send_file(method, repo, name, {})

    # -- Hugging Face --------------------------------------------------------------------------
    def _hf_rev_ok(self, repo: str, rev: str | None) -> bool:
        return rev in (None, "main", self.hub.commits[repo])

    def _hf_missing_rev(self):
        self._json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})

    def _hf_info(self, method, query, repo, rev=None):
        if not self._hf_rev_ok(repo, rev):
            return self._hf_missing_rev()
        siblings = []
        for p, d in sorted(self.hub.repos[repo].items()):
            entry = {"rfilename": p}
            if query.get("blobs"):
                entry.update(size=len(d), blobId=_git_sha1(d))
                if p.endswith(LFS_SUFFIXES):
                    entry["lfs"] = {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d), "pointerSize": 134}
            siblings.append(entry)
        self._json(200, {"_id": "0", "id": repo, "modelId": repo, "sha": self.hub.commits[repo], "private": False,
                         "siblings": siblings, "tags": [], "downloads": 0, "likes": 0})

    def _hf_tree(self, method, query, repo, rev, sub=None):
        if not self._hf_rev_ok(repo, rev):
            return self._hf_missing_rev()
        items = []
        for p, d in sorted(self.hub.repos[repo].items()):
            item = {"type": "file", "path": p, "size": len(d), "oid": _git_sha1(d)}
            if p.endswith(LFS_SUFFIXES):
                item["lfs"] = {"oid": hashlib.sha256(d).hexdigest(), "size": len(d), "pointerSize": 134}
            items.append(item)
        self._json(200, items)

    def _hf_resolve(self, method, query, repo, rev, file):
        if not self._hf_rev_ok(repo, rev):
            return self._hf_missing_rev()
        if file not in self.hub.repos[repo]:
            return self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        data = self.hub.repos[repo][file]
        etag = hashlib.sha256(data).hexdigest() if file.endswith(LFS_SUFFIXES) else _git_sha1(data)
        self._send_file(method, repo, file, {"X-Repo-Commit": self.hub.commits[repo], "ETag": f'"{etag}"'})

    # -- transport -----------------------------------------------------------------------------
    def _json(self, status: int, body, headers: dict | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)

    def _send_file(self, method: str, repo: str, name: str, headers: dict) -> None:
        data = self.hub.content(repo, name)
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and (m := re.match(r"bytes=(\d+)-", rng)):
            start, status = int(m.group(1)), 206
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        body = data[start:]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if method == "HEAD":
            return
        cut = self.hub.take_cut(repo, name) if start == 0 else None
        if cut is not None:  # send part of the body, then drop the connection
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
