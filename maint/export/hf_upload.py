"""Uploading traces to the user's Hugging Face dataset with the real huggingface_hub client.

The dataset is ``<user>/hermes-traces``, created private. ``create_repo`` with
``exist_ok`` leaves an existing public dataset public, so its visibility is
checked first and an upload into a public one is refused unless asked for.
The token comes from HF_TOKEN and is scrubbed from every message we print.

Every request has connect, read, write and pool timeouts (``HERMES_MAINT_HTTP_TIMEOUT_S``,
default 60 s): huggingface_hub's own client has none, and several of its calls pass
``timeout=None`` explicitly, so the limit is set on each request by the transport rather than
as a client default. Each request also has a total deadline (``HERMES_MAINT_HTTP_DEADLINE_S``,
default 900 s), because an endpoint that drips a byte inside every read timeout would otherwise
hold the upload forever. A request that times out ends the upload at once with the endpoint named;
it is not retried (huggingface_hub retries timeouts five times with back-off). Xet storage is
turned off for our uploads because hf_xet's own network stack would bypass these limits.
Every repo path is checked before the first request, and the result is reported per file.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

from maint.errors import MaintError
from maint import settings

DATASET = "hermes-traces"
TIMEOUT_ENV = settings.SETTINGS["http_timeout_s"].env
DEADLINE_ENV = settings.SETTINGS["http_deadline_s"].env
_REPO_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_MAX_NAME_BYTES = 255  # the file name in the repo, ".jsonl" included


class HubTimeout(Exception):
    """A request to the Hub that did not complete in time; deliberately not an httpx error, so it is not retried."""

    def __init__(self, method: str, url: str, seconds: float, kind: str, setting: str = TIMEOUT_ENV):
        super().__init__(f"{method} {url}: no {kind} within {seconds:g} s")
        self.method, self.url, self.seconds, self.kind, self.setting = method, url, seconds, kind, setting


def http_timeout() -> float:
    """Seconds each Hub request may take to connect, and between bytes read or written."""
    return settings.value("http_timeout_s")


def http_deadline() -> float:
    """Seconds each Hub request may take from its first byte sent to its answer's last byte read."""
    return settings.value("http_deadline_s")


def install_timeouts(seconds: float, deadline: float) -> None:
    """Make huggingface_hub's shared client enforce *seconds* and *deadline* on every request (idempotent)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import httpx, set_client_factory

    class TimeoutTransport(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()

        def handle_request(self, request):
            _limit(request, seconds)
            done: dict[str, Any] = {}
            worker = threading.Thread(target=self._send, args=(request, done), daemon=True)
            worker.start()
            worker.join(deadline)
            if worker.is_alive():
                # Closing the pool ends the stalled read; the daemon thread is left to finish its error.
                stalled, self.inner = self.inner, httpx.HTTPTransport()
                stalled.close()
                raise HubTimeout(request.method, str(request.url), deadline, "complete answer", DEADLINE_ENV)
            exc = done.get("error")
            if isinstance(exc, httpx.TimeoutException):
                kind = {httpx.ConnectTimeout: "connection", httpx.WriteTimeout: "upload progress",
                        httpx.PoolTimeout: "free connection"}.get(type(exc), "answer")
                raise HubTimeout(request.method, str(request.url), seconds, kind) from None
            if exc is not None:
                raise exc
            return done["response"]

        def _send(self, request, done: dict[str, Any]) -> None:
            try:
                response = self.inner.handle_request(request)
                response.read()  # the body too, inside the limits: a stalled body is a timeout like any other
                done["response"] = response
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                done["error"] = exc

        def close(self) -> None:
            self.inner.close()

    def factory():
        # huggingface_hub's request hook (request ids, offline mode) plus ours for proxied requests,
        # which go through transports of httpx's own making.
        hooks = {"request": [*_library_request_hooks(), lambda request: _limit(request, seconds)]}
        return httpx.Client(transport=TimeoutTransport(), event_hooks=hooks, follow_redirects=True,
                            timeout=httpx.Timeout(seconds))

    constants.HF_HUB_DISABLE_XET = True
    set_client_factory(factory)


def _library_request_hooks() -> list:
    try:
        from huggingface_hub.utils._http import hf_request_event_hook
    except ImportError:  # pragma: no cover - a private helper; without it requests only lose their id header
        return []
    return [hf_request_event_hook]


def _limit(request: Any, seconds: float) -> None:
    """Cap each of the request's timeouts at *seconds*; a missing (None) one becomes *seconds*."""
    given = request.extensions.get("timeout") or {}
    request.extensions["timeout"] = {
        key: seconds if given.get(key) is None else min(given[key], seconds)
        for key in ("connect", "read", "write", "pool")}


