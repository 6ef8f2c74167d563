#!/usr/bin/env python3
"""An asyncio echo server and a client that checks every byte.

  asyncio_echo.py server IP PORT
  asyncio_echo.py client IP PORT CONNECTIONS ROUNDS

The client opens CONNECTIONS connections at once; on each it sends ROUNDS messages of
pseudo-random sizes (1 B .. 64 KiB) and reads the echo back, comparing it byte for byte.
Exits non-zero on any mismatch or error.
"""
import asyncio
import hashlib
import random
import sys


async def serve(ip, port):
    async def echo(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, ip, port)
    async with server:
        await server.serve_forever()


async def one_client(ip, port, index, rounds):
    reader, writer = await asyncio.open_connection(ip, port)
    rng = random.Random(index)
    moved = 0
    for r in range(rounds):
        size = rng.choice([1, 7, 100, 1500, 4096, 65536, rng.randint(1, 65536)])
        msg = hashlib.sha256(f"{index}.{r}".encode()).digest() * (size // 32 + 1)
        msg = msg[:size]
        writer.write(msg)
        await writer.drain()
        back = await reader.readexactly(size)
        if back != msg:
            raise RuntimeError(f"connection {index} round {r}: echo differs")
        moved += size
    writer.close()
    await writer.wait_closed()
    return moved


async def clients(ip, port, n, rounds):
    moved = await asyncio.gather(*(one_client(ip, port, i, rounds) for i in range(n)))
    print(f"asyncio echo: {n} connections, {sum(moved)} bytes echoed and checked")


def main():
    role, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "server":
        asyncio.run(serve(ip, port))
    else:
        asyncio.run(clients(ip, port, int(sys.argv[4]), int(sys.argv[5])))


if __name__ == "__main__":
    main()
