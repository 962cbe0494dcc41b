#!/usr/bin/env python3
"""A TCP proxy that throttles the server-to-client direction: a slow mirror for tests.

    slow_proxy.py LISTEN_PORT TARGET_PORT BYTES_PER_SECOND

Both on 127.0.0.1. The scenario points HF_ENDPOINT at it to make a download last long
enough to be killed mid-transfer.
"""

from __future__ import annotations

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rate: int) -> None:
    chunk = max(rate // 10, 1024)
    try:
        while data := await reader.read(chunk):
            writer.write(data)
            await writer.drain()
            if rate:
                await asyncio.sleep(len(data) / rate)
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main(listen: int, target: int, rate: int) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(pipe(client_r, server_w, 0), pipe(server_r, client_w, rate))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
