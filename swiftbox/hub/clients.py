"""Thin wrappers over the two hub clients: `modelscope` (default) and `huggingface_hub`.

Each hub does three things, and turns every failure into one swiftbox error line:

    probe(repo_id, revision) -> Listing   one metadata request with short timeouts and a hard deadline:
                                          the file list (sizes, sha256 where the hub gives it) and commit.
                                          Unreachable -> HubUnreachable (exit 2); unknown id -> UserError.
    snapshot(listing, ...) -> Path        the client's own snapshot_download into its own cache
                                          (resume, per-file retries and locking are the client's).
    verify(...)                           sha256 check the client does not do itself (Hugging Face).

Endpoints and caches are read from the environment at call time (not at client import time), so a mirror
set in the environment or a test's local hub always wins: MODELSCOPE_ENDPOINT (or the older
MODELSCOPE_DOMAIN), MODELSCOPE_CACHE, MODELSCOPE_API_TOKEN; HF_ENDPOINT, HF_HUB_CACHE / HF_HOME, HF_TOKEN.
"""
from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from swiftbox.errors import SwiftboxError, UserError

PROBE_CONNECT_S = 5.0


def probe_timeout() -> float:
    """Seconds the metadata request may wait for an answer (SWIFTBOX_HUB_TIMEOUT, default 12)."""
    try:
        return max(0.5, float(os.environ.get("SWIFTBOX_HUB_TIMEOUT") or 12))
    except ValueError:
        return 12.0


def probe_deadline() -> float:
    """Hard limit for the whole metadata request: DNS lookups ignore socket timeouts, this does not."""
    return probe_timeout() + 3


class HubUnreachable(UserError):
    """The hub could not be contacted at all (offline, DNS failure, connection refused): exit 2."""


class HubNoAnswer(SwiftboxError):
    """The hub accepted the connection but did not answer in time: a transient failure, exit 1."""


@dataclass
class RemoteFile:
    path: str
    size: Optional[int] = None
    sha256: Optional[str] = None


@dataclass
class Listing:
    hub: str                      # "modelscope" | "hf"
    repo_id: str
    revision: str                 # as requested (or the hub's default branch)
    commit: Optional[str]         # resolved commit where the hub reports one
    endpoint: str
    files: list[RemoteFile] = field(default_factory=list)