KEPT = "the local files were kept"
REMOVED = "the temporary trace file was removed (give OUTPUT to keep a local copy)"


def _token(local_note: str = KEPT) -> str:
    token = (os.environ.get("HF_TOKEN") or "").strip()
    if not token:
        raise MaintError(f"no Hugging Face token: set HF_TOKEN to a token with write access ({local_note})")
    return token


def _scrub(text: str, token: str) -> str:
    return text.replace(token, "[HF_TOKEN]") if token else text


def _first_line(exc: BaseException, token: str) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return _scrub(text, token)


def repo_paths(files: list[tuple[str, Path]]) -> list[str]:
    """``sessions/<name>.jsonl`` for each file, every one checked before anything is sent.

    *name* is the sanitised local name (never a raw session id): letters, digits, ``.``, ``_``
    and ``-``, not starting with a dot, at most 255 bytes with the suffix, and unique, so no
    upload can land outside ``sessions/`` or overwrite another in the same run.
    """
    paths, seen = [], {}
    for name, path in files:
        file_name = f"{name}.jsonl"
        if not _REPO_NAME.fullmatch(name) or len(file_name.encode()) > _MAX_NAME_BYTES:
            raise MaintError(f"{path}: {name!r} is not a valid file name in the dataset (expected letters, digits, "
                             "'.', '_' and '-', not starting with '.', at most 255 bytes); nothing was uploaded")
        in_repo = f"sessions/{file_name}"
        if in_repo in seen:
            raise MaintError(f"{path} and {seen[in_repo]} would both upload to {in_repo}; nothing was uploaded")
        seen[in_repo] = path
        paths.append(in_repo)
    return paths


def upload_traces(files: list[tuple[str, Path]], *, public: bool = False,
                  local_note: str = KEPT) -> list[dict[str, Any]]:
    """Upload ``(name, path)`` pairs into ``sessions/<name>.jsonl``; one result per file, in order.

    Each result is ``{file, repo, path_in_repo, ok, error}``. A refusal before the first upload
    (no token, bad path, public dataset, unreachable endpoint) raises :class:`MaintError`. Once
    uploads have begun, a file the Hub refuses is reported and the next one is tried; when the
    endpoint stops answering, the remaining files are reported as not attempted. Local files
    are kept either way; *local_note* says what happens to them in a refusal (:data:`KEPT`, or
    :data:`REMOVED` for the temporary file of ``--upload`` without OUTPUT, which goes when the command ends).
    """
    in_repo = repo_paths(files)
    seconds, deadline = http_timeout(), http_deadline()
    token = _token(local_note)
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import RepositoryNotFoundError
    except ImportError:  # pragma: no cover - a declared dependency
        raise MaintError("huggingface_hub is not installed") from None
    install_timeouts(seconds, deadline)
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    endpoint = api.endpoint
    try:
        user = api.whoami().get("name")
        if not user:
            raise MaintError(f"the Hugging Face token did not resolve to a user name at {endpoint}")
        repo_id = f"{user}/{DATASET}"
        try:
            info = api.dataset_info(repo_id, timeout=seconds)
            if not info.private and not public:
                raise MaintError(f"dataset {repo_id} is public; refusing to upload traces into it "
                                 f"(pass --public if that is what you want); {local_note}")
        except RepositoryNotFoundError:
            api.create_repo(repo_id=repo_id, repo_type="dataset", private=not public, exist_ok=True)
    except MaintError:
        raise
    except HubTimeout as exc:
        raise MaintError(f"the Hugging Face endpoint {endpoint} did not answer ({exc}; set {exc.setting} to "
                         f"wait longer); nothing was uploaded, {local_note}") from None
    except Exception as exc:  # noqa: BLE001 - any client failure is one clear line, token scrubbed
        raise MaintError(f"upload to Hugging Face ({endpoint}) failed: {_first_line(exc, token)}; nothing was "
                         f"uploaded, {local_note}") from None
    results: list[dict[str, Any]] = []
    stalled = None
    for (name, path), target in zip(files, in_repo):
        result = {"file": str(path), "repo": repo_id, "path_in_repo": target, "ok": False, "error": None}
        results.append(result)
        if stalled is not None:
            result["error"] = f"not attempted: {stalled}"
            continue
        try:
            api.upload_file(path_or_fileobj=str(path), path_in_repo=target, repo_id=repo_id, repo_type="dataset",
                            commit_message=f"add session trace {name}")
            result["ok"] = True
        except HubTimeout as exc:
            stalled = f"the endpoint {endpoint} stopped answering ({exc})"
            result["error"] = stalled
        except Exception as exc:  # noqa: BLE001 - reported for this file; the next one is tried
            result["error"] = _first_line(exc, token)
    return results
