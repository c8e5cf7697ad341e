// A Luge function in JavaScript, a wasi:cli/command component built by
// componentize-js: JSON parameters on stdin, a JSON result on stdout (the
// OpenWhisk action protocol's last line), a fresh instance per invocation.
import { getStdin } from "wasi:cli/stdin@0.2.10";
import { getStdout } from "wasi:cli/stdout@0.2.10";

function readAll(stream) {
  const chunks = [];
  let length = 0;
  for (;;) {
    let chunk;
    try {
      chunk = stream.blockingRead(65536n);
    } catch {
      break; // closed: the end of the input
    }
    chunks.push(chunk);
    length += chunk.length;
  }
  const all = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    all.set(chunk, at);
    at += chunk.length;
  }
  return new TextDecoder().decode(all);
}

function main(params) {
  const name = typeof params.name === "string" ? params.name : "world";
  return { greeting: `Hello, ${name}!`, language: "javascript" };
}

export const run = {
  run() {
    const input = readAll(getStdin()).trim();
    const params = input ? JSON.parse(input) : {};
    // An OpenWhisk activation wraps its parameters in `value`.
    const result = main(params.value ?? params);
    const out = new TextEncoder().encode(JSON.stringify(result) + "\n");
    getStdout().blockingWriteAndFlush(out);
  },
};
