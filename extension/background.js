/* The service worker: the only part of the extension that talks to `seqlab serve`.
 *
 * Who may ask it what (every message is checked against its `sender`):
 *   - the options page (an extension page): pair, status, forget, sites;
 *   - the content script, in the top frame of a tab whose origin the person switched on: hello, complete,
 *     event, sent (passed on only to a server that learns). Anything else is refused before the server is
 *     called.
 * Web pages cannot reach it at all: the manifest has no `externally_connectable`, and no
 * runtime.onMessageExternal listener exists. The key lives in storage.local and never leaves this worker
 * and the options page; a content script receives only {id, text} of a suggestion.
 *
 * Sites: the person switches a site (an origin) on in the options page, which asks the browser for that
 * origin's host permission; this worker then registers content.js for the switched-on origins
 * (scripting.registerContentScripts), so the script is not even injected elsewhere.
 */
"use strict";

// parsePairingUrl, siteOrigin, originPattern, SEQLAB_LOOPBACK. Firefox, whose background is an event page
// listing common.js before this file in `background.scripts`, has them already.
if (typeof importScripts === "function") importScripts("common.js");

const api = globalThis.browser ?? globalThis.chrome;

const SCRIPT_ID = "seqlab-compose";
const MAX_WORDS = 3;
const HEALTH_TTL_MS = 10_000;
const CONTEXT_MAX = 16_000;   // characters of a quoted original sent as `context`
const PREFIX_MAX = 60_000;    // the server takes 64 KiB; a longer body is cut from the left
const EXTENSION_ORIGIN = new URL(api.runtime.getURL("")).origin;

// --------------------------------------------------------------------------- stored state

async function stored() {
  const { server = null, sites = [] } = await api.storage.local.get(["server", "sites"]);
  return { server, sites };
}

// --------------------------------------------------------------------------- the server

