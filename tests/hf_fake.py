"""A small Hugging Face Hub stand-in on 127.0.0.1 for the real huggingface_hub client.

It answers the calls an upload makes (whoami, dataset info, repo creation,
preupload, commit) and keeps what it receives, so tests can check that the
repo was created private and the file landed with the expected bytes.
"""

import base64
import contextlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USER = "tester"


class Hub:
    """*refuse*: repo paths whose commit is answered 422; *stall*: repo paths whose commit is never answered;
    *drip*: repo paths whose commit answer comes one byte every *drip_s* seconds, never finishing."""

    def __init__(self, refuse=(), stall=(), drip=(), drip_s=0.3):
        self.repos: dict[str, dict] = {}  # repo_id -> {"private": bool, "files": {path: bytes}}
        self.requests: list[tuple[str, str, dict]] = []
        self.token_seen: set[str] = set()
        self.refuse, self.stall, self.drip, self.drip_s = set(refuse), set(stall), set(drip), drip_s
        self.release = threading.Event()  # set at exit: stalled handlers end
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body=None, headers=None):
                data = json.dumps(body if body is not None else {}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _drip(self):
                """Headers, then a byte at a time, each well inside any read timeout, until the hub closes."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "1000000")
                self.end_headers()
                self.wfile.flush()
                while not hub.release.wait(hub.drip_s):
                    try:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    except OSError:
                        return

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _auth(self):
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
                hub.token_seen.add(token)
                return token

            def do_GET(self):
                self._auth()
                hub.requests.append(("GET", self.path, {}))
                path = self.path.split("?")[0]
                if path == "/api/whoami-v2":
                    return self._send(200, {"name": USER, "type": "user", "auth": {"accessToken": {"role": "write"}}})
                if path.startswith("/api/datasets/"):
                    repo_id = "/".join(path.split("/")[3:5])
                    repo = hub.repos.get(repo_id)
                    if repo is None:
                        return self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                    return self._send(200, {"id": repo_id, "private": repo["private"], "sha": "0" * 40,
                                            "siblings": [{"rfilename": f} for f in repo["files"]]})
                return self._send(404, {"error": "not found"})

            def do_POST(self):
                self._auth()
                body = self._body()
                path = self.path.split("?")[0]
                hub.requests.append(("POST", path, {}))
                if path == "/api/repos/create":
                    req = json.loads(body)
                    repo_id = f"{req.get('organization') or USER}/{req['name']}"
                    if repo_id in hub.repos:
                        return self._send(409, {"error": "You already created this dataset repo"})
                    private = req.get("visibility", "private" if req.get("private") else "public") != "public"
                    hub.repos[repo_id] = {"private": private, "files": {}, "type": req.get("type")}
                    return self._send(200, {"url": f"{hub.url}/datasets/{repo_id}", "name": repo_id})
                parts = path.split("/")
                if len(parts) >= 7 and parts[1] == "api" and parts[2] == "datasets":
                    repo_id = f"{parts[3]}/{parts[4]}"
                    action = parts[5]
                    if action == "preupload":
                        files = json.loads(body).get("files", [])
                        return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                           "shouldIgnore": False} for f in files]})
                    if action == "commit":
                        files = {}
                        for line in body.decode().splitlines():
                            if not line.strip():
                                continue
                            item = json.loads(line)
                            if item.get("key") == "file":
                                value = item["value"]
                                files[value["path"]] = base64.b64decode(value["content"])
                        if set(files) & hub.stall:
                            hub.release.wait(120)
                            return
                        if set(files) & hub.drip:
                            return self._drip()
                        if set(files) & hub.refuse:
                            return self._send(422, {"error": "Invalid path in repo"})
                        hub.repos[repo_id]["files"].update(files)
                        return self._send(200, {"commitUrl": f"{hub.url}/datasets/{repo_id}/commit/1",
                                                "commitOid": "1" * 40, "success": True})
                return self._send(404, {"error": "not found"})

        return Handler


class Silent:
    """An endpoint that accepts connections and reads requests but never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def __enter__(self):
        self.thread.start()
        return self

    def request_lines(self) -> list[str]:
        """The first line of the request each connection sent (read once the client is done with them)."""
        lines = []
        for conn in list(self.conns):
            conn.settimeout(5)
            with contextlib.suppress(OSError):
                lines.append(conn.recv(65536).split(b"\r\n", 1)[0].decode(errors="replace"))
        return lines

    def __exit__(self, *exc):
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self.conns:
            conn.close()
