"""A Python function reading its configuration through wasi:config/store
(world `config-command`): answers the variable named in its JSON input
(`{"name": ...}`) and every variable it was given."""
import json
import sys

from wit_world import exports
from wit_world.imports import store


class Run(exports.Run):
    def run(self) -> None:
        text = sys.stdin.read()
        params = json.loads(text) if text.strip() else {}
        name = params.get("name", "greeting")
        print(json.dumps({
            "value": store.get(name),
            "all": dict(store.get_all()),
        }))
