#!/usr/bin/python3
"""A fault-injecting HTTP proxy for the data streaming tests.

Forwards every request to an upstream server (s3rver or a plain HTTP server), headers untouched
(S3 signatures cover the Host header, so it is passed through as the client sent it). With
probability --fault-rate a GET instead gets, in turn, one of: HTTP 503, HTTP 429, a reset
connection, or a truncated body (full Content-Length, half the bytes). Faults are drawn from a
seeded generator; --fault-kinds limits them to some of 503,429,reset,truncated, and
--fault-methods extends them to uploads (PUT, POST, DELETE). GET counts per path, requests per
method, multipart parts and fault counts are served as JSON at /__stats__.

  fault_proxy.py --port P --upstream http://127.0.0.1:Q [--fault-rate 0.2] [--seed 1] [--fault-kinds reset]
"""
import argparse
import http.client
import json
import random
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
stats = {"gets": {}, "faults": {"503": 0, "429": 0, "reset": 0, "truncated": 0}, "requests": 0, "ranged": 0,
         "methods": {}, "parts": 0}


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.forward("GET")

    def do_HEAD(self):
        self.forward("HEAD")

    def do_PUT(self):
        self.forward("PUT")

    def do_POST(self):
        self.forward("POST")

    def do_DELETE(self):
        self.forward("DELETE")

    def forward(self, method):
        if self.path == "/__stats__":
            with lock:
                body = json.dumps(stats).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        fault = None
        with lock:
            stats["requests"] += 1
            path = urllib.parse.urlsplit(self.path).path
            stats["methods"][method] = stats["methods"].get(method, 0) + 1
            stats["parts"] += method == "PUT" and "partNumber=" in self.path
            if method == "GET":
                stats["gets"][path] = stats["gets"].get(path, 0) + 1
                stats["ranged"] += "Range" in self.headers
            if method in args.fault_methods.split(","):
                if rng.random() < args.fault_rate:
                    fault = kinds[stats["requests"] % len(kinds)]
                    stats["faults"][fault] += 1
        if fault == "reset":
            # SO_LINGER 0: close sends RST. shutdown() first, because close() alone leaves the
            # socket open while the handler's rfile/wfile still refer to it (the client would then
            # wait for its timeout instead of seeing the reset)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.shutdown(socket.SHUT_RDWR)
            self.connection.close()
            self.close_connection = True
            return
        if fault in ("503", "429"):
            body = b"injected fault"
            self.send_response(int(fault))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        length = int(self.headers.get("Content-Length") or 0)
        payload = self.rfile.read(length) if length else None
        up = urllib.parse.urlsplit(args.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
        conn.putrequest(method, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            conn.putheader(k, v)
        conn.endheaders(payload)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        # a HEAD reply has no body but the size of the object it describes
        self.send_header("Content-Length", resp.getheader("Content-Length", "0") if method == "HEAD" else str(len(data)))
        self.end_headers()
        if method == "HEAD":
            return
        if fault == "truncated":
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.connection.close()
            return
        self.wfile.write(data)


ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--bind", default="127.0.0.1", help="the address to listen on")
ap.add_argument("--upstream", required=True)
ap.add_argument("--fault-rate", type=float, default=0.0)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--fault-kinds", default="503,429,reset,truncated")
ap.add_argument("--fault-methods", default="GET", help="e.g. GET,PUT,POST,DELETE (uploads too)")
args = ap.parse_args()
rng = random.Random(args.seed)
kinds = args.fault_kinds.split(",")
if not kinds or any(k not in stats["faults"] for k in kinds):
    ap.error(f"--fault-kinds: {args.fault_kinds} (choose from {','.join(stats['faults'])})")
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer((args.bind, args.port), Proxy).serve_forever()
