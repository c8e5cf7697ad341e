"""A Python function for Luge: reads its JSON input from stdin and writes
its JSON result to stdout, like every Luge function (a WASI 0.2 command
component built with componentize-py)."""
import json
import sys

from wit_world import exports


def main(params):
    name = params.get("name", "stranger")
    return {"greeting": f"Hello, {name}!", "language": "python"}


class Run(exports.Run):
    def run(self) -> None:
        text = sys.stdin.read()
        params = json.loads(text) if text.strip() else {}
        print(json.dumps(main(params)))
