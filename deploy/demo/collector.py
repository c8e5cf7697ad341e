#!/usr/bin/env python3
"""The demo's trace collector: OTLP over HTTP with JSON bodies (what Luge
exports with OTEL_EXPORTER_OTLP_PROTOCOL=http/json), loopback only.

  collector.py serve PORT FILE   keeps every span it is sent in FILE, one
                                 JSON object a line; answers logs and
                                 metrics exports and drops them
  collector.py tree FILE TRACE   prints trace TRACE (32 hex digits) as a
                                 tree: each span under its parent, with its
                                 duration and its status when not OK

Bounded: a body over 4 MiB is refused (413), and FILE stops growing past
64 MiB. Nothing but the demo uses it."""
import http.server
import json
import sys

MAX_BODY = 4 << 20
MAX_FILE = 64 << 20


def serve(port, path):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            if length > MAX_BODY:
                self.send_response(413)
                self.end_headers()
                return
            body = self.rfile.read(length)
            if self.path == "/v1/traces":
                spans = []
                for resource in json.loads(body or b"{}").get("resourceSpans", []):
                    service = next(
                        (a["value"].get("stringValue") for a in
                         resource.get("resource", {}).get("attributes", [])
                         if a.get("key") == "service.name"), "?")
                    for scope in resource.get("scopeSpans", []):
                        for span in scope.get("spans", []):
                            span["service"] = service
                            spans.append(span)
                with open(path, "a") as out:
                    if out.tell() < MAX_FILE:
                        out.writelines(json.dumps(s) + "\n" for s in spans)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def tree(path, trace):
    spans = []
    with open(path) as lines:
        for line in lines:
            span = json.loads(line)
            if span.get("traceId", "").lower() == trace.lower():
                spans.append(span)
    if not spans:
        print(f"  (no span of trace {trace} arrived yet)")
        return 1
    ids = {s["spanId"] for s in spans}
    children = {}
    for span in spans:
        parent = span.get("parentSpanId") or ""
        children.setdefault(parent if parent in ids else "", []).append(span)

    def show(span, depth):
        micros = (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1000
        status = span.get("status", {}).get("code")
        flag = "" if status in (None, 0, 1, "STATUS_CODE_UNSET", "STATUS_CODE_OK") else "  [error]"
        print(f"  {'  ' * depth}{span['name']}  {micros:,.0f} µs{flag}")
        for child in sorted(children.get(span["spanId"], []), key=lambda s: int(s["startTimeUnixNano"])):
            show(child, depth + 1)

    for root in sorted(children.get("", []), key=lambda s: int(s["startTimeUnixNano"])):
        show(root, 0)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "tree":
        sys.exit(tree(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
