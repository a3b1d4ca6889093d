#!/usr/bin/env python3
"""Peer-client benchmark: aioapns sending COUNT notifications to the apns-relay simulator.

Usage: aioapns_bench.py --port P --ca DIR/ca.pem --key key.p8 --key-id KID --team-id TEAM
                        [--count N] [--connections C] [--concurrency K] [--tokens T]
Prints one line: `aioapns sent=N ok=M seconds=S rate=R`.
"""
import argparse
import asyncio
import ssl
import time

from aioapns import APNs, NotificationRequest, PushType
from aioapns import connection as aioapns_connection


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--key-id", required=True)
    parser.add_argument("--team-id", required=True)
    parser.add_argument("--topic", default="com.example.app")
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=400)
    parser.add_argument("--tokens", type=int, default=1000)
    args = parser.parse_args()

    # aioapns has Apple's host built in; point it at the simulator.
    aioapns_connection.APNsProductionClientProtocol.APNS_SERVER = args.host
    aioapns_connection.APNsTLSClientProtocol.APNS_PORT = args.port
    context = ssl.create_default_context(cafile=args.ca)
    context.set_alpn_protocols(["h2"])
    with open(args.key) as f:
        key = f.read()
    client = APNs(key=key, key_id=args.key_id, team_id=args.team_id, topic=args.topic,
                  max_connections=args.connections, ssl_context=context)
    tokens = ["%064x" % (0xB000000 + i) for i in range(args.tokens)]
    payload = {"aps": {"alert": {"title": "Hi", "body": "You have mail"}, "badge": 1, "sound": "default"}}
    ok = 0
    next_index = 0

    async def worker() -> None:
        nonlocal ok, next_index
        while next_index < args.count:
            index = next_index
            next_index += 1
            request = NotificationRequest(device_token=tokens[index % len(tokens)], message=payload,
                                          push_type=PushType.ALERT)
            result = await client.send_notification(request)
            if result.is_successful:
                ok += 1

    # Warm up the connections.
    await client.send_notification(NotificationRequest(device_token=tokens[0], message=payload, push_type=PushType.ALERT))
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    seconds = time.perf_counter() - start
    print(f"aioapns sent={args.count} ok={ok} seconds={seconds:.3f} rate={args.count / seconds:.1f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
