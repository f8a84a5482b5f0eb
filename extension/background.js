/* The service worker: the only part of the extension that talks to `seqlab serve`.
 *
 * Who may ask it what (every message is checked against its `sender`):
 *   - the options page (an extension page): pair, status, forget, sites;
 *   - the content script, in the top frame of a tab whose origin the person switched on: hello, complete,
 *     cancel (abort that tab's request in flight, named by the number the content script gave it), event,
 *     sent (passed on only to a server that learns). Anything else is refused before the server is
 *     called.
 * Web pages cannot reach it at all: the manifest has no `externally_connectable`, and no
 * runtime.onMessageExternal listener exists. A content script receives only {id, text} of a suggestion.
 *
 * The server: pairing derives a secret shared with the server from the pasted URL's secret, neither of
 * which is ever sent (seqlab/serving/signing.py says how). It is kept as a non-extractable HMAC CryptoKey
 * in this extension's IndexedDB (a content script runs in the page's origin and cannot open it);
 * storage.local holds only the address and the public pairing id. Each request is signed (no reusable
 * key on the wire), each body that carries the person's text is sealed (AES-GCM under a key derived from
 * the pairing secret, for that one request: seqlab/serving/sealing.py), and every answer used must carry
 * the server's proof. Whatever else listens on the port gets no key and no readable text (sealed bytes it
 * cannot open), and none of what it answers is shown or believed. So no question waits for a proven
 * /health first: the last proven one (which model, whether it learns) is kept and renewed in the
 * background, and dropped as soon as an answer is not proven.
 *
 * Sites: the person switches a site (an origin) on in the options page, which asks the browser for that
 * origin's host permission; this worker then registers content.js for the switched-on origins
 * (scripting.registerContentScripts), so the script is not even injected elsewhere.
 */
"use strict";

// parsePairingUrl, siteOrigin, siteAllowed, originPattern, SEQLAB_LOOPBACK. Firefox, whose background is an event page
// listing common.js before this file in `background.scripts`, has them already.
if (typeof importScripts === "function") importScripts("common.js");

const api = globalThis.browser ?? globalThis.chrome;

const SCRIPT_ID = "seqlab-compose";
// The content script's files, in order: ghost_core.js (the rules it shares with the compose page) first, in
// the same isolated world.
const CONTENT_SCRIPTS = ["ghost_core.js", "content.js"];
const MAX_WORDS = 12;         // a cap: the suggestion runs to its sentence's or line's end (`sentence`)
const CONTEXT_MAX = 16_000;   // characters of a quoted original sent as `context`
const PREFIX_MAX = 60_000;    // the server takes 64 KiB; a longer body is cut from the left
const EXTENSION_ORIGIN = new URL(api.runtime.getURL("")).origin;
const NOT_OURS = "not your seqlab server: it could not prove it holds this extension's pairing, so it was sent "
  + "nothing it can read and nothing it said is shown";
const HEALTH_FRESH_MS = 30_000;  // a kept /health older than this is renewed, in the background

// Content scripts may not read storage.local at all where the browser allows saying so (storage.session is
// trusted-only by default). It holds nothing secret either way: the pairing secret lives in IndexedDB.
api.storage.local.setAccessLevel?.({ accessLevel: "TRUSTED_CONTEXTS" })?.catch?.(() => {});

// --------------------------------------------------------------------------- stored state

// What storage.local holds, read once and kept until it changes: every question of a content script reads it
// twice (who is asking, which pairing), and a read is a hop through the browser that a keystroke waits for.
let storedCache = null;
api.storage.onChanged.addListener((changes, area) => { if (area === "local") storedCache = null; });

/** storage.local.set / remove, with the kept copy dropped once they are done (onChanged may come later). */
async function setLocal(items) {
  await api.storage.local.set(items);
  storedCache = null;
}

async function removeLocal(keys) {
  await api.storage.local.remove(keys);
  storedCache = null;
}

async function stored() {
  await migrated;
  if (!storedCache) {
    storedCache = api.storage.local.get(["server", "sites", "notices"]).then(
      ({ server = null, sites = [], notices = [] }) => ({ server, sites, notices }));
    storedCache.catch(() => { storedCache = null; });
  }
  return storedCache;
}

