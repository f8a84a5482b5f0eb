/* The compose page's autocomplete: ask the local model how the writer's sentence goes on at each edit,
 * and draw it in grey after the caret ("ghost text").
 *
 * When to ask. At once, on each edit: a fixed wait before asking (a debounce) was most of the time from a
 * key to its ghost. But never two requests in flight from this page: an edit made while one is answered
 * waits for that answer (which, being for a text that no longer exists, is never drawn) and then asks
 * for the newest text only; edits in between are never asked about. And at most one request starts per
 * MIN_GAP_MS, so a burst of keys (15 ms apart) costs one request per gap, not one per key. A request
 * that nothing can use any more (Esc, the caret moved, the box left, typing through the ghost) is
 * cancelled with its AbortController. `?debounce=MS` in the address brings back the older pacing (wait
 * MS after the last key, then ask), for the latency benchmark's side-by-side (seqlab/bench/latency_browser.py).
 * The pacing, the typing through and the keys are ghost_core.js's, shared with the extension.
 *
 * How the ghost is drawn. A textarea cannot colour part of its text, and a contenteditable body makes
 * the caret, undo and pasting the page's problem. So the body stays a plain textarea with a transparent
 * background, and behind it sits #mirror, a div with exactly the same box, font and wrapping rules
 * (compose.css). The mirror holds the typed text, invisible, followed by the suggestion in grey: the
 * suggestion therefore starts exactly where the textarea's last character ends, wraps where the textarea
 * would wrap it, and the textarea keeps its real caret, selection and undo history.
 *
 * The one rule for when to suggest: only when the caret is at the very end of the body. Completing in the
 * middle of a text would need the text after the caret as well, which the model does not read; rather than
 * pretend, the page stays quiet there.
 *
 * The "replying to" box: the message being answered goes with every request as `context`. The server offers
 * its names, figures and phrases where the reply starts typing them, whatever the model; a model trained
 * with a model.context (`/health`: model.cross_attention) also reads all of it while it suggests.
 *
 * API: POST /v1/complete {prefix, subject, session, max_words, sentence, context?} -> {id, text, confidence,
 * latency_ms, session, ...}; POST /v1/events {id, kind: shown|accepted|dismissed, accepted_chars,
 * typed_through_chars} (the characters Tab and Ctrl+Right inserted, and those typed by hand through it);
 * GET /health; POST /login {code} -> {credential} (see below). Every other call carries this tab's
 * credential (`api`). Each suggestion shown is announced as a "seqlab:shown" event on the document for the
 * "why?" panel (why.js).
 */
