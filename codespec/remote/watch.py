"""The remote engine's watch, on its event loop: which URLs are there at all.

While a URL is down it is asked now and then whether it is back, so the editors' status
recovers without a request having to fail first; a URL that has gone silent while requests
wait on it is asked whether it is there (``health.py`` keeps the verdicts). Each question is a
task of its own: a server that never answers holds up no other.
"""

from __future__ import annotations

import asyncio
from functools import partial

import httpx

from .config import RemoteConfig
from .health import Health

PROBE_EVERY_S = 2.0  # while a URL is down, how often it is asked whether it is back
WATCH_EVERY_S = 0.5  # how often the loop looks for silent URLs
# A URL asked and silent this long (or the first-token timeout, if shorter) is probed: gone or
# busy. A probe is one small GET; probing early tells "gone" well before the timeouts would.
SILENCE_PROBE_S = 3.0


class Watch:
    """Asks the URLs of ``health`` what the module's docstring says, through ``client``."""

    def __init__(
        self, health: Health, client: httpx.AsyncClient, config: RemoteConfig, headers: dict
    ) -> None:
        self.health = health
        self.client = client
        self.config = config
        self.headers = headers

    async def forever(self) -> None:
        """Ask, until cancelled (the module's docstring)."""
        patience = min(self.config.first_token_timeout_s, SILENCE_PROBE_S)
        asking: dict[str, asyncio.Task] = {}  # (held here: the loop keeps only weak references)

        async def whether_back(url: str, stuck: bool) -> None:
            # serving: it lists its models; a stuck one did that all along, so it is asked for
            # a completion of one token
            serving = await self._completes(url) if stuck else await self._answer(url, "/v1/models")
            if serving == 200:
                self.health.succeeded(url)

        async def whether_there(url: str) -> None:
            # Any answer will do, even a 404: llama-cpp-python's server lists its models only
            # between two completions, but its HTTP front answers while the model computes.
            if await self._answer(url, "/health") is None:
                why = f"no text in {patience:.0f} s, and no answer to a probe"
                self.health.failed(url, why, hangs=True)
            else:
                self.health.answered_while_silent(url, patience, self.config.first_token_timeout_s)

        ticks = 0
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            ticks += 1
            due = [(url, partial(whether_there, url)) for url in self.health.silent(patience)]
            if ticks % round(PROBE_EVERY_S / WATCH_EVERY_S) == 0:
                due += [
                    (url, partial(whether_back, url, stuck))
                    for url, stuck in self.health.due_for_probe()
                ]
            for url, ask in due:
                if url not in asking or asking[url].done():  # (never asked twice at once)
                    asking[url] = asyncio.ensure_future(ask())

    async def _completes(self, url: str) -> int | None:
        """The status of a one-token completion at ``url``, or None when nothing answers within
        the first-token timeout."""
        body: dict = {"prompt": "\n", "max_tokens": 1, "temperature": 0.0, "stream": False}
        if self.config.model:
            body["model"] = self.config.model
        try:
            reply = await self.client.post(
                url + "/v1/completions",
                json=body,
                headers=self.headers,
                timeout=self.config.first_token_timeout_s,
            )
        except httpx.HTTPError:
            return None
        return reply.status_code

    async def _answer(self, url: str, path: str) -> int | None:
        """The status of ``GET path`` at ``url``, or None when nothing answers in time."""
        try:
            reply = await self.client.get(
                url + path, headers=self.headers, timeout=self.config.connect_timeout_s
            )
        except httpx.HTTPError:
            return None
        return reply.status_code
