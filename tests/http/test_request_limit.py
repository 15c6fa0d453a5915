"""The HTTP front counts requests in flight, not connections: past its limit a request is
answered 503 with a message, and the start-up checks are never refused."""

from __future__ import annotations

import asyncio

import httpx

from codespec.server.http.app import RequestLimit


def test_requests_past_the_limit_get_a_503_and_health_never_does():
    release = asyncio.Event()

    async def slow_app(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main() -> list[int]:
        limit = RequestLimit(slow_app, limit=2)
        transport = httpx.ASGITransport(app=limit)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            running = [asyncio.ensure_future(client.post("/infill", json={})) for _ in range(2)]
            await asyncio.sleep(0.05)
            refused = await client.post("/infill", json={})
            health = asyncio.ensure_future(client.get("/health"))
            await asyncio.sleep(0.05)
            assert limit.running == 2 and not health.done()  # (let through, not refused)
            release.set()
            statuses = [r.status_code for r in await asyncio.gather(*running, health)]
            assert "requests at once" in refused.json()["error"]["message"]
            after = await client.post("/infill", json={})  # the count came back down
            return [refused.status_code, *statuses, after.status_code, limit.running]

    assert asyncio.run(main()) == [503, 200, 200, 200, 200, 0]
