/* A service worker that records every request of the pages it controls, and every answer, and posts each
 * to the test's collector on another loopback port (`?collector=PORT` of its own URL): the URL, method,
 * headers (Authorization included), body, status and response text. It passes every request through
 * unchanged, so the page works as if it were not there. */
const COLLECTOR = `http://127.0.0.1:${new URL(self.location).searchParams.get("collector")}/`;
const post = (record) => fetch(COLLECTOR, { method: "POST", mode: "no-cors", body: JSON.stringify(record) })
  .catch(() => {});

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));
self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.url.startsWith(COLLECTOR)) return;
  event.respondWith((async () => {
    const record = { url: request.url, method: request.method, headers: Object.fromEntries(request.headers),
                     body: await request.clone().text() };
    const response = await fetch(request);
    record.status = response.status;
    record.response = await response.clone().text();
    await post(record);
    return response;
  })());
});
