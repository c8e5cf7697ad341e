// A wasi:http handler in JavaScript (componentize-js / StarlingMonkey's
// fetch event): answers JSON naming the method, the path and query, a
// request header and the body it read, a fresh instance per request.
addEventListener("fetch", (event) => event.respondWith(handle(event.request)));

async function handle(request) {
  const url = new URL(request.url);
  const body = await request.text();
  return new Response(
    JSON.stringify({
      language: "javascript",
      method: request.method,
      path: url.pathname + url.search,
      test: request.headers.get("x-luge-test"),
      body,
    }),
    { headers: { "content-type": "application/json", "x-handled-by": "js" } },
  );
}
