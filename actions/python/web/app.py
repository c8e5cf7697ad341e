"""A wasi:http handler in Python (componentize-py, world `handler`):
answers JSON naming the method, the path and query, a request header and
the body it read; a fresh instance per request."""

import json

from componentize_py_types import Ok
from wit_world import exports
from wit_world.imports.streams import StreamError_Closed
from wit_world.imports.types import (
    Fields,
    IncomingRequest,
    Method_Other,
    OutgoingBody,
    OutgoingResponse,
    ResponseOutparam,
)


def read_body(request: IncomingRequest) -> bytes:
    chunks = []
    with request.consume() as incoming:
        with incoming.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(65536))
                except Exception as error:  # closed: the end of the body
                    if isinstance(getattr(error, "value", None), StreamError_Closed):
                        break
                    raise
    return b"".join(chunks)


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request: IncomingRequest, response_out: ResponseOutparam) -> None:
        method = request.method()
        name = (
            method.value
            if isinstance(method, Method_Other)
            else type(method).__name__.removeprefix("Method_").upper()
        )
        test = request.headers().get("x-luge-test")
        answer = {
            "language": "python",
            "method": name,
            "path": request.path_with_query(),
            "test": test[0].decode() if test else None,
            "body": read_body(request).decode(),
        }
        response = OutgoingResponse(
            Fields.from_list([("content-type", b"application/json")])
        )
        body = response.body()
        ResponseOutparam.set(response_out, Ok(response))
        with body.write() as stream:
            stream.blocking_write_and_flush(json.dumps(answer).encode())
        OutgoingBody.finish(body, None)
