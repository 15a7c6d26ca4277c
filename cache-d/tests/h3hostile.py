#!/usr/bin/env python3
"""Hostile HTTP/3 and QUIC for cache-d's end-to-end tests, on aioquic's
QUIC stack with the HTTP/3 layer bypassed where a row needs bytes no
well-behaved client sends.

    h3hostile.py PORT ROW [--sni NAME]

Prints one JSON object: {"row": ROW, "outcome": ...}, where the outcome is
what the server did to the row's request stream or connection:
"status:N" (a response), "reset:0xCODE" (the stream reset),
"closed:0xCODE" (the connection closed with that error), "nothing" (no
answer within the row's time), or a row's own summary. Rows: see ROWS.
"""

import argparse
import asyncio
import json
import os
import socket
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import H3_ALPN, FrameType, H3Connection, encode_frame
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Probe(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.outcomes = {}
        self.waiters = {}
        self.body = {}
        self.closed = None

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.closed = f"closed:{event.error_code:#x}"
            for w in self.waiters.values():
                if not w.done():
                    w.set_result(None)
            return
        if isinstance(event, StreamReset):
            self.settle(event.stream_id, f"reset:{event.error_code:#x}")
            return
        try:
            events = self.h3.handle_event(event)
        except Exception as e:  # a frame aioquic itself refuses
            self.closed = f"client-error:{type(e).__name__}"
            return
        for ev in events:
            if isinstance(ev, HeadersReceived):
                status = dict(ev.headers).get(b":status", b"0").decode()
                if int(status) >= 200:
                    self.outcomes.setdefault(ev.stream_id, f"status:{status}")
            elif isinstance(ev, DataReceived):
                self.body[ev.stream_id] = self.body.get(ev.stream_id, 0) + len(ev.data)
            if getattr(ev, "stream_ended", False):
                self.settle(ev.stream_id, None)

    def settle(self, sid, outcome):
        if outcome:
            self.outcomes[sid] = outcome
        w = self.waiters.get(sid)
        if w and not w.done():
            w.set_result(None)

    def raw(self, data, end=True):
        """A new request stream carrying `data` as it is."""
        sid = self._quic.get_next_available_stream_id()
        self.waiters[sid] = asyncio.get_running_loop().create_future()
        self._quic.send_stream_data(sid, data, end_stream=end)
        self.transmit()
        return sid

    def headers_frame(self, sid, fields):
        """A HEADERS frame for these fields, encoded by aioquic's QPACK
        encoder with no validation of what they say."""
        enc, block = self.h3._encoder.encode(sid, fields)
        if enc:
            self._quic.send_stream_data(self.h3._local_encoder_stream_id, enc)
        return encode_frame(FrameType.HEADERS, block)

    def request(self, fields, extra=b"", end=True):
        sid = self._quic.get_next_available_stream_id()
        return self.raw(extra + self.headers_frame(sid, fields), end)

    async def outcome(self, sid, secs):
        try:
            await asyncio.wait_for(asyncio.shield(self.waiters[sid]), secs)
        except asyncio.TimeoutError:
            pass
        return self.outcomes.get(sid) or self.closed or "nothing"


def get(path="/size/3", extra=()):
    return [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"h3.test"), (b":path", path.encode())] + list(extra)


async def one(p, fields, secs=5, extra=b""):
    return await p.outcome(p.request(fields, extra), secs)


async def row_connect(p):
    return await one(p, [(b":method", b"CONNECT"), (b":authority", b"example.com:443")])


async def row_no_path(p):
    return await one(p, [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"h3.test")])


async def row_pseudo_after_field(p):
    return await one(p, [(b":method", b"GET"), (b"x-a", b"1"), (b":scheme", b"https"), (b":authority", b"h3.test"), (b":path", b"/size/3")])


async def row_connection_field(p):
    return await one(p, get(extra=[(b"connection", b"close")]))


async def row_oversized_fields(p):
    # 80 KB of fields, past h3_max_field_section_size (64k).
    return await one(p, get(extra=[(f"x-big-{i}".encode(), b"a" * 4000) for i in range(20)]))


async def row_many_fields(p):
    return await one(p, get(extra=[(f"x-{i}".encode(), b"v") for i in range(2000)]))


async def row_qpack_dynamic_reference(p):
    # A field section that needs dynamic table entry 0, where we granted
    # no dynamic table (Required Insert Count 1, then an indexed field).
    block = bytes([0x02, 0x00, 0x80])
    return await p.outcome(p.raw(encode_frame(FrameType.HEADERS, block)), 5)


async def row_data_before_headers(p):
    return await p.outcome(p.raw(encode_frame(FrameType.DATA, b"hello")), 5)


async def row_settings_on_request_stream(p):
    return await p.outcome(p.raw(encode_frame(FrameType.SETTINGS, b"")), 5)


async def row_reserved_frame_first(p):
    # A reserved frame type (0x21 + 0x1f * N) is ignored (RFC 9114 §7.2.8).
    sid = p._quic.get_next_available_stream_id()
    grease = encode_uint_var(0x21 + 0x1F * 3) + encode_uint_var(3) + b"abc"
    return await p.outcome(p.raw(grease + p.headers_frame(sid, get())), 5)


async def row_truncated_headers(p):
    # A HEADERS frame that says 1000 bytes, then the stream ends at 10.
    frame = encode_uint_var(FrameType.HEADERS) + encode_uint_var(1000) + b"\x00" * 10
    return await p.outcome(p.raw(frame), 5)


