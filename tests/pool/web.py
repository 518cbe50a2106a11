#!/usr/bin/env python3
"""The test pool's configuration server: serves the files of a directory over https (port 8443,
certificate signed by the test CA) and plain http (port 8080), as a pool's web server would.

Usage: web.py ROOT CERT KEY
"""
import http.server
import ssl
import sys
import threading
from functools import partial

root, cert, key = sys.argv[1:4]


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("web: " + (fmt % args) + "\n")


def serve(port, tls):
    handler = partial(Quiet, directory=root)
    httpd = http.server.ThreadingHTTPServer(("0.0.0.0", port), handler)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    httpd.serve_forever()


threading.Thread(target=serve, args=(8080, False), daemon=True).start()
serve(8443, True)