def _with_deadline(fn: Callable, seconds: float, what: str):
    """Run fn() in a daemon thread; a call that outlives `seconds` counts as an unreachable hub."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="swiftbox-hub-probe")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer from {what} within {seconds:.0f} s (DNS or connection)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _chain(exc: BaseException | None) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def is_read_timeout(exc: BaseException) -> bool:
    """The server accepted the connection but did not answer in time (requests / urllib3 / httpx)."""
    return any(type(e).__name__ in ("ReadTimeout", "ReadTimeoutError") for e in _chain(exc))


def network_reason(exc: BaseException) -> str:
    """A short human reason for a connection failure, from anywhere in the exception chain."""
    text = [f"{type(e).__name__}: {e}" for e in _chain(exc)]
    joined = " ".join(text).lower()
    for needle, reason in (("name or service not known", "host name does not resolve"),
                           ("nodename nor servname", "host name does not resolve"),
                           ("temporary failure in name resolution", "host name does not resolve"),
                           ("nameresolution", "host name does not resolve"),
                           ("connection refused", "connection refused"),
                           ("network is unreachable", "network is unreachable"),
                           ("no route to host", "no route to host"),
                           ("connecttimeout", "connection timed out"), ("connect timeout", "connection timed out"),
                           ("connection closed", "connection dropped mid-file"),
                           ("peer closed", "connection dropped mid-file"),
                           ("incompleteread", "connection dropped mid-file"),
                           ("no answer", "no answer"), ("timed out", "timed out"), ("timeout", "timed out")):
        if needle in joined:
            return reason
    return text[-1].split("\n")[0][:160] if text else "unknown network error"


class Hub:
    key = ""
    label = ""
    token_env = ""
    default_revision = ""
    client_checks_sha256 = False   # True: the client verifies every file against the listing's sha256

    def endpoint(self) -> str:
        raise NotImplementedError

    def cache_dir(self, override: Optional[str] = None) -> Path:
        raise NotImplementedError

    def hints(self) -> str:
        raise NotImplementedError

    def unreachable(self, repo_id: str, exc: BaseException) -> SwiftboxError:
        reason = network_reason(exc)
        cls = HubNoAnswer if is_read_timeout(exc) else HubUnreachable
        return cls(f"cannot reach {self.label} at {self.endpoint()} to fetch {repo_id} ({reason}); {self.hints()}"
                   + ("; or raise SWIFTBOX_HUB_TIMEOUT on a slow link" if cls is HubNoAnswer else ""))

    def not_found(self, repo_id: str, revision: Optional[str]) -> UserError:
        from swiftbox.catalog.presets import close_matches

        at = f" at revision {revision!r}" if revision else ""
        matches = close_matches(repo_id)
        hint = f"; did you mean {' or '.join(matches)}?" if matches else ""
        other = "modelscope" if self.key == "hf" else "hf"
        return UserError(f"{self.label} ({self.endpoint()}) has no model {repo_id!r}{at}{hint} "
                         f"(presets: ./launch.sh models; other hub: --source {other})")

    def not_a_hub(self, repo_id: str, status: int) -> UserError:
        env = "HF_ENDPOINT" if self.key == "hf" else "MODELSCOPE_ENDPOINT"
        return UserError(f"{self.endpoint()} answered HTTP {status} for {repo_id} without the {self.label} API's "
                         f"error details; is {env} a {self.label} hub or mirror?")

    def denied(self, repo_id: str, status: int) -> UserError:
        return UserError(f"{self.label} refused access to {repo_id} (HTTP {status}: private or gated model); "
                         f"accept its licence on the hub and set {self.token_env}")

    def transient(self, repo_id: str, detail: str) -> SwiftboxError:
        return SwiftboxError(f"{self.label} download of {repo_id} failed: {detail} (transient network error); "
                             "run the same command again - finished files are kept and reused")

    def probe(self, repo_id: str, revision: Optional[str]) -> Listing:
        raise NotImplementedError

    def snapshot(self, listing: Listing, *, allow: Optional[list[str]], ignore: list[str], cache_dir: Path) -> Path:
        raise NotImplementedError


class ModelScopeHub(Hub):
    key = "modelscope"
    label = "ModelScope"
    token_env = "MODELSCOPE_API_TOKEN"
    default_revision = "master"
    client_checks_sha256 = True

    def endpoint(self) -> str:
        value = (os.environ.get("MODELSCOPE_ENDPOINT") or os.environ.get("MODELSCOPE_DOMAIN") or "").strip()
        if not value:
            return "https://www.modelscope.cn"
        return (value if value.lower().startswith(("http://", "https://")) else f"https://{value}").rstrip("/")

    def cache_dir(self, override: Optional[str] = None) -> Path:
        if override:
            return Path(override).expanduser()
        # modelscope >= 1.38 (modelscope_hub): <root>/models/ORG--NAME/snapshots/REV; it also reuses the
        # older <root>/hub/models/ORG/NAME layout by itself
        return Path(os.environ.get("MODELSCOPE_CACHE") or Path.home() / ".cache" / "modelscope").expanduser()

    def hints(self) -> str:
        return ("try: MODELSCOPE_ENDPOINT=<reachable mirror>, or --source hf (HF_ENDPOINT=https://hf-mirror.com "
                "for the mirror), or a local model directory")

    def _token(self) -> Optional[str]:
        """MODELSCOPE_API_TOKEN, else a saved `modelscope login` (read by the client's own config)."""
        if os.environ.get(self.token_env):
            return os.environ[self.token_env]
        home = Path(os.environ.get("MODELSCOPE_HOME") or Path.home() / ".modelscope").expanduser()
        if not (home / "credentials" / "cookies").is_file():
            return None
        from modelscope_hub.config import get_default_config

        return get_default_config().token

    def probe(self, repo_id: str, revision: Optional[str]) -> Listing:
        import requests

        endpoint = self.endpoint()
        rev = revision or self.default_revision
        headers = {"User-Agent": "swiftbox (modelscope probe)"}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"

        def get():
            return requests.get(f"{endpoint}/api/v1/models/{repo_id}/repo/files",
                                params={"Revision": rev, "Recursive": "True"}, headers=headers,
                                timeout=(PROBE_CONNECT_S, probe_timeout()))

        try:
            resp = _with_deadline(get, probe_deadline(), endpoint)
        except (requests.ConnectionError, requests.Timeout, TimeoutError, OSError) as exc:
            raise self.unreachable(repo_id, exc) from None
        if resp.status_code in (401, 403):
            raise self.denied(repo_id, resp.status_code)
        if resp.status_code >= 500:
            raise self.transient(repo_id, f"HTTP {resp.status_code} from {endpoint}")
        try:
            body = resp.json()
        except ValueError:
            raise self.not_a_hub(repo_id, resp.status_code) from None
        if resp.status_code == 404:
            raise self.not_found(repo_id, revision) if isinstance(body, dict) else self.not_a_hub(repo_id, 404)
        data = body.get("Data") if isinstance(body, dict) else None
        if resp.status_code >= 400 or (isinstance(body, dict) and body.get("Success") is False) or data is None:
            message = str(body.get("Message") or "") if isinstance(body, dict) else ""
            if "not exist" in message.lower() or "不存在" in message:
                raise self.not_found(repo_id, revision)
            raise SwiftboxError(f"{self.label} listing of {repo_id} failed: HTTP {resp.status_code} {message[:120]}")
        entries = data.get("Files", []) if isinstance(data, dict) else data
        files, commits = [], set()
        for entry in entries or []:
            if (entry.get("Type") or "blob") == "tree" or not entry.get("Path"):
                continue
            files.append(RemoteFile(entry["Path"], _int(entry.get("Size")), entry.get("Sha256") or None))
            if entry.get("Revision"):
                commits.add(entry["Revision"])
        commit = commits.pop() if len(commits) == 1 else None
        return Listing(self.key, repo_id, rev, commit, endpoint, files)

    def snapshot(self, listing: Listing, *, allow, ignore, cache_dir: Path) -> Path:
        from modelscope.hub.snapshot_download import snapshot_download

        try:
            path = snapshot_download(listing.repo_id, revision=listing.revision, cache_dir=str(cache_dir),
                                     allow_patterns=allow, ignore_patterns=ignore or None,
                                     endpoint=listing.endpoint, max_workers=4)
        except Exception as exc:
            raise self._mapped(listing.repo_id, exc) from None
        return Path(path)

    def _mapped(self, repo_id: str, exc: Exception) -> SwiftboxError:
        from modelscope_hub.errors import FileIntegrityError

        failed = getattr(exc, "failed_files", None) or {}
        for name, err in list(failed.items()) + [("", exc)]:
            if isinstance(err, FileIntegrityError):
                return SwiftboxError(f"{self.label} served {name or 'a file'} of {repo_id} with the wrong checksum "
                                     f"(sha256 mismatch after retries); the bad copy was discarded - run again later "
                                     f"or use another mirror / --source hf")
        first = next(iter(failed.values()), exc)
        return self.transient(repo_id, network_reason(first))


class HuggingFaceHub(Hub):
    key = "hf"
    label = "Hugging Face"
    token_env = "HF_TOKEN"
    default_revision = "main"

    def endpoint(self) -> str:
        return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").strip().rstrip("/")

    def cache_dir(self, override: Optional[str] = None) -> Path:
        if override:
            return Path(override).expanduser()
        if os.environ.get("HF_HUB_CACHE"):
            return Path(os.environ["HF_HUB_CACHE"]).expanduser()
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        home = os.environ.get("HF_HOME") or cache / "huggingface"
        return Path(home).expanduser() / "hub"

    def hints(self) -> str:
        return ("try: HF_ENDPOINT=https://hf-mirror.com (or another mirror), or --source modelscope, "
                "or a local model directory")

    def probe(self, repo_id: str, revision: Optional[str]) -> Listing:
        import httpx2
        from huggingface_hub import HfApi
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        endpoint = self.endpoint()
        api = HfApi(endpoint=endpoint)
        try:
            info = _with_deadline(lambda: api.model_info(repo_id, revision=revision, files_metadata=True,
                                                         timeout=probe_timeout()), probe_deadline(), endpoint)
        except RevisionNotFoundError:
            raise self.not_found(repo_id, revision) from None
        except GatedRepoError:
            raise self.denied(repo_id, 403) from None
        except RepositoryNotFoundError:  # HF answers 401 for unknown ids without a token, too
            raise self.not_found(repo_id, None) from None
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            if status in (401, 403):
                raise self.denied(repo_id, status) from None
            if status == 404:
                raise self.not_a_hub(repo_id, 404) from None
            raise self.transient(repo_id, f"HTTP {status} from {endpoint}") from None
        except (httpx2.TransportError, TimeoutError, OSError) as exc:
            raise self.unreachable(repo_id, exc) from None
        files = [RemoteFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs else None) for s in info.siblings or []]
        return Listing(self.key, repo_id, revision or self.default_revision, info.sha, endpoint, files)

    def snapshot(self, listing: Listing, *, allow, ignore, cache_dir: Path) -> Path:
        import httpx2
        from huggingface_hub import snapshot_download

        try:  # the commit pins every file to what the probe listed
            path = snapshot_download(listing.repo_id, revision=listing.commit or listing.revision,
                                     cache_dir=str(cache_dir), allow_patterns=allow, ignore_patterns=ignore or None,
                                     endpoint=listing.endpoint, max_workers=4)
        except (httpx2.TransportError, OSError) as exc:
            raise self.transient(listing.repo_id, network_reason(exc)) from None
        except Exception as exc:
            raise self.transient(listing.repo_id, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}") from None
        return Path(path)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def _int(value) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


HUBS: dict[str, Hub] = {"modelscope": ModelScopeHub(), "hf": HuggingFaceHub()}