async def row_fin_without_headers(p):
    return await p.outcome(p.raw(b""), 5)


async def row_rapid_reset(p):
    # Streams for a slow answer, each reset at once (as many as we grant),
    # then a request: work in progress stays bounded by the streams QUIC
    # grants (a stream's credit returns when its request is done, not at
    # its reset: CVE-2023-44487), and the connection lives.
    for _ in range(90):
        sid = p.request(get("/size/3?delay_ms=1500"), end=True)
        p._quic.reset_stream(sid, 0x10C)
        p.transmit()
        await asyncio.sleep(0)
    return await one(p, get("/size/4"), secs=10)


async def row_stream_flood(p):
    # Requests past our stream limit wait for credit; all are answered.
    sids = []
    for i in range(250):
        try:
            sids.append(p.request(get(f"/size/{i + 1}?max_age=60")))
        except Exception:  # aioquic keeps to our MAX_STREAMS
            await asyncio.sleep(0.05)
    outs = [await p.outcome(s, 15) for s in sids]
    return f"answered:{sum(o == 'status:200' for o in outs)}/{len(sids)}"


async def row_never_reads(p, pause=5):
    # A large answer to a client that stops reading: our sends stall, and
    # send_timeout ends the stream (its reset, not a whole-looking body).
    sid = p.request(get("/size/50000000"))
    await asyncio.sleep(0.2)
    p._transport.pause_reading()
    await asyncio.sleep(pause)
    p._transport.resume_reading()
    # After so long without an ACK the server's next probe may be far off
    # (exponential backoff): a request from us gets it going now, and
    # shows the connection serves on.
    await one(p, get("/size/5"), secs=10)
    out = await p.outcome(sid, 10)
    return out if out.startswith(("reset", "closed")) else f"{out}:{p.body.get(sid, 0)}"


ROWS = {
    "connect": row_connect,
    "no-path": row_no_path,
    "pseudo-after-field": row_pseudo_after_field,
    "connection-field": row_connection_field,
    "oversized-fields": row_oversized_fields,
    "many-fields": row_many_fields,
    "qpack-dynamic-reference": row_qpack_dynamic_reference,
    "data-before-headers": row_data_before_headers,
    "settings-on-request-stream": row_settings_on_request_stream,
    "reserved-frame-first": row_reserved_frame_first,
    "truncated-headers": row_truncated_headers,
    "fin-without-headers": row_fin_without_headers,
    "rapid-reset": row_rapid_reset,
    "stream-flood": row_stream_flood,
    "never-reads": row_never_reads,
}


async def handshake_flood(port, n):
    """n clients that send their Initial and never go on (half-open
    handshakes), each from its own port; then how many got a Retry."""
    loop = asyncio.get_running_loop()
    retried = 0
    socks = []
    for _ in range(n):
        cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="h3.test")
        cfg.verify_mode = ssl.CERT_NONE
        q = QuicConnection(configuration=cfg)
        q.connect(("127.0.0.1", port), now=loop.time())
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        for data, _ in q.datagrams_to_send(now=loop.time()):
            s.sendto(data, ("127.0.0.1", port))
        socks.append(s)
    await asyncio.sleep(1)
    for s in socks:
        try:
            data = s.recv(2048)
            # A long header packet of type Retry (0b11 in bits 4-5).
            if data and data[0] & 0x80 and (data[0] & 0x30) == 0x30:
                retried += 1
        except BlockingIOError:
            pass
        s.close()
    return f"retried:{min(retried, 1)}"


async def garbage(port, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(n):
        s.sendto(os.urandom(1 + i % 1400), ("127.0.0.1", port))
    s.close()
    await asyncio.sleep(0.5)
    return "sent"


async def greedy(port, sni, conns=4, streams=10, secs=5):
    """conns connections, each with streams requests for a 300 MB object,
    that stop reading at once and hold on for secs (the caller samples the
    server's memory meanwhile)."""
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=sni, max_stream_data=16 << 20, max_data=64 << 20)
    cfg.verify_mode = ssl.CERT_NONE

    async def one_conn():
        async with connect("127.0.0.1", port, configuration=cfg, create_protocol=Probe) as p:
            for _ in range(streams):
                p.request(get("/size/300000000?max_age=600"))
            await asyncio.sleep(0.3)
            p._transport.pause_reading()
            await asyncio.sleep(secs)
            p._transport.resume_reading()

    await asyncio.gather(*(one_conn() for _ in range(conns)))
    return "held"


async def main(args):
    if args.row == "greedy-readers":
        return await greedy(args.port, args.sni)
    if args.row == "handshake-flood":
        return await handshake_flood(args.port, 200)
    if args.row == "garbage-datagrams":
        return await garbage(args.port, 2000)
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=args.sni, max_stream_data=256 * 1024, max_data=1 << 20)
    cfg.verify_mode = ssl.CERT_NONE
    async with connect("127.0.0.1", args.port, configuration=cfg, create_protocol=Probe) as p:
        return await ROWS[args.row](p)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int)
    ap.add_argument("row", choices=sorted(list(ROWS) + ["handshake-flood", "garbage-datagrams", "greedy-readers"]))
    ap.add_argument("--sni", default="h3.test")
    a = ap.parse_args()
    try:
        out = asyncio.run(asyncio.wait_for(main(a), 60))
    except (ConnectionError, asyncio.TimeoutError, OSError) as e:
        out = f"error:{type(e).__name__}"
    print(json.dumps({"row": a.row, "outcome": out}))
