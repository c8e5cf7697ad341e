"""A Python function on wasi:keyvalue (world `keyvalue-command`): one
operation per request, from its JSON input:

- `{"op": "incr", "bucket": B, "key": K, "by": N}` -> `{"value": new}`
- `{"op": "set", "bucket": B, "key": K, "value": V}` -> `{"ok": true}`
- `{"op": "get", "bucket": B, "key": K}` -> `{"value": V or null}`
- `{"op": "delete", ...}`, `{"op": "exists", ...}`
- `{"op": "many", "bucket": B, "set": {K: V}, "get": [K]}` -> values
- `{"op": "open", "count": N}` -> `{"open": N + 1}`, holding N more
  buckets open besides the one every operation opens

A failure answers `{"error": ...}` naming the store's error."""
import json
import sys

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import atomics, batch, store


def run(params):
    bucket = store.open(params.get("bucket", "default"))
    key = params.get("key", "")
    op = params.get("op")
    if op == "incr":
        return {"value": atomics.increment(bucket, key, params.get("by", 1))}
    if op == "set":
        bucket.set(key, params["value"].encode())
        return {"ok": True}
    if op == "get":
        value = bucket.get(key)
        return {"value": None if value is None else value.decode()}
    if op == "delete":
        bucket.delete(key)
        return {"ok": True}
    if op == "exists":
        return {"exists": bucket.exists(key)}
    if op == "many":
        pairs = [(k, v.encode()) for k, v in params.get("set", {}).items()]
        batch.set_many(bucket, pairs)
        got = batch.get_many(bucket, params.get("get", []))
        return {"values": [None if kv is None else [kv[0], kv[1].decode()] for kv in got]}
    if op == "open":
        held = []
        for _ in range(params.get("count", 1)):
            held.append(store.open(params.get("bucket", "default")))
        return {"open": len(held) + 1}
    if op == "list":
        return {"keys": bucket.list_keys(None).keys}
    return {"error": f"unknown op {op!r}"}


class Run(exports.Run):
    def run(self) -> None:
        text = sys.stdin.read()
        params = json.loads(text) if text.strip() else {}
        try:
            answer = run(params)
        except Err as e:
            answer = {"error": repr(e.value)}
        print(json.dumps(answer))