(() => {
  "use strict";

  const core = globalThis.seqlabGhostCore;  // ghost_core.js, loaded before this file
  // 0: ask at once (top of this file); > 0: the older pacing, for the benchmark's side-by-side
  const DEBOUNCE_MS = Math.max(0, Number(new URLSearchParams(location.search).get("debounce")) || 0);
  // Up to the end of the sentence or line (the server's `sentence`), this many words at most: the server's
  // rule shows as much of it as it is sure of; Tab takes it all, Ctrl+Right one word.
  const MAX_WORDS = 12;
  const HEALTH_RETRY_MS = 1000;

  const $ = (id) => document.getElementById(id);
  const body = $("body");
  const subject = $("subject");
  const mirror = $("mirror");
  const typedEl = $("typed");
  const ghostEl = $("ghost");
  const statusEl = $("status");
  const modelEl = $("model");
  const replyBox = $("reply");
  const replySummary = $("reply-summary");
  const replyText = $("reply-to");

  // Whether the model reads the message being answered: known once /health has described it.
  const replyContext = () => (replyText.value.trim() ? replyText.value : "");

  // The server admits only the person. `seqlab serve` prints this page's URL with a one-time code
  // (?code=...), which the page trades once (POST /login) for a credential of its own, kept for this tab in
  // sessionStorage (so a reload still works) and shown with every call. The code is then spent and taken
  // out of the address bar: the history, a bookmark or a screenshot hold nothing usable. (Under
  // --allow-remote the URL carries the launch token itself, which the page's own files need.)
  //
  // A service worker is script of this origin that sees every request of the pages it controls. This page
  // has none; one found here was left by another page served earlier on this host and port, and would
  // see the credential and the mail. So the page then neither reads nor trades the code nor stores or
  // sends anything: it removes the workers it can and says why; the reload it asks for is not watched
  // and trades the code still in the address bar. (A Clear-Site-Data header on the page would remove the
  // worker before the page runs, but Chromium then never finishes a navigation from another process that
  // the worker fetched: docs/privacy.md.)
  const STORED = "seqlab-credential";
  const NEEDS_LOGIN = "open the newest link `seqlab serve` printed (each one works once)";
  const PORT = location.port || "80";
  const WATCHED = `A service worker left on ${location.hostname}:${PORT} by another page was watching this ` +
    "page, so nothing was sent or kept; it has been removed: reload this page (if this message comes back, " +
    `clear the site data of ${location.hostname}:${PORT} in the browser's settings).`;
  let refused = "";  // why this page sends nothing, once it knows

  async function serviceWorkers() {
    const sw = navigator.serviceWorker;
    if (!sw) return false;
    const found = await sw.getRegistrations().catch(() => []);
    if (!sw.controller && !found.length) return false;
    await Promise.all(found.map((r) => r.unregister().catch(() => false)));
    return true;
  }

  function dropFromAddress(name) {
    const params = new URLSearchParams(location.search);
    params.delete(name);
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? `?${rest}` : "") + location.hash);
  }

  async function logIn() {
    if (await serviceWorkers()) {
      refused = WATCHED;
      return "";
    }
    const params = new URLSearchParams(location.search);
    const code = params.get("code");
    const token = params.get("token");
    if (code) {
      const res = await fetch("/login", { method: "POST", headers: { "Content-Type": "application/json" },
                                          body: JSON.stringify({ code }) }).catch(() => null);
      if (!res) {  // the code is still good: a reload once the server runs trades it
        refused = "the server is unreachable: reload this page once it runs";
        return "";
      }
      dropFromAddress("code");  // spent now, or never good
      const data = await res.json().catch(() => ({}));
      if (res.ok && data.credential) {
        sessionStorage.setItem(STORED, data.credential);
        return data.credential;
      }
      const kept = sessionStorage.getItem(STORED) || "";  // this tab logged in before: it still may
      if (!kept) refused = `this link was used already: ${NEEDS_LOGIN}`;
      return kept;
    }
    if (token) {
      dropFromAddress("token");
      sessionStorage.setItem(STORED, token);
      return token;
    }
    const kept = sessionStorage.getItem(STORED) || "";
    if (!kept) refused = `not logged in: ${NEEDS_LOGIN}`;
    return kept;
  }
  const CREDENTIAL = logIn();
  class Refused extends Error {}

  // fetch with the credential, and JSON's content type when there is a body (the server takes nothing
  // else); nothing at all leaves a page that refused (see above)
  async function api(path, options = {}) {
    const credential = await CREDENTIAL;
    if (!credential) throw new Refused(refused);
    const headers = { Authorization: `Bearer ${credential}` };
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    return fetch(path, { ...options, headers });
  }
  window.seqlabApi = api;  // why.js asks through it too

  // The session the server named in its last answer: it keeps this writer's model state under it and,
  // when the next prefix extends the last one, feeds only the new characters instead of the whole body.
  let session = null;

  // The suggestion on screen (ghost_core.js's suggestion(): `base` is the body it was asked for), or null.
  let current = null;
  let requests = 0;
  let inserting = false; // our own insertion is running: its input event is Tab or Ctrl+Right, not typing

  const caretAtEnd = () =>
    body.selectionStart === body.value.length && body.selectionEnd === body.value.length;

  const remaining = () => core.rest(current);

  function render() {
    typedEl.textContent = body.value;
    ghostEl.textContent = remaining();
    ghostEl.dataset.id = current ? current.id : "";
    mirror.scrollTop = body.scrollTop;
  }

  // Fire and forget: a lost event costs a statistic, never the writer's time. keepalive lets the last
  // one out even while the page is being closed. `event`: ghost_core.js's eventOf() or closingEvent().
  function sendEvent(event) {
    api("/v1/events", { method: "POST", body: JSON.stringify(event), keepalive: true }).catch(() => {});
  }

  // Ends the shown suggestion: each gets one closing event (ghost_core.js's closingEvent()).
  function finish(kind) {
    const done = current;
    current = null;
    render();
    if (done) sendEvent(core.closingEvent(done, kind));
  }

  // The one request in flight is an AbortController; one that nothing can use any more is aborted.
  const pace = core.pacer({ request: () => requestSuggestion(), cancel: (ctrl) => { if (ctrl) ctrl.abort(); },
                            debounceMs: () => DEBOUNCE_MS });
  const cancelPending = pace.cancelPending;

  function dismiss() {
    cancelPending();
    finish("dismissed");
  }

  // --------------------------------------------------------------------------- status line

  function setStatus(...parts) {
    statusEl.replaceChildren(...parts);
  }

  function el(tag, text, attrs = {}) {
    const node = document.createElement(tag);
    node.textContent = text;
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  }

  function showMetrics(data) {
    const pct = el("span", `${Math.round(100 * (data.confidence || 0))}%`,
      { title: "the model's probability of the first word", class: "confidence" });
    const ms = el("span", ` · ${Math.round(data.latency_ms || 0)} ms`, { class: "latency" });
    const hint = data.text ? [" · ", el("kbd", "Tab"), " to accept"] : [" · no suggestion"];
    setStatus(pct, ms, ...hint);
  }

  function showError(message) {
    setStatus(el("span", message, { class: "error" }));
  }

  // --------------------------------------------------------------------------- asking the model

  async function requestSuggestion() {
    if (document.activeElement !== body || !caretAtEnd() || !body.value.trim()) return;
    const prefix = body.value;
    const asked = subject.value;
    const context = replyContext();
    const ctrl = new AbortController();
    pace.begin(ctrl);
    body.dataset.requests = String(++requests);  // visible to the browser test, and to the curious
    let data;
    try {
      const res = await api("/v1/complete", {
        method: "POST",
        body: JSON.stringify({ prefix, subject: asked, session, max_words: MAX_WORDS, sentence: true,
                               ...(context ? { context } : {}) }),
        signal: ctrl.signal,
      });
      data = await res.json().catch(() => ({}));
      if (!res.ok) {
        showError(res.status === 401 ? `no suggestion: this page's login is not this server's: ${NEEDS_LOGIN}`
          : `no suggestion: ${data.error || `server answered ${res.status}`}`);
        return;
      }
      session = data.session || null;
    } catch (err) {
      if (err instanceof Refused) showError(err.message);
      else if (err.name !== "AbortError") showError("no suggestion: the server is unreachable");
      return;
    } finally {
      pace.end(ctrl);  // an edit made meanwhile is asked about now
    }
    // The writer kept going while the model thought: this answer is for a text that no longer exists.
    if (body.value !== prefix || !caretAtEnd() || document.activeElement !== body) return;
    if (replyContext() !== context) return;  // and so is one for another original
    showMetrics(data);
    if (current) finish("dismissed");
    if (!data.text) return;  // the model was unsure, and said so with an empty text
    current = core.suggestion(data.id, prefix, data.text);
    render();
    sendEvent(core.eventOf(current, "shown"));
    // why.js offers "why?" for the suggestion shown last, with the email exactly as it was asked for
    // (its id too: the server then says whether it came from the person's own earlier mail)
    document.dispatchEvent(new CustomEvent("seqlab:shown",
      { detail: { prefix, subject: asked, text: data.text, id: data.id } }));
  }

  // --------------------------------------------------------------------------- typing and keys

  // Every change of the body comes through here, the writer's keystrokes and our own insertions alike.
  // If what was typed since the suggestion was asked is still a prefix of it, the writer is typing
  // through it: the ghost shrinks and no new request is made. Otherwise the suggestion is gone.
  function onInput() {
    if (current) {
      const step = core.typeThrough(current, body.value, caretAtEnd(), inserting);
      if (step === "typing") {
        cancelPending();
        render();
        return;
      }
      finish(step);
    }
    render();
    pace.schedule();
  }

  // execCommand keeps the insertion in the browser's undo history (Ctrl+Z takes a suggestion back), and
  // fires "input" like typing would; setRangeText is the fallback where execCommand is gone.
  function insertAtCaret(text) {
    inserting = true;
    try {
      if (!document.execCommand("insertText", false, text)) {
        body.setRangeText(text, body.selectionStart, body.selectionEnd, "end");
        body.dispatchEvent(new Event("input", { bubbles: true }));
      }
    } finally {
      inserting = false;
    }
  }

  // Tab takes the ghost, Ctrl+Right one word, Esc dismisses it; with nothing shown, every key keeps its
  // usual meaning (Tab moves the focus on).
  function onKeyDown(e) {
    if (e.isComposing) return;
    const act = core.keyAction(e, remaining());
    if (!act) return;
    if (act.claim) e.preventDefault();
    if (act.dismiss) dismiss();  // also cancels a request on its way: the writer said no
    else insertAtCaret(act.take);
  }

  body.addEventListener("input", onInput);
  body.addEventListener("keydown", onKeyDown);
  body.addEventListener("scroll", () => { mirror.scrollTop = body.scrollTop; });
  // Leaving the body, by a click elsewhere or the keyboard, takes the suggestion away.
  body.addEventListener("blur", dismiss);
  // A caret moved off the end (click, arrows, selection) breaks the end-of-body rule.
  document.addEventListener("selectionchange", () => {
    if (current && document.activeElement === body && !caretAtEnd()) dismiss();
  });

  // --------------------------------------------------------------------------- buttons and health

  $("copy").addEventListener("click", async () => {
    const text = `To: ${$("to").value}\nSubject: ${subject.value}\n\n${body.value}`;
    try {
      await navigator.clipboard.writeText(text);
      setStatus("copied to the clipboard");
    } catch {
      showError("the browser did not allow copying");
    }
  });

  $("discard").addEventListener("click", () => {
    dismiss();
    for (const field of [$("to"), subject, replyText, body]) field.value = "";
    render();
    setStatus("");
    $("to").focus();
  });

  // The box says what is done with the message (see the top of this file).
  function setupReply(model) {
    replySummary.textContent = "Replying to";
    replySummary.title = model.cross_attention ? "the model reads this message while it suggests"
      : "its names, figures and phrases are offered where your reply types them";
  }
  // a changed original makes the suggestion on screen stale: it goes, and the body's next keystroke asks
  // again with the new original
  replyText.addEventListener("input", () => { if (current) finish("dismissed"); });

  function setModel(state, text) {
    modelEl.className = `model ${state}`;
    modelEl.textContent = text;
  }

  // "gru · 61k parameters · byte tokens": what is suggesting, in a few words.
  function describeModel(model) {
    const parts = [];
    if (model.mixer) parts.push(model.mixer);
    if (model.params) parts.push(`${model.params >= 1e6 ? `${(model.params / 1e6).toFixed(1)}M`
      : `${Math.round(model.params / 1e3)}k`} parameters`);
    if (model.tokenizer) parts.push(`${model.tokenizer} tokens`);
    return parts.length ? `model: ${parts.join(" · ")}` : "model ready";
  }

  // The server answers 503 while it loads the model; the page says so and keeps asking.
  async function watchHealth() {
    try {
      const res = await api("/health", { cache: "no-store" });
      const data = await res.json().catch(() => ({}));
      if (res.status === 401 || (res.ok && !data.model)) {  // a login of another launch: the model is the person's
        setModel("down", "not this server's login");
        showError(NEEDS_LOGIN);
        return;
      }
      if (res.ok) {
        setModel("ready", describeModel(data.model || {}));
        setupReply(data.model || {});
        return;
      }
      setModel("waiting", "loading the model…");
    } catch (err) {
      if (err instanceof Refused) {  // nothing is asked, ever again, from this page
        setModel("down", err.message === WATCHED ? "refused: a service worker was watching" : "not logged in");
        showError(err.message);
        return;
      }
      setModel("down", "server unreachable");
    }
    setTimeout(watchHealth, HEALTH_RETRY_MS);
  }

  render();
  watchHealth();
})();
