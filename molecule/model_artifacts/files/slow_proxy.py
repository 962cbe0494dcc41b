#!/usr/bin/env python3
"""A TCP proxy that throttles the server-to-client direction: a slow mirror for tests.

    slow_proxy.py LISTEN_PORT TARGET_PORT BYTES_PER_SECOND [AUTH_LOG]

Both on 127.0.0.1. The scenario points HF_ENDPOINT at it to make a download last long
enough to be killed mid-transfer. With AUTH_LOG, the sha256 of each distinct bearer token
seen in a request is appended there (never the token): proof that the client did send
the token that must appear nowhere else.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import sys

BEARER = re.compile(rb"^authorization:\s*bearer\s+(\S+)\r?$", re.IGNORECASE | re.MULTILINE)


async def pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rate: int, auth_log: str = ""
) -> None:
    chunk = max(rate // 10, 1024) if rate else 65536
    seen: set[str] = set()
    try:
        while data := await reader.read(chunk):
            if auth_log:
                for token in BEARER.findall(data):
                    digest = hashlib.sha256(token).hexdigest()
                    if digest not in seen:
                        seen.add(digest)
                        with open(auth_log, "a") as fh:
                            fh.write(digest + "\n")
            writer.write(data)
            await writer.drain()
            if rate:
                await asyncio.sleep(len(data) / rate)
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main(listen: int, target: int, rate: int, auth_log: str) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(pipe(client_r, server_w, 0, auth_log), pipe(server_r, client_w, rate))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    auth_log = sys.argv[4] if len(sys.argv) > 4 else ""
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), auth_log))
