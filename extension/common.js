/* What the service worker and the options page share: reading the pairing URL and naming sites.
 * Loaded by background.js (importScripts) and options.html (<script>); plain functions, no state. */
"use strict";

const SEQLAB_LOOPBACK = new Set(["127.0.0.1", "localhost"]);  // the host permissions, exactly

/** `http://127.0.0.1:8000/?token=...` or `...?code=...` (what `seqlab serve` prints) -> {base, secret}, the
 * secret to prove at pairing (it is never sent); throws a sentence. */
function parsePairingUrl(text) {
  let url;
  try {
    url = new URL(String(text).trim());
  } catch {
    throw new Error("that is not a URL: paste the whole URL `seqlab serve` printed");
  }
  if (url.protocol !== "http:" || !SEQLAB_LOOPBACK.has(url.hostname)) {
    throw new Error("the address must be this machine's own server (http://127.0.0.1:PORT/...)");
  }
  const secret = url.searchParams.get("code") || url.searchParams.get("token");
  if (!secret) throw new Error("the URL has no ?code=... or ?token=...: paste it exactly as `seqlab serve` printed it");
  return { base: url.origin, secret };
}

/** The origin of a site as the person types it ("mail.example.org" or "https://mail.example.org/x"): https,
 * or plain http on this machine only (a local webmail, the tests' fixture pages). A plain http page elsewhere
 * can be rewritten by anyone on the network, who would then read what is typed and suggested there. */
function siteOrigin(text) {
  let s = String(text).trim();
  if (!/^[a-z]+:\/\//i.test(s)) s = `https://${s}`;
  let url;
  try {
    url = new URL(s);
  } catch {
    throw new Error(`not a site: ${text}`);
  }
  if (url.protocol === "https:" || (url.protocol === "http:" && SEQLAB_LOOPBACK.has(url.hostname))) {
    return url.origin;
  }
  throw new Error(`only https sites can be switched on, not ${url.origin} (plain http only on this machine: `
    + "http://127.0.0.1 or http://localhost)");
}

/** Whether a stored origin may stay switched on (an older version let plain http sites on). */
function siteAllowed(origin) {
  try {
    return siteOrigin(origin) === origin;
  } catch {
    return false;
  }
}

/** The match pattern of an origin. Chromium's patterns match a port; Firefox's take none (docs/extension.md). */
function originPattern(origin) {
  const url = new URL(origin);
  return `${url.protocol}//${url.host}/*`;
}