/** Once per start: drop what an older version kept that is no longer safe, and say so in the status. */
async function migrate() {
  const { server = null, sites = [], notices = [] } = await api.storage.local.get(["server", "sites", "notices"]);
  const said = [...notices];
  if (server && (server.key || !server.id)) {
    // a bearer key, sent with every request: whatever listened on the port could take it and reuse it
    await removeLocal("server");
    await dropKey();
    said.push("The old pairing was deleted: it sent a reusable key that whatever listens on the server's "
      + "port could take. Paste the URL `seqlab serve` prints to pair again.");
  }
  const kept = sites.filter(siteAllowed);
  if (kept.length !== sites.length) {
    const dropped = sites.filter((s) => !kept.includes(s));
    await setLocal({ sites: kept });
    said.push(`Switched off ${dropped.join(", ")}: plain http sites can no longer be switched on (anyone on `
      + "the network could rewrite such a page and read what you type). Use the site's https address.");
  }
  if (said.length !== notices.length) await setLocal({ notices: said });
  if (kept.length !== sites.length) await syncScripts(kept);
}

// --------------------------------------------------------------------------- the pairing secret

const DB_NAME = "seqlab";
const DB_STORE = "keys";
const DB_KEY = "pairing";
const DB_SEAL = "seal";  // the AES-GCM key that seals request bodies, derived from the pairing's
let keyCache = null;  // the CryptoKey, once read this start
let sealCache = null;  // {of: the pairing's CryptoKey, seal: its sealing CryptoKey}

function idb(mode, action) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(DB_NAME, 1);
    open.onupgradeneeded = () => open.result.createObjectStore(DB_STORE);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      const tx = db.transaction(DB_STORE, mode);
      const req = action(tx.objectStore(DB_STORE));
      tx.oncomplete = () => { db.close(); resolve(req.result); };
      tx.onerror = () => { db.close(); reject(tx.error); };
    };
  });
}

async function loadKey() {
  keyCache ??= (await idb("readonly", (store) => store.get(DB_KEY))) ?? null;
  return keyCache;
}

async function saveKey(key) {
  await idb("readwrite", (store) => { store.delete(DB_SEAL); return store.put(key, DB_KEY); });
  keyCache = key;
  sealCache = null;
}

async function dropKey() {
  keyCache = null;
  sealCache = null;
  await idb("readwrite", (store) => { store.delete(DB_SEAL); return store.delete(DB_KEY); });
}

/** The AES-256-GCM key of the pairing `key`: K = HMAC-SHA256(S, "seqlab-seal-v1") (seqlab/serving/sealing.py),
 * imported non-extractable and kept in IndexedDB beside S; derived once (a pairing made before sealing too). */
async function sealKey(key) {
  if (sealCache?.of === key) return sealCache.seal;
  let seal = (await idb("readonly", (store) => store.get(DB_SEAL))) ?? null;
  if (!seal) {
    const raw = await crypto.subtle.sign("HMAC", key, utf8.encode("seqlab-seal-v1"));
    seal = await crypto.subtle.importKey("raw", raw, { name: "AES-GCM" }, false, ["encrypt", "decrypt"]);
    await idb("readwrite", (store) => store.put(seal, DB_SEAL));
  }
  sealCache = { of: key, seal };
  return seal;
}

/** The pairing in use: {server: {base, id}, key: CryptoKey (HMAC), seal: CryptoKey (AES-GCM)}, or null. */
async function paired() {
  const { server } = await stored();
  const key = server ? await loadKey() : null;
  return server && key ? { server, key, seal: await sealKey(key) } : null;
}

// --------------------------------------------------------------------------- signing (seqlab/serving/signing.py)

const utf8 = new TextEncoder();
const lines = (...parts) => utf8.encode(parts.join("\n"));

