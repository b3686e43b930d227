"""/metrics counts a server error as the 500 the client got (issue 43, class 5): a bug in a route used to be
recorded as 499 ("client went away"), so a load test reading the scrape could not see its 500s."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _count(scrape: str, route: str, status: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(scrape):
        for sample in family.samples:
            if (sample.name == "swiftbox_http_requests_total" and sample.labels.get("route") == route
                    and sample.labels.get("status") == status):
                return sample.value
    return 0.0


def test_a_forced_500_is_counted_as_500(toy_dir, monkeypatch):
    from swiftbox.device import current_platform
    from swiftbox.serving.app import build_app
    from swiftbox.serving.launch import open_backend
    from swiftbox.serving.server import ServerThread
    from swiftbox.steps import ServeStep

    cfg = ServeStep(engine="builtin", max_model_len=128, max_batch_size=2, metrics_public=True)
    backend, names, close = open_backend(cfg, str(toy_dir), current_platform("cpu"), work_dir=Path("."),
                                         log=lambda m: None)

    async def broken_chat(req, request):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(backend, "chat", broken_chat)
    server = ServerThread(build_app(backend, metrics_public=True)).start()
    try:
        body = {"model": names.primary, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        answers = [httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30) for _ in range(3)]
        assert [a.status_code for a in answers] == [500, 500, 500]
        assert answers[0].json()["error"]["type"] == "server_error"
        scrape = httpx.get(server.url + "/metrics", timeout=30).text
        assert _count(scrape, "/v1/chat/completions", "500") == 3, scrape
        assert _count(scrape, "/v1/chat/completions", "499") == 0
    finally:
        server.stop()
        close()
