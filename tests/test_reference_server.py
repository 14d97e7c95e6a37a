"""The GPU reference server with a stand-in model (no PyTorch): the engine's continuous
batcher, the front end that routes its chunks back, and the HTTP answers.

A request takes a free slot between chunks of decoding and leaves as soon as its own
frames are out, so a short request never waits for a long one and freed slots refill:
that is what made the CUDA-graph server's rounds steady (runners/README.md, noise). The
tests join engine and front end by the same pipes the server uses, with the engine in a
thread instead of a process."""

from __future__ import annotations

import http.client
import json
import multiprocessing as mp
import os
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from multiprocessing.connection import Connection
from typing import Any

import pytest

from runners.reference import server


class Model:
    """Records each slot's admissions; each decode waits for a permit when `gated`."""

    def __init__(self, gated: bool) -> None:
        self.admitted: list[tuple[int, int]] = []
        self.decodes = 0
        self.gated = gated
        self.release = threading.Semaphore(0)

    def admit(self, slot: int, first_token: int) -> None:
        self.admitted.append((slot, first_token))

    def decode(self, steps: int) -> None:
        assert steps == server.CHUNK
        if self.gated:
            assert self.release.acquire(timeout=10)
        self.decodes += 1


def wire(
    batch: int, gated: bool = True, queued: tuple[server.Job, ...] = ()
) -> tuple[server.Front, Model, threading.Thread]:
    """An engine (in a thread) and its front end, joined by pipes as in the server.

    `queued` requests are submitted before the engine starts, so its first batch holds
    them all: submitted after, the engine may start decoding the first alone."""
    req_r, req_w = mp.Pipe(duplex=False)
    ev_r, ev_w = mp.Pipe(duplex=False)
    model = Model(gated)
    ev_w.send("ready")
    front = server.Front(req_w, ev_r)
    assert front.ready.wait(5)
    for job in queued:
        front.submit(job)
    engine = server.Engine(model, batch, req_r, ev_w)
    t = threading.Thread(target=engine.run, daemon=True)
    t.start()
    return front, model, t


def bare_front() -> tuple[server.Front, Connection, Connection]:
    """A ready front end with no engine: the test plays the engine's ends of the pipes
    (requests to read, events to send)."""
    req_r, req_w = mp.Pipe(duplex=False)
    ev_r, ev_w = mp.Pipe(duplex=False)
    ev_w.send("ready")
    front = server.Front(req_w, ev_r)
    assert front.ready.wait(5)
    return front, req_r, ev_w


def drain(job: server.Job) -> list[dict[str, Any]]:
    items = []
    while (item := job.chunks.get(timeout=5)) is not None:
        items.append(item)
    return items


def test_a_short_request_leaves_before_a_long_one_and_its_slot_is_reused() -> None:
    long, short, late = (server.Job("x" * 140, True), server.Job("", True), server.Job("", False))
    assert (long.frames, short.frames) == (86, 16)
    front, m, _ = wire(batch=2, queued=(long, short))
    for _ in range(2):
        m.release.release()
    got = drain(short)  # out after its own 16 frames: two chunks, then the end
    assert [g.get("done", False) for g in got] == [False, False, True]
    assert got[-1]["audio_duration_s"] == round(16 * server.FRAME_S, 4)
    front.submit(late)  # takes the short one's slot while the long one goes on
    for _ in range(12):
        m.release.release()
    assert drain(late) == [{"done": True, "frames": 16, "audio_duration_s": 1.28}]
    chunks = drain(long)
    # Ten chunks of 8 frames, the last 6 frames streamed too, then the end.
    assert [c["frames"] for c in chunks[:-1]] == [8] * 10 + [6]
    assert chunks[-1] == {"done": True, "frames": 86, "audio_duration_s": 6.88}
    assert [slot for slot, _ in m.admitted] == [0, 1, 1]
    stats = front.snapshot()
    assert stats["jobs"] == 3
    assert stats["batches"] == m.decodes == 11  # ceil(86 / 8) chunks in all
    assert stats["sizes"] == {2: 4, 1: 7}


def test_when_the_engine_exits_waiting_requests_fail_and_new_ones_are_refused() -> None:
    front, req_r, ev_w = bare_front()
    job = server.Job("hello", True)
    front.submit(job)
    assert req_r.recv() == (0, job.first, job.frames)
    ev_w.close()  # the engine process died
    assert drain(job) == [{"error": "the engine process exited"}]
    assert not front.ready.is_set()
    with pytest.raises(RuntimeError, match="engine process exited"):
        front.submit(server.Job("again", False))


def test_a_request_sent_to_an_engine_that_just_died_is_refused_not_kept() -> None:
    """The engine's end of the pipe is gone before the router has seen EOF: the send
    fails, the request is dropped and the caller gets the refusal (HTTP 503)."""
    front, req_r, _ev_w = bare_front()  # events held open: the router has seen no EOF
    req_r.close()
    with pytest.raises(RuntimeError, match="engine process exited"):
        front.submit(server.Job("hello", True))
    assert front.jobs == {}


