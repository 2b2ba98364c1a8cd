"""``director policy push``: send a policy to the admin API with the version it was edited
from.

The ETag of each push is kept beside the file (``FILE.etag``); the next push of the file
sends it as ``If-Match``, so the API answers 412 instead of overwriting a version someone
else stored meanwhile. ``--if-match`` names the version explicitly; ``--force`` sends none.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from policies.loader import PolicySources

TIMEOUT_S = 120.0  # the API runs both residency proofs before it answers


class PushError(Exception):
    """The API refused the policy or could not be reached; the message says why."""


@dataclass(frozen=True)
class Pushed:
    version: int
    etag: str
    sent: str | None  # the If-Match sent
    warnings: tuple[str, ...]


def etag_file(path: Path) -> Path:
    return path.with_name(path.name + ".etag")


def push_policy(api: str, token: str, path: Path, sources: PolicySources, *,
                if_match: str | None = None, force: bool = False) -> Pushed:
    """PUT ``sources`` to ``api``; raises ``PushError``. Sends ``if_match``, else the ETag
    of the last push of ``path`` (unless ``force``); records the new ETag beside ``path``."""
    sent = None if force else if_match or _last_etag(path)
    body = json.dumps({"name": sources.name, "text": sources.text,
                       "files": sources.files}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if sent:
        headers["If-Match"] = sent
    request = urllib.request.Request(f"{api.rstrip('/')}/api/v1/policy", data=body,
                                     headers=headers, method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
            answer = json.load(resp)
    except urllib.error.HTTPError as exc:
        raise PushError(_refusal(exc, sent)) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PushError(f"{api}: {exc}") from None
    etag = str(answer.get("etag", ""))
    try:
        etag_file(path).write_text(etag + "\n", encoding="utf-8")
    except OSError as exc:
        raise PushError(f"stored as version {answer.get('version')}, but cannot write "
                        f"{etag_file(path)}: {exc}") from None
    warnings = tuple(str(w.get("text", w)) for w in answer.get("warnings") or [])
    return Pushed(int(answer["version"]), etag, sent, warnings)


def _last_etag(path: Path) -> str | None:
    try:
        return etag_file(path).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def _refusal(exc: urllib.error.HTTPError, sent: str | None) -> str:
    try:
        body = json.loads(exc.read())
        message = str(body.get("error", body))
    except ValueError:
        body, message = {}, exc.reason
    if exc.code == 412:
        return (f"version {body.get('version')} was stored since {sent}: nothing changed. "
                f"Read it (GET /api/v1/policy), apply your change to it and push again "
                f"(--if-match {body.get('etag')}, or --force to replace it as it is)")
    return f"HTTP {exc.code}: {message}"
