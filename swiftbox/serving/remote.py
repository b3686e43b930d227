"""The client side of a running server's model routes: list the served models, load and unload LoRA adapters.

Used by `chat --url` (its `--adapters name=path` are loaded into the server; `/models`, `/load`, `/unload`,
`/use` in the session) and by the menu's Serve screen. Works against swiftbox and vLLM servers alike (the
same request shapes). Failures come back as one readable line (RemoteError), never a traceback.
"""
from __future__ import annotations

from typing import Optional


class RemoteError(RuntimeError):
    """The server refused (its own reason) or could not be reached."""


class Remote:
    def __init__(self, url: str, api_key: Optional[str] = None, timeout: float = 600):
        import httpx

        base = url.rstrip("/")
        self.base = base[:-3] if base.endswith("/v1") else base
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=self.base, headers=headers, timeout=timeout)

    def models(self) -> list[str]:
        data = self._call("GET", "/v1/models")
        return [m["id"] for m in data.get("data", [])] if isinstance(data, dict) else []

    def load(self, name: str, path: str) -> str:
        return str(self._call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}))

    def unload(self, name: str) -> str:
        return str(self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name}))

    def _call(self, method: str, path: str, body: Optional[dict] = None):
        import httpx

        try:
            r = self.http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise RemoteError(f"nothing answers at {self.base} ({type(exc).__name__})") from None
        if r.status_code >= 400:
            try:
                data = r.json()
                message = (data.get("error") or data).get("message") or r.text
            except (ValueError, AttributeError):
                message = r.text
            raise RemoteError(f"{r.status_code}: {' '.join(str(message).split())[:400]}")
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        return r.text.strip()

    def close(self) -> None:
        self.http.close()