function b64(bytes) {
  let s = "";
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function unb64(text) {
  if (typeof text !== "string" || !/^[A-Za-z0-9_-]*$/.test(text)) return null;
  const s = text.replace(/-/g, "+").replace(/_/g, "/");
  try {
    return Uint8Array.from(atob(s + "=".repeat((4 - (s.length % 4)) % 4)), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}

const newNonce = () => b64(crypto.getRandomValues(new Uint8Array(18)));

async function hexDigest(bytes) {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(d, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** An HMAC-SHA256 key that no script can read back (extractable false). */
const hmacKey = (raw) => crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false,
  ["sign", "verify"]);

const FETCH = { cache: "no-store", credentials: "omit", redirect: "error", referrerPolicy: "no-referrer" };

/** An unsigned JSON call: only the two steps of pairing. */
async function call(base, path, body) {
  const res = await fetch(base + path, { ...FETCH, method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body) });
  const data = await res.json().catch(() => ({}));
  return { ok: res.ok, status: res.status, data };
}

/** `body` as JSON, sealed for the request (method, path, ts, nonce) with AES-GCM: {iv, ciphertext} as JSON text
 * (seqlab/serving/sealing.py). Only the server holding the pairing opens it, and for this request alone. */
async function sealed(seal, method, path, ts, nonce, body) {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const box = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv, additionalData: lines("seqlab-seal-v1", method, path, ts, nonce) }, seal,
    utf8.encode(JSON.stringify(body)));
  return JSON.stringify({ iv: b64(iv), ciphertext: b64(box) });
}

/** A signed call, its body sealed; `proven` says whether the answer carries the server's proof (its data is {}
 * otherwise). */
async function signed({ server, key, seal }, path, { method = "GET", body, signal } = {}) {
  const ts = Date.now();
  const nonce = newNonce();
  const text = body === undefined ? "" : await sealed(seal, method, path, ts, nonce, body);
  const sig = await crypto.subtle.sign("HMAC", key,
    lines("seqlab-request-v1", method, new URL(server.base).host, path, ts, nonce,
      await hexDigest(utf8.encode(text))));
  const headers = { Authorization: `SeqlabHMAC id=${server.id}, ts=${ts}, nonce=${nonce}, sig=${b64(sig)}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(server.base + path, { ...FETCH, method, headers, signal,
    body: body === undefined ? undefined : text });
  const raw = new Uint8Array(await res.arrayBuffer());
  const given = unb64(res.headers.get("seqlab-proof") || "");
  const proven = given !== null && given.length === 32 && await crypto.subtle.verify("HMAC", key, given,
    lines("seqlab-response-v1", nonce, res.status, await hexDigest(raw)));
  let data = {};
  if (proven) {
    try {
      data = JSON.parse(new TextDecoder().decode(raw));
    } catch {
      data = {};
    }
  }
  return { ok: res.ok, status: res.status, data, proven };
}

/** The server's state, from a signed GET /health whose answer must be proven (and kept: `knownHealth`).
 * status: ok, loading, failed, unpaired (401/403 unproven), unreachable, impostor. */
async function challenge(pairing) {
  const health = await askHealth(pairing);
  healthCache = { id: pairing.server.id, at: Date.now(), health };
  return health;
}

async function askHealth(pairing) {
  let res;
  try {
    res = await signed(pairing, "/health");
  } catch {
    return { status: "unreachable", model: null, error: "no answer from the server", learning: false };
  }
  if (!res.proven) {
    // a 401 or 403 is what the real server says once it forgot the pairing (it cannot prove then, having no secret)
    return res.status === 401 || res.status === 403
      ? { status: "unpaired", model: null, error: null, learning: false }
      : { status: "impostor", model: null, error: NOT_OURS, learning: false };
  }
  return { status: res.data.status || (res.ok ? "ok" : `error ${res.status}`), model: res.data.model || null,
    error: res.data.error || null, learning: Boolean(res.data.learning) };
}

// The last proven /health: what a question needs to know of the server (is it ready, does its model read a
// quoted original, does it learn), without a round trip before each key's question. Bodies are sealed and
// answers proven, so a server that changed under it learns nothing and shows nothing; its first unproven
// answer drops this, and the next question asks /health first.
let healthCache = null;  // {id: the pairing id, at: ms, health}
let healthAsked = null;  // the /health in flight, shared by whoever needs it meanwhile

/** The server's state: the kept one while it says ok (renewed in the background once older than
 * HEALTH_FRESH_MS), else a proven /health asked now. */
async function knownHealth(pairing) {
  const kept = healthCache;
  if (kept && kept.id === pairing.server.id && kept.health.status === "ok") {
    if (Date.now() - kept.at > HEALTH_FRESH_MS) renewHealth(pairing).catch(() => {});
    return kept.health;
  }
  return renewHealth(pairing);
}

function renewHealth(pairing) {
  healthAsked ??= challenge(pairing).finally(() => { healthAsked = null; });
  return healthAsked;
}

/** After an answer that was not proven, or a proven refusal: the kept state no longer holds. */
function forgetHealth() {
  healthCache = null;
}

// --------------------------------------------------------------------------- pairing and sites

async function pair(url, name) {
  const { base, secret } = parsePairingUrl(url);
  const pasted = await hmacKey(utf8.encode(secret));
  let res;
  let sn;
  const cn = newNonce();
  try {
    res = await call(base, "/v1/pair/challenge", {});
    sn = res.data.nonce;
    if (res.ok && typeof sn === "string") {
      const proof = await crypto.subtle.sign("HMAC", pasted, lines("seqlab-pair-client-v1", EXTENSION_ORIGIN, sn, cn));
      res = await call(base, "/v1/pair", { name, server_nonce: sn, client_nonce: cn, proof: b64(proof) });
    }
  } catch {
    throw new Error(`no answer from ${base}: is seqlab serve running?`);
  }
  if (!res.ok) {
    if (res.status === 404) throw new Error("this seqlab serve does not pair this way yet: update seqlab");
    throw new Error(`the server refused to pair (${res.status}): ${res.data.error || "no reason given"}`);
  }
  const id = res.data.id;
  const back = unb64(res.data.proof);
  // the server shows it knows the pasted secret too: a program that merely took the port cannot
  const fine = typeof id === "string" && /^[A-Za-z0-9_-]{8,64}$/.test(id) && back !== null && back.length === 32
    && await crypto.subtle.verify("HMAC", pasted, back, lines("seqlab-pair-server-v1", EXTENSION_ORIGIN, sn, cn, id));
  if (!fine) {
    throw new Error(`the server at ${base} is not your seqlab server: it could not prove it knows the printed `
      + "URL's secret. Nothing was kept.");
  }
  const shared = await crypto.subtle.sign("HMAC", pasted, lines("seqlab-pair-secret-v1", EXTENSION_ORIGIN, sn, cn, id));
  await saveKey(await hmacKey(shared));
  await setLocal({ server: { base, id }, notices: [] });
  sessions.clear();
  forgetHealth();
}

async function forget() {
  const pairing = await paired();
  if (pairing) {
    try {
      await signed(pairing, "/v1/pair", { method: "DELETE" });
    } catch {
      // the server is down: the secret is dropped here all the same, and the server's copy pairs nothing alone
    }
  }
  await removeLocal("server");
  await dropKey();
  sessions.clear();
  forgetHealth();
}

async function status() {
  const { sites, notices, server } = await stored();
  const pairing = await paired();
  if (!pairing) return { paired: false, sites, notices, base: server ? server.base : null };
  return { paired: true, base: pairing.server.base, health: await challenge(pairing), sites, notices };
}

/** Register content.js for the switched-on sites whose permission is granted (and nothing else). */
async function syncScripts(given) {
  const sites = given ?? (await stored()).sites;
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
  const script = { id: SCRIPT_ID, matches, js: CONTENT_SCRIPTS, runAt: "document_idle", allFrames: false,
    persistAcrossSessions: true };
  if (existing.length) await api.scripting.updateContentScripts([script]);
  else await api.scripting.registerContentScripts([script]);
}

async function setSite(text, on) {
  const origin = siteOrigin(text);
  const { sites } = await stored();
  const next = sites.filter((s) => s !== origin);
  if (on) next.push(origin);
  await setLocal({ sites: next.sort(), notices: [] });
  await syncScripts();
  if (on) {
    // tabs already open on the site get the script now rather than at their next load
    const tabs = await api.tabs.query({ url: originPattern(origin) }).catch(() => []);
    for (const tab of tabs) {
      api.scripting.executeScript({ target: { tabId: tab.id }, files: CONTENT_SCRIPTS }).catch(() => {});
    }
  } else if (!SEQLAB_LOOPBACK.has(new URL(origin).hostname)) {
    await api.permissions.remove({ origins: [originPattern(origin)] }).catch(() => {});
  }
  return origin;
}

// --------------------------------------------------------------------------- suggestions

const sessions = new Map();   // tab id -> the session the server issued for that tab's writer
const inflight = new Map();   // tab id -> {ctrl, seq}: that tab's one request in flight and its number

async function complete(tabId, msg) {
  const pairing = await paired();
  if (!pairing) return { error: "not paired" };
  const h = await knownHealth(pairing);  // kept from the last proven /health: no round trip per key
  if (h.status !== "ok") return { error: h.status === "impostor" ? NOT_OURS : `the server is ${h.status}` };
  const body = { prefix: String(msg.prefix).slice(-PREFIX_MAX), subject: String(msg.subject || "").slice(0, 2000),
    max_words: MAX_WORDS, sentence: true };
  const session = sessions.get(tabId);
  if (session) body.session = session;
  // the original's names and figures are copied from it by any server; a model with cross-attention reads it
  if (msg.context) body.context = String(msg.context).slice(0, CONTEXT_MAX);
  inflight.get(tabId)?.ctrl.abort();
  const ctrl = new AbortController();
  const mine = { ctrl, seq: Number(msg.seq) || 0 };
  inflight.set(tabId, mine);
  let res;
  try {
    res = await signed(pairing, "/v1/complete", { method: "POST", body, signal: ctrl.signal });
  } catch {
    return { error: ctrl.signal.aborted ? "superseded" : "the server is unreachable" };
  } finally {
    if (inflight.get(tabId) === mine) inflight.delete(tabId);
  }
  if (!res.proven) {  // never shown: a text the server did not prove; the next question asks /health first
    forgetHealth();
    return { error: NOT_OURS };
  }
  if (!res.ok) {  // a server restarted with another model, or loading: ask /health again next time
    forgetHealth();
    return { error: res.data.error || `the server answered ${res.status}` };
  }
  if (res.data.session) sessions.set(tabId, res.data.session);
  return { id: String(res.data.id || ""), text: String(res.data.text || "") };
}

/** The content script no longer wants its request number `seq`: abort it (only that one, should the
 * next one have overtaken this message). */
function cancel(tabId, msg) {
  const going = inflight.get(tabId);
  if (going && going.seq === Number(msg.seq)) going.ctrl.abort();
}

/** An email the person sent: to a server that learns (serve --learn) only; any other keeps no text. */
async function sent(msg) {
  const pairing = await paired();
  if (!pairing || typeof msg.body !== "string" || !msg.body.trim()) return;
  const h = await knownHealth(pairing);  // a `learning` the server did not prove is not believed
  if (h.status !== "ok" || !h.learning) return;
  const body = { subject: String(msg.subject || "").slice(0, 2000), body: msg.body.slice(-PREFIX_MAX) };
  if (msg.context && h.model && h.model.cross_attention) body.context = String(msg.context).slice(0, CONTEXT_MAX);
  const res = await signed(pairing, "/v1/sent", { method: "POST", body }).catch(() => null);
  if (res && !res.proven) forgetHealth();
}

function sendEvent(msg) {
  const kinds = new Set(["shown", "accepted", "dismissed"]);
  if (!kinds.has(msg.kind) || typeof msg.id !== "string" || !msg.id) return;
  (async () => {
    const pairing = await paired();
    if (!pairing || (await knownHealth(pairing)).status !== "ok") return;
    const count = (n) => Math.max(0, Math.min(65536, Number(n) | 0));
    await signed(pairing, "/v1/events", { method: "POST",
      body: { id: msg.id, kind: msg.kind, accepted_chars: count(msg.accepted_chars),
              typed_through_chars: count(msg.typed_through_chars) } });
  })().catch(() => {});
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
    case "cancel":
      cancel(sender.tab.id, msg);
      return { enabled: true };
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
  inflight.get(tabId)?.ctrl.abort();
  inflight.delete(tabId);
});

// Site access taken back in the browser's own settings: stop injecting there too.
api.permissions.onRemoved.addListener(() => { syncScripts().catch(() => {}); });
const migrated = migrate().catch(() => {});

api.runtime.onInstalled.addListener(() => { syncScripts().catch(() => {}); });
api.runtime.onStartup.addListener(() => { syncScripts().catch(() => {}); });