def test_an_event_the_router_cannot_read_fails_the_server_rather_than_hanging_it() -> None:
    front, _req_r, ev_w = bare_front()  # held: the engine's end stays open
    job = server.Job("hello", False)
    front.submit(job)
    ev_w.send(("not", "an event"))
    (err,) = drain(job)
    assert err["error"].startswith("the engine process failed (ValueError")
    assert not front.ready.is_set()
    with pytest.raises(RuntimeError, match="engine process failed"):
        front.submit(server.Job("again", False))


def test_the_engine_stops_when_the_front_end_goes() -> None:
    req_r, req_w = mp.Pipe(duplex=False)
    _, ev_w = mp.Pipe(duplex=False)
    engine = server.Engine(Model(gated=False), 2, req_r, ev_w)
    t = threading.Thread(target=engine.run, daemon=True)
    t.start()
    req_w.close()
    t.join(5)
    assert not t.is_alive()


@pytest.fixture
def http_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    front, _, _ = wire(batch=4, gated=False)
    monkeypatch.setattr(server, "FRONT", front)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), server.Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield int(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()


def call(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def test_http_answers_stream_one_line_per_chunk_and_reject_bad_bodies(http_port: int) -> None:
    status, data = call(http_port, "POST", "/v1/audio/speech", b'{"input": "", "stream": true}')
    assert status == 200
    lines = [json.loads(x) for x in data.splitlines()]
    assert lines == [
        {"frames": 8, "audio_s": 0.64},
        {"frames": 8, "audio_s": 0.64},
        {"done": True, "frames": 16, "audio_duration_s": 1.28},
    ]
    status, data = call(http_port, "POST", "/v1/audio/speech", b'{"input": "abc"}')
    assert (status, json.loads(data)["frames"]) == (200, 17)
    for bad in (b"not json", b"[1, 2]"):
        status, data = call(http_port, "POST", "/v1/audio/speech", bad)
        assert (status, b"bad request" in data) == (400, True)
    assert call(http_port, "GET", "/health") == (200, b'{"ok": true}')
    status, data = call(http_port, "GET", "/stats")
    assert (status, json.loads(data)["jobs"]) == (200, 2)
    assert call(http_port, "GET", "/nope")[0] == 404


def test_engine_cpus_first_gives_the_engine_a_core_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 1, 2})
    assert server.split_cpus("first") == ([1], [2, 3])
    assert server.split_cpus("shared") == (None, None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5})
    assert server.split_cpus("first") == (None, None)


def raw_post(port: int, headers: dict[str, str], body: bytes = b"") -> tuple[int, str, bytes]:
    """POST with the headers as given; returns status, the Connection header, the body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("POST", "/v1/audio/speech", skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.endheaders(body or None)
    resp = conn.getresponse()
    out = (resp.status, resp.getheader("Connection") or "", resp.read())
    conn.close()
    return out


@pytest.mark.parametrize(
    ("length", "body", "status"),
    [
        ("-1", b"", 400),  # would read until the client hangs up
        ("\u00b3", b"", 400),  # a superscript digit: isdigit() but not int()
        ("abc", b"", 400),
        (str(10**15), b"", 413),  # would allocate a petabyte
        (str(10**30), b"", 413),
        ("100001", b"[" * 100001, 400),  # nested past the recursion limit
        ("30", b'{"input": "a", "stream": "no"}', 400),  # a string is not a flag
        ("15", b'{"input": null}', 400),
    ],
)
def test_bad_bodies_get_an_answer_and_the_connection_closes(
    http_port: int, length: str, body: bytes, status: int
) -> None:
    got, connection, data = raw_post(http_port, {"Content-Length": length}, body)
    assert (got, connection) == (status, "close")
    assert json.loads(data)["error"].startswith("bad request")
    assert call(http_port, "GET", "/health") == (200, b'{"ok": true}')


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Length": "2", "Transfer-Encoding": "chunked"},
        {"Transfer-Encoding": "chunked"},
    ],
)
def test_a_body_framed_any_other_way_is_refused_and_closes(
    http_port: int, headers: dict[str, str]
) -> None:
    got, connection, _ = raw_post(http_port, headers, b"{}")
    assert (got, connection) == (400, "close")


def test_two_content_lengths_are_refused(http_port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
    conn.putrequest("POST", "/v1/audio/speech", skip_accept_encoding=True)
    conn.putheader("Content-Length", "2")
    conn.putheader("Content-Length", "40")
    conn.endheaders(b"{}")
    resp = conn.getresponse()
    assert (resp.status, resp.getheader("Connection")) == (400, "close")
    conn.close()
