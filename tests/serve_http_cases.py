#!/usr/bin/env python3
"""Malformed HTTP against `cformers serve` over raw sockets (tests/cli_serve_http.sh):
every case is answered with OpenAI's error JSON and the status it should have, and each
status answered is counted in /metrics. Usage: serve_http_cases.py HOST:PORT"""
import json, socket, sys, time

host, port = sys.argv[1].split(":")
port = int(port)
BODY = b'{"prompt":"Once upon a time","max_tokens":2}'


def exchange(data, half_close=False, pause=0.0, timeout=15.0):
    """Sends data (bytes, or a list sent with `pause` between), returns all it gets back."""
    s = socket.create_connection((host, port), timeout=timeout)
    for part in data if isinstance(data, list) else [data]:
        s.sendall(part)
        time.sleep(pause)
    if half_close:
        s.shutdown(socket.SHUT_WR)
    out = b""
    try:
        while True:
            got = s.recv(65536)
            if not got:
                break
            out += got
            if b"\r\n\r\n" in out:  # whole once Content-Length bytes of body are in
                head, _, body = out.partition(b"\r\n\r\n")
                n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if n and len(body) >= n[0]:
                    break
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    return out


def parse(out):
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1]) if lines[0].startswith(b"HTTP/") else None
    headers = {l.split(b":")[0].strip().lower(): l.split(b":", 1)[1].strip() for l in lines[1:] if b":" in l}
    return status, headers, body


def post(path, body, extra=b""):
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        path, len(body), extra, body)


CASES = [  # name, request bytes (or parts), options, wanted status
    ("garbage request line", b"HELLO\r\n\r\n", {}, 400),
    ("binary garbage", b"\x00\x01\x02\xff\xfe\r\n\r\n", {}, 400),
    ("bad Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n" + BODY, {}, 400),
    ("negative Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n" + BODY, {}, 400),
    ("two Content-Lengths", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 9\r\n\r\n" + BODY, {}, 400),
    ("100 KB header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n", {}, 431),
    ("100 KB URL", b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", {}, 414),
    ("HTTP/1.1 without Host", b"GET /health HTTP/1.1\r\n\r\n", {}, 400),
    ("unknown HTTP version", b"GET /health HTTP/7.0\r\nHost: x\r\n\r\n", {}, 505),
    ("chunked body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", {"half_close": True}, 411),
    ("Content-Length and Transfer-Encoding", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", {}, 411),
    ("folded header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  continued\r\n\r\n", {}, 400),
    ("header without a colon", b"GET /health HTTP/1.1\r\nHost: x\r\nnonsense\r\n\r\n", {}, 400),
    ("bare LF line ends", b"GET /health HTTP/1.1\nHost: x\n\n", {"half_close": True}, 400),
    ("control byte in the target", b"GET /he\x01alth HTTP/1.1\r\nHost: x\r\n\r\n", {}, 400),
    ("headers cut by a half-close", b"GET /health HTTP/1.1\r\nHost: x\r\n", {"half_close": True}, 400),
    ("body shorter than Content-Length, half-close", post(b"/v1/completions", BODY)[:-10], {"half_close": True}, 400),
    ("body over --max-body-bytes", post(b"/v1/completions", b"{" + b" " * 5000 + b"}"), {}, 413),
    ("Content-Length over --max-body-bytes, no body sent", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", {}, 413),
    ("headers trickled past --header-timeout", [b"GET /health HTTP/1.1\r\n", b"Host: x\r\n", b"X-A: 1\r\n", b"X-B: 2\r\n"], {"pause": 0.8}, 408),
    ("body stalled past --idle-timeout", [post(b"/v1/completions", BODY)[:-10]], {"pause": 0.0}, 408),
]


def metrics():
    out = exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    counts = {}
    for line in parse(out)[2].decode().splitlines():
        if line.startswith("cformers_http_responses_total{"):
            code = line.split('"')[1]
            counts[code] = int(line.split()[-1])
    return counts


failed = 0
before = metrics()
wanted = {}
for name, data, opts, want in CASES:
    out = exchange(data, **opts)
    status, headers, body = parse(out)
    why = None
    if status != want:
        why = "status %s, want %d" % (status, want)
    elif not headers.get(b"content-type", b"").startswith(b"application/json"):
        why = "Content-Type %r" % headers.get(b"content-type")
    else:
        try:
            e = json.loads(body)["error"]
            assert isinstance(e["message"], str) and e["message"] and "type" in e and "param" in e and "code" in e
        except Exception as x:  # noqa: BLE001
            why = "not OpenAI's error JSON (%s)" % x
    if why:
        failed += 1
        print("FAIL: %s: %s: %r" % (name, why, out[:300]))
    else:
        print("ok: %s: %d" % (name, want))
    wanted[str(want)] = wanted.get(str(want), 0) + 1
time.sleep(0.5)
after = metrics()
for code, n in wanted.items():
    got = after.get(code, 0) - before.get(code, 0) - (1 if code == "200" else 0)
    if got != n:
        failed += 1
        print("FAIL: /metrics counted %d responses %s, want %d" % (got, code, n))
# still serving
status, _, body = parse(exchange(post(b"/v1/completions", BODY, b"Connection: close\r\n")))
if status != 200:
    failed += 1
    print("FAIL: the server stopped serving: %s %r" % (status, body))
sys.exit(1 if failed else 0)