async function call(base, path, { method = "GET", body, credential, signal } = {}) {
  const headers = {};
  if (credential) headers.Authorization = `Bearer ${credential}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(base + path, {
    method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store", credentials: "omit", redirect: "error", referrerPolicy: "no-referrer",
  });
  const data = await res.json().catch(() => ({}));
  return { ok: res.ok, status: res.status, data };
}

let health = { at: 0, value: null };

/** GET /health with the key: {status, model} (cached for a few seconds; `fresh` skips the cache). */
async function serverHealth(server, fresh = false) {
  if (!fresh && health.value && Date.now() - health.at < HEALTH_TTL_MS && health.base === server.base) {
    return health.value;
  }
  let value;
  try {
    const res = await call(server.base, "/health", { credential: server.key });
    // 401: the server does not know this key (it was unpaired there, or its paired.json was reset)
    value = res.status === 401 ? { status: "unpaired", model: null, error: null, learning: false }
      : { status: res.data.status || (res.ok ? "ok" : `error ${res.status}`), model: res.data.model || null,
        error: res.data.error || null, learning: Boolean(res.data.learning) };
  } catch {
    value = { status: "unreachable", model: null, error: "no answer from the server" };
  }
  health = { at: Date.now(), base: server.base, value };
  return value;
}

// --------------------------------------------------------------------------- pairing and sites

async function pair(url, name) {
  const { base, token } = parsePairingUrl(url);
  let res;
  try {
    res = await call(base, "/v1/pair", { method: "POST", credential: token, body: { name } });
  } catch {
    throw new Error(`no answer from ${base}: is seqlab serve running?`);
  }
  if (!res.ok) {
    if (res.status === 404) throw new Error("this seqlab serve does not pair yet: update seqlab");
    throw new Error(`the server refused to pair (${res.status}): ${res.data.error || "no reason given"}`);
  }
  if (!res.data.key) throw new Error("the server answered without a key");
  await api.storage.local.set({ server: { base, key: res.data.key, origin: res.data.origin || EXTENSION_ORIGIN } });
  health = { at: 0, value: null };
  sessions.clear();
}

async function forget() {
  const { server } = await stored();
  if (server) {
    try {
      await call(server.base, "/v1/pair", { method: "DELETE", credential: server.key });
    } catch {
      // the server is down: the key is dropped here all the same (and useless without this extension's origin)
    }
  }
  await api.storage.local.remove("server");
  health = { at: 0, value: null };
  sessions.clear();
}

async function status() {
  const { server, sites } = await stored();
  if (!server) return { paired: false, sites };
  return { paired: true, base: server.base, health: await serverHealth(server, true), sites };
}

/** Register content.js for the switched-on sites whose permission is granted (and nothing else). */
async function syncScripts() {
  const { sites } = await stored();
  const matches = [];
  for (const origin of sites) {
    const pattern = originPattern(origin);
    if (await api.permissions.contains({ origins: [pattern] })) matches.push(pattern);
  }
  const existing = await api.scripting.getRegisteredContentScripts({ ids: [SCRIPT_ID] });
  if (!matches.length) {
    if (existing.length) await api.scripting.unregisterContentScripts({ ids: [SCRIPT_ID] });
    return;
  }
  const script = { id: SCRIPT_ID, matches, js: ["content.js"], runAt: "document_idle", allFrames: false,
    persistAcrossSessions: true };
  if (existing.length) await api.scripting.updateContentScripts([script]);
  else await api.scripting.registerContentScripts([script]);
}

async function setSite(text, on) {
  const origin = siteOrigin(text);
  const { sites } = await stored();
  const next = sites.filter((s) => s !== origin);
  if (on) next.push(origin);
  await api.storage.local.set({ sites: next.sort() });
  await syncScripts();
  if (on) {
    // tabs already open on the site get the script now rather than at their next load
    const tabs = await api.tabs.query({ url: originPattern(origin) }).catch(() => []);
    for (const tab of tabs) {
      api.scripting.executeScript({ target: { tabId: tab.id }, files: ["content.js"] }).catch(() => {});
    }
  } else if (!SEQLAB_LOOPBACK.has(new URL(origin).hostname)) {
    await api.permissions.remove({ origins: [originPattern(origin)] }).catch(() => {});
  }
  return origin;
}

// --------------------------------------------------------------------------- suggestions

const sessions = new Map();   // tab id -> the session the server issued for that tab's writer
const inflight = new Map();   // tab id -> the AbortController of that tab's one request in flight

async function complete(tabId, msg) {
  const { server } = await stored();
  if (!server) return { error: "not paired" };
  const body = { prefix: String(msg.prefix).slice(-PREFIX_MAX), subject: String(msg.subject || "").slice(0, 2000),
    max_words: MAX_WORDS };
  const session = sessions.get(tabId);
  if (session) body.session = session;
  if (msg.context) {
    // a model trained without cross-attention answers 422 to a context: send it only to one that reads it
    const h = await serverHealth(server);
    if (h.model && h.model.cross_attention) body.context = String(msg.context).slice(0, CONTEXT_MAX);
  }
  inflight.get(tabId)?.abort();
  const ctrl = new AbortController();
  inflight.set(tabId, ctrl);
  let res;
  try {
    res = await call(server.base, "/v1/complete", { method: "POST", credential: server.key, body, signal: ctrl.signal });
  } catch {
    return { error: ctrl.signal.aborted ? "superseded" : "the server is unreachable" };
  } finally {
    if (inflight.get(tabId) === ctrl) inflight.delete(tabId);
  }
  if (!res.ok) return { error: res.data.error || `the server answered ${res.status}` };
  if (res.data.session) sessions.set(tabId, res.data.session);
  return { id: String(res.data.id || ""), text: String(res.data.text || "") };
}

/** An email the person sent: to a server that learns (serve --learn) only; any other keeps no text. */
async function sent(msg) {
  const { server } = await stored();
  if (!server || typeof msg.body !== "string" || !msg.body.trim()) return;
  const h = await serverHealth(server, true);
  if (!h.learning) return;
  const body = { subject: String(msg.subject || "").slice(0, 2000), body: msg.body.slice(-PREFIX_MAX) };
  if (msg.context && h.model && h.model.cross_attention) body.context = String(msg.context).slice(0, CONTEXT_MAX);
  await call(server.base, "/v1/sent", { method: "POST", credential: server.key, body }).catch(() => {});
}

function sendEvent(msg) {
  const kinds = new Set(["shown", "accepted", "dismissed"]);
  if (!kinds.has(msg.kind) || typeof msg.id !== "string" || !msg.id) return;
  stored().then(({ server }) => {
    if (!server) return;
    const accepted = Math.max(0, Math.min(65536, Number(msg.accepted_chars) | 0));
    call(server.base, "/v1/events", { method: "POST", credential: server.key,
      body: { id: msg.id, kind: msg.kind, accepted_chars: accepted } }).catch(() => {});
  });
}

// --------------------------------------------------------------------------- who is asking

function fromOptionsPage(sender) {
  return sender.id === api.runtime.id && typeof sender.url === "string" &&
    new URL(sender.url).origin === EXTENSION_ORIGIN;
}

/** The switched-on origin of a content script's tab, or null (not a content script, a frame, a site off). */
async function enabledSender(sender) {
  if (sender.id !== api.runtime.id || !sender.tab || sender.frameId !== 0 || typeof sender.url !== "string") {
    return null;
  }
  let origin;
  try {
    origin = new URL(sender.url).origin;
  } catch {
    return null;
  }
  if (origin === EXTENSION_ORIGIN || (sender.origin && sender.origin !== origin)) return null;
  const { sites } = await stored();
  return sites.includes(origin) ? origin : null;
}

async function handle(msg, sender) {
  if (!msg || typeof msg !== "object") return { error: "bad message" };
  if (fromOptionsPage(sender)) {
    switch (msg.type) {
      case "pair":
        await pair(msg.url, String(msg.name || "seqlab extension"));
        return status();
      case "forget":
        await forget();
        return status();
      case "status":
        return status();
      case "site":
        await setSite(msg.origin, Boolean(msg.on));
        return status();
      default:
        return { error: "unknown request" };
    }
  }
  const origin = await enabledSender(sender);
  if (!origin) return { enabled: false };
  switch (msg.type) {
    case "hello":
      return { enabled: true };
    case "complete":
      return { enabled: true, ...(await complete(sender.tab.id, msg)) };
    case "event":
      sendEvent(msg);
      return { enabled: true };
    case "sent":
      await sent(msg);
      return { enabled: true };
    default:
      return { error: "unknown request" };
  }
}

api.runtime.onMessage.addListener((msg, sender, sendResponse) => {
  handle(msg, sender).then(sendResponse, (err) => sendResponse({ error: String(err && err.message || err) }));
  return true;  // the answer comes asynchronously
});

api.tabs.onRemoved.addListener((tabId) => {
  sessions.delete(tabId);
  inflight.get(tabId)?.abort();
  inflight.delete(tabId);
});

// Site access taken back in the browser's own settings: stop injecting there too.
api.permissions.onRemoved.addListener(() => { syncScripts().catch(() => {}); });
api.runtime.onInstalled.addListener(() => { syncScripts().catch(() => {}); });
api.runtime.onStartup.addListener(() => { syncScripts().catch(() => {}); });
