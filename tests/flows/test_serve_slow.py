"""Slow suite for the server: a bounded burst (300 requests at 16 concurrent, some malformed, some cancelled
mid-stream) with no 5xx and a healthy server after; and schemathesis fuzzing the OpenAPI spec for the 4xx
contract (never a 5xx)."""
from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest

from tests.support.serve_fixtures import KEY, make_adapter, start_server

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def live(toy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    server, names, stop = start_server("toy", adapters={"alpha": str(make_adapter(toy_dir, root / "a", 1))},
                                       max_model_len=128, max_batch_size=8, work_dir=root)
    yield server
    stop()


def _requests(n: int, seed: int = 0) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    msg = [{"role": "user", "content": "Is 5 odd?"}]
    kinds = []
    for _ in range(n):
        roll = rng.random()
        model = rng.choice(["toy", "alpha"])
        if roll < 0.15:
            kinds.append(("malformed", rng.choice([
                {"content": b"{oops"}, {"json": {"model": model}}, {"json": {"model": "ghost", "messages": msg}},
                {"json": {"model": model, "messages": msg, "temperature": -1}},
                {"json": {"model": model, "prompt": "x " * 400, "max_tokens": 4}, "path": "/v1/completions"},
                {"json": {"model": model, "messages": msg, "max_tokens": 10 ** 6}},
            ])))
        elif roll < 0.30:
            kinds.append(("cancel", {"json": {"model": model, "messages": msg, "max_tokens": 64, "stream": True}}))
        elif roll < 0.65:
            kinds.append(("stream", {"json": {"model": model, "messages": msg, "max_tokens": rng.randint(1, 12),
                                              "stream": True, "stream_options": {"include_usage": True}}}))
        else:
            path = rng.choice(["/v1/chat/completions", "/v1/completions"])
            body = {"model": model, "max_tokens": rng.randint(1, 12), "temperature": rng.choice([0, 0.8])}
            body.update({"messages": msg} if "chat" in path else {"prompt": "Is 5 odd?"})
            kinds.append(("plain", {"json": body, "path": path}))
    return kinds


def test_burst_no_5xx_and_healthy_after(live):
    statuses: list[int] = []

    async def one(client, kind, spec):
        path = spec.pop("path", "/v1/chat/completions")
        headers = dict(AUTH, **({"content-type": "application/json"} if "content" in spec else {}))
        if kind in ("stream", "cancel"):
            async with client.stream("POST", live.url + path, headers=headers, **spec) as resp:
                statuses.append(resp.status_code)
                seen = 0
                async for line in resp.aiter_lines():
                    if line:
                        seen += 1
                    if kind == "cancel" and seen >= 2:
                        return  # leave mid-stream: the server must free the slot
                    if line == "data: [DONE]":
                        return
                assert kind == "cancel" or resp.status_code != 200, "stream ended without [DONE]"
        else:
            resp = await client.post(live.url + path, headers=headers, **spec)
            statuses.append(resp.status_code)
            if resp.status_code != 200:
                assert "error" in resp.json()

    async def main():
        sem = asyncio.Semaphore(16)
        async with httpx.AsyncClient(timeout=120) as client:
            async def bounded(kind, spec):
                async with sem:
                    await one(client, kind, spec)
            await asyncio.wait_for(asyncio.gather(*[bounded(k, s) for k, s in _requests(300)]), timeout=600)

    started = time.monotonic()
    asyncio.run(main())
    assert len(statuses) == 300 and not [s for s in statuses if s >= 500], sorted(set(statuses))
    assert {200, 400, 404, 422} <= set(statuses)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        load = httpx.get(live.url + "/metrics", headers=AUTH, timeout=10).text
        if "swiftbox_num_requests_running 0.0" in load and "swiftbox_num_requests_waiting 0.0" in load:
            break
        time.sleep(0.2)
    assert "swiftbox_num_requests_running 0.0" in load and "swiftbox_engine_errors_total 0.0" in load
    assert httpx.get(live.url + "/health", timeout=10).status_code == 200
    r = httpx.post(live.url + "/v1/chat/completions", headers=AUTH, timeout=60,
                   json={"model": "toy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert r.status_code == 200
    print(f"burst: 300 requests in {time.monotonic() - started:.1f}s")


def test_schemathesis_openapi_contract(live):
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error

    schema = schemathesis.openapi.from_url(live.url + "/openapi.json", headers=AUTH)
    failures = []
    for op in schema.get_all_operations():
        operation = op.ok()

        @settings(max_examples=25, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def check(case):
            case.call_and_validate(base_url=live.url, headers=AUTH, checks=[not_a_server_error], timeout=120)

        try:
            check()
        except Exception as exc:  # collect, so one report names every failing route
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:400]}")
    assert not failures, "\n".join(failures)
    assert httpx.get(live.url + "/health", timeout=10).status_code == 200
