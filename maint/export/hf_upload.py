"""Uploading traces to the user's Hugging Face dataset with the real huggingface_hub client.

The dataset is ``<user>/hermes-traces``, created private. ``create_repo`` with
``exist_ok`` leaves an existing public dataset public, so its visibility is
checked first and an upload into a public one is refused unless asked for.
The token comes from HF_TOKEN and is scrubbed from every message we print.
"""

from __future__ import annotations

import os
from pathlib import Path

from maint.errors import MaintError

DATASET = "hermes-traces"


def _token() -> str:
    token = (os.environ.get("HF_TOKEN") or "").strip()
    if not token:
        raise MaintError("no Hugging Face token: set HF_TOKEN to a token with write access "
                         "(the local trace file was kept)")
    return token


def _scrub(text: str, token: str) -> str:
    return text.replace(token, "[HF_TOKEN]") if token else text


def upload_traces(files: list[tuple[str, Path]], *, public: bool = False) -> list[str]:
    """Upload ``(session_id, path)`` pairs; returns the paths in the repo. Local files are kept either way."""
    token = _token()
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import RepositoryNotFoundError
    except ImportError:  # pragma: no cover - a declared dependency
        raise MaintError("huggingface_hub is not installed") from None
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    try:
        user = api.whoami().get("name")
        if not user:
            raise MaintError("the Hugging Face token did not resolve to a user name")
        repo_id = f"{user}/{DATASET}"
        try:
            info = api.dataset_info(repo_id)
            if not info.private and not public:
                raise MaintError(f"dataset {repo_id} is public; refusing to upload traces into it "
                                 "(pass --public if that is what you want); the local file was kept")
        except RepositoryNotFoundError:
            api.create_repo(repo_id=repo_id, repo_type="dataset", private=not public, exist_ok=True)
        done = []
        for session_id, path in files:
            in_repo = f"sessions/{session_id}.jsonl"
            api.upload_file(path_or_fileobj=str(path), path_in_repo=in_repo, repo_id=repo_id, repo_type="dataset",
                            commit_message=f"add session trace {session_id}")
            done.append(f"{repo_id}/{in_repo}")
        return done
    except MaintError:
        raise
    except Exception as exc:  # noqa: BLE001 - any client failure is one clear line, token scrubbed
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MaintError(f"upload to Hugging Face failed: {_scrub(first, token)}; the local file was kept") from None
