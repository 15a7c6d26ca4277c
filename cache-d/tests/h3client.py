#!/usr/bin/env python3
"""An HTTP/3 client for cache-d's end-to-end tests, on aioquic (PyPI):
an independent QUIC and HTTP/3 stack, not the one cache-d is built on.

    h3client.py PORT [options] REQUEST...

Each REQUEST is PATH, or METHOD:PATH, or METHOD:PATH:BODY; all go over one
QUIC connection to 127.0.0.1:PORT (one after the other, or all at once
with --parallel). Prints one JSON object: the ALPN negotiated, the server's
certificate (SHA-256 of its DER) and a list of responses, each with
status, headers ([name, value] pairs), body length, SHA-256 and, when it
is text and short, the body itself; "reset" is the error code of a stream
the server reset. Exits 1 if the connection could not be made.

Options:
  --sni NAME        server name to send (default: localhost)
  --header N:V      add a request header (repeatable)
  --parallel        send every request at once, on streams side by side
  --migrate-after K after K responses, move the client to a new UDP port
                    (connection migration), then send the rest
  --timeout SECS    per request (default 10)
  --ticket FILE     resume with the session ticket in FILE (if there is
                    one) and send the requests in 0-RTT data, before the
                    handshake completes; the server's tickets go to FILE
"""

import argparse
import asyncio
import hashlib
import json
import os
import pickle
import socket
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.streams = {}
        # aioquic holds a HEAD response's Content-Length against its empty
        # body and closes the connection; the field is the length a GET
        # would get (RFC 9110 §9.3.2), so it is not checked on HEAD streams.
        self.heads = set()
        check = self.h3._check_content_length
        self.h3._check_content_length = lambda st: None if st.stream_id in self.heads else check(st)

    def quic_event_received(self, event):
        if isinstance(event, StreamReset):
            s = self.streams.get(event.stream_id)
            if s and not s["done"].done():
                s["reset"] = event.error_code
                s["done"].set_result(None)
            return
        for ev in self.h3.handle_event(event):
            s = self.streams.get(getattr(ev, "stream_id", None))
            if s is None:
                continue
            if isinstance(ev, HeadersReceived):
                status = dict(ev.headers).get(b":status", b"0")
                if int(status) >= 200:
                    s["headers"] = ev.headers
                else:
                    s["interim"].append(int(status))
            elif isinstance(ev, DataReceived):
                s["body"] += ev.data
            if getattr(ev, "stream_ended", False) and not s["done"].done():
                s["done"].set_result(None)

    def start(self, method, path, body, headers, sni):
        sid = self._quic.get_next_available_stream_id()
        if method == "HEAD":
            self.heads.add(sid)
        fields = [(b":method", method.encode()), (b":scheme", b"https"), (b":authority", sni.encode()), (b":path", path.encode())]
        fields += [(n.lower().encode(), v.encode()) for n, v in headers]
        if body:
            fields.append((b"content-length", str(len(body)).encode()))
        self.h3.send_headers(sid, fields, end_stream=not body)
        if body:
            self.h3.send_data(sid, body.encode(), end_stream=True)
        s = {"headers": [], "body": b"", "interim": [], "reset": None, "done": asyncio.get_running_loop().create_future()}
        self.streams[sid] = s
        self.transmit()
        return s


def report(s):
    headers = [[n.decode("latin-1"), v.decode("latin-1")] for n, v in s["headers"]]
    status = next((int(v) for n, v in headers if n == ":status"), None)
    out = {
        "status": status,
        "headers": [h for h in headers if not h[0].startswith(":")],
        "interim": s["interim"],
        "length": len(s["body"]),
        "sha256": hashlib.sha256(s["body"]).hexdigest(),
        "reset": s["reset"],
    }
    if len(s["body"]) <= 4096:
        try:
            out["body"] = s["body"].decode()
        except UnicodeDecodeError:
            pass
    return out


def parse_request(r):
    parts = r.split(":", 2)
    if len(parts) == 1 or not parts[0].isupper():
        return "GET", r, ""
    return parts[0], parts[1], parts[2] if len(parts) > 2 else ""


async def main(args):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=args.sni)
    cfg.verify_mode = ssl.CERT_NONE
    reqs = [parse_request(r) for r in args.requests]
    headers = [tuple(h.split(":", 1)) for h in args.header]
    out = {"responses": []}
    tickets = []
    early = False
    if args.ticket and os.path.exists(args.ticket):
        with open(args.ticket, "rb") as f:
            cfg.session_ticket = pickle.load(f)
        early = True

    def keep(ticket):
        tickets.append(ticket)

    async with connect(
        "127.0.0.1", args.port, configuration=cfg, create_protocol=Client, wait_connected=not early, session_ticket_handler=keep
    ) as client:
        tls = client._quic.tls
        out["alpn"] = tls.alpn_negotiated
        cert = getattr(tls, "_peer_certificate", None)
        if cert is not None:
            from cryptography.hazmat.primitives.serialization import Encoding

            out["cert_sha256"] = hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()
        if args.parallel:
            streams = [client.start(m, p, b, headers, args.sni) for m, p, b in reqs]
            await asyncio.wait_for(asyncio.gather(*(s["done"] for s in streams)), args.timeout)
            out["responses"] = [report(s) for s in streams]
        else:
            for i, (m, p, b) in enumerate(reqs):
                if args.migrate_after is not None and i == args.migrate_after:
                    out["ports"] = [client._transport.get_extra_info("sockname")[1]]
                    rebind(client)
                    out["ports"].append(client._transport.get_extra_info("sockname")[1])
                s = client.start(m, p, b, headers, args.sni)
                await asyncio.wait_for(s["done"], args.timeout)
                out["responses"].append(report(s))
        if early:
            out["early_data_accepted"] = bool(client._quic.tls.early_data_accepted)
        # Tickets come after the handshake.
        await asyncio.sleep(0.1)
    if args.ticket and tickets:
        with open(args.ticket, "wb") as f:
            pickle.dump(tickets[-1], f)
    print(json.dumps(out))


def rebind(client):
    """Move the connection to a new local UDP port: the server sees the
    client's address change mid-connection (RFC 9000 §9)."""
    loop = asyncio.get_running_loop()
    old = client._transport
    family = old.get_extra_info("socket").family
    sock = socket.socket(family, socket.SOCK_DGRAM)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 0, 0, 0))
    else:
        sock.bind(("127.0.0.1", 0))
    transport = loop._make_datagram_transport(sock, client)
    client._transport = transport
    old.close()
    client._quic.change_connection_id()
    client.transmit()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int)
    ap.add_argument("requests", nargs="+")
    ap.add_argument("--sni", default="localhost")
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--parallel", action="store_true")
    ap.add_argument("--migrate-after", type=int)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--ticket")
    a = ap.parse_args()
    try:
        # The handshake has no timeout of its own: the whole run is bounded.
        asyncio.run(asyncio.wait_for(main(a), a.timeout * (len(a.requests) + 1)))
    except (ConnectionError, asyncio.TimeoutError, OSError) as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
