/* The content script: ghost text in the compose boxes of a site the person switched on.
 *
 * It runs only where the service worker registered it (the switched-on sites), and even there it first
 * asks the worker whether this page's origin is on; if not it installs nothing at all. It never listens to
 * the page's postMessage, never reads the key and never sees more of the server's answer than the text to
 * show. Keys and typed text count only when the browser says a person made them (`isTrusted`, and a
 * trusted beforeinput before an edit): a page's script that dispatches its own key or input events, or
 * edits the box with execCommand, moves nothing and asks the server nothing.
 *
 * The same behaviour as the compose page (seqlab/serving/static/compose.js): a suggestion is asked for
 * as the writer pauses, with the caret at the end of its line; Tab takes it all, Ctrl+Right one word, Esc
 * dismisses it, and typing its own letters shrinks it without asking again. When nothing is shown, every
 * key keeps the site's meaning (Tab included).
 *
 * The ghost is never part of the page's text: it is drawn in an overlay element outside the compose box,
 * in a closed shadow root, with pointer-events:none. Accepting inserts it with
 * document.execCommand("insertText"), so the site sees ordinary typing and Ctrl+Z takes it back.
 */
(() => {
  "use strict";

  const LOADED = "__seqlabComposeLoaded";  // the isolated world's global: the page cannot see or set it
  if (globalThis[LOADED]) return;
  globalThis[LOADED] = true;

  const api = globalThis.browser ?? globalThis.chrome;
  const DEBOUNCE_MS = 150;
  const CONTEXT_MAX = 16_000;
  const BLOCKS = new Set(["ADDRESS", "ARTICLE", "ASIDE", "BLOCKQUOTE", "DD", "DIV", "DL", "DT", "FIGURE",
    "FOOTER", "FORM", "H1", "H2", "H3", "H4", "H5", "H6", "HEADER", "HR", "LI", "MAIN", "NAV", "OL", "P",
    "PRE", "SECTION", "TABLE", "TD", "TH", "TR", "UL"]);
  const SKIP = new Set(["SCRIPT", "STYLE", "TEMPLATE", "NOSCRIPT"]);
  const SUBJECT = ['input[name="subject" i]', 'input[name="subjectbox" i]', 'input[name="_subject" i]',
    'input[id*="subject" i]', 'input[aria-label*="subject" i]', 'input[placeholder*="subject" i]'].join(",");
  // where webmail keeps the message being answered: Gmail, Roundcube/Thunderbird (cite), Outlook
  const QUOTE = ['blockquote', '.gmail_quote', '[type="cite"]', '#divRplyFwdMsg', '.quoted-original'].join(",");

  let box = null;        // the compose box being watched: a textarea or a contenteditable editing host
  let lastBox = null;    // the compose box last written in, for "sent" (focus has left it by the Send click)
  let current = null;    // the suggestion shown: {id, base, text, taken}
  let timer = 0;
  let asked = 0;         // increments per request; an answer to an older one is dropped
  let overlay = null;    // {host, frame, mirror, typed, ghost}
  let stopped = false;
  let inserting = false; // our own execCommand is running: its input event is the writer's Tab
  let personEdit = false; // a trusted beforeinput came first: the next input is the person's editing

  const norm = (s) => s.replace(/\u00a0/g, " ");

  // --------------------------------------------------------------------------- the compose box and caret

  function composeBoxOf(el) {
    if (!el || !(el instanceof Element)) return null;
    if (el instanceof HTMLTextAreaElement) return el.readOnly || el.disabled ? null : el;
    if (!el.isContentEditable) return null;  // inputs (password fields included) are never compose boxes
    let host = el;
    while (host.parentElement && host.parentElement.isContentEditable) host = host.parentElement;
    return host;
  }

  /** The text of an editable's subtree as the writer reads it, and where the caret falls in it. */
  function editableText(root, caretNode, caretOffset) {
    let out = "";
    let caret = -1;
    let pendingBreak = false;
    const flush = () => {
      if (pendingBreak && out && !out.endsWith("\n")) out += "\n";
      pendingBreak = false;
    };
    const mark = () => { if (caret < 0) { flush(); caret = out.length; } };
    const walk = (node) => {
      if (node.nodeType === Node.TEXT_NODE) {
        const data = norm(node.data);
        if (node === caretNode) {
          if (caretOffset > 0) { flush(); out += data.slice(0, caretOffset); }
          mark();
          if (caretOffset < data.length) out += data.slice(caretOffset);
        } else if (data) {
          flush();
          out += data;
        }
        return;
      }
      if (node.nodeType !== Node.ELEMENT_NODE || SKIP.has(node.nodeName)) return;
      if (node.nodeName === "BR") {
        // a <br> that ends a block after some text draws no line of its own (<div>a<br></div> is one
        // line); any other <br>, the one holding an empty line open included, is a line break
        const lineHasText = !pendingBreak && out !== "" && !out.endsWith("\n");
        if (lineHasText && node.nextSibling === null && BLOCKS.has(node.parentNode.nodeName)) {
          pendingBreak = true;
        } else {
          flush();
          out += "\n";
        }
        return;
      }
      const block = BLOCKS.has(node.nodeName) && node !== root;
      if (block) pendingBreak = true;
      const kids = node.childNodes;
      for (let i = 0; i < kids.length; i++) {
        if (node === caretNode && i === caretOffset) mark();
        walk(kids[i]);
      }
      if (node === caretNode && caretOffset >= kids.length) mark();
      if (block) pendingBreak = true;
    };
    walk(root);
    return { text: out, caret };
  }

  /** {prefix, ok}: the text before the caret, and whether a suggestion may be shown there (one caret,
   *  no selection, nothing but spaces after it on its line). */
  function caretState(el) {
    if (el instanceof HTMLTextAreaElement) {
      const { selectionStart: a, selectionEnd: b, value } = el;
      if (a !== b) return { ok: false, prefix: "" };
      const rest = value.slice(a);
      const line = rest.split("\n", 1)[0];
      return { ok: line.trim() === "", prefix: value.slice(0, a) };
    }
    const sel = el.ownerDocument.getSelection();
    if (!sel || sel.rangeCount !== 1 || !sel.isCollapsed || !el.contains(sel.anchorNode)) {
      return { ok: false, prefix: "" };
    }
    const { text, caret } = editableText(el, sel.anchorNode, sel.anchorOffset);
    if (caret < 0) return { ok: false, prefix: "" };
    const line = text.slice(caret).split("\n", 1)[0];
    return { ok: line.trim() === "", prefix: text.slice(0, caret) };
  }

  function subjectFor(el) {
    for (let node = el.parentElement; node; node = node.parentElement) {
      const field = node.querySelector(SUBJECT);
      if (field && field.type !== "password" && field.type !== "hidden") return field.value;
    }
    return "";
  }

  /** The quoted original of a reply: inside the compose box (Gmail, Roundcube), else next to it. */
  function contextFor(el) {
    if (el instanceof HTMLTextAreaElement) {
      const quoted = el.value.split("\n").filter((l) => /^>/.test(l)).map((l) => l.replace(/^>+ ?/, ""));
      if (quoted.length) return quoted.join("\n").slice(0, CONTEXT_MAX);
    }
    for (let node = el; node; node = node.parentElement) {
      const quote = node.querySelector(QUOTE);
      if (quote) {
        // Outlook's block is the original's header; the original follows it as siblings
        const parts = [quote];
        if (quote.id === "divRplyFwdMsg") {
          for (let next = quote.nextElementSibling; next; next = next.nextElementSibling) parts.push(next);
        }
        return parts.map((p) => p.innerText || p.textContent || "").join("\n").trim().slice(0, CONTEXT_MAX);
      }
      if (node.matches("form, [role=dialog], main")) break;  // not another message's quote on the page
    }
    return "";
  }

  // --------------------------------------------------------------------------- the overlay

  const STYLE = `
    :host { all: initial !important; position: fixed !important; left: 0 !important; top: 0 !important;
            width: 0 !important; height: 0 !important; overflow: visible !important;
            pointer-events: none !important; z-index: 2147483647 !important; }
    .frame { position: fixed; overflow: hidden; pointer-events: none; margin: 0; border: 0; }
    .mirror { position: absolute; left: 0; top: 0; margin: 0; border: 0; white-space: pre-wrap;
              overflow-wrap: break-word; word-wrap: break-word; pointer-events: none; background: transparent; }
    .typed { color: transparent; }
    .ghost { color: #8a8f98; }
    .hidden { display: none; }`;

  function ensureOverlay() {
    if (overlay && overlay.host.isConnected) return overlay;
    const host = document.createElement("seqlab-ghost");
    const root = host.attachShadow({ mode: "closed" });
    // A constructed stylesheet: webmail pages forbid inline <style> by their Content-Security-Policy, which
    // does not govern stylesheets built through the CSSOM (the <style> is for browsers without them).
    let style = null;
    try {
      const sheet = new CSSStyleSheet();
      sheet.replaceSync(STYLE);
      root.adoptedStyleSheets = [sheet];
    } catch {
      style = document.createElement("style");
      style.textContent = STYLE;
    }
    const frame = document.createElement("div");
    frame.className = "frame hidden";
    const mirror = document.createElement("div");
    mirror.className = "mirror";
    const typed = document.createElement("span");
    typed.className = "typed";
    const ghost = document.createElement("span");
    ghost.className = "ghost";
    mirror.append(typed, ghost);
    frame.append(mirror);
    root.append(...(style ? [style] : []), frame);
    document.documentElement.append(host);
    overlay = { host, frame, mirror, typed, ghost };
    return overlay;
  }

  const COPIED = ["fontFamily", "fontSize", "fontWeight", "fontStyle", "fontVariant", "fontStretch",
    "lineHeight", "letterSpacing", "wordSpacing", "textTransform", "tabSize", "direction", "textAlign"];

  function copyFont(from, to) {
    const cs = getComputedStyle(from);
    for (const k of COPIED) to.style[k] = cs[k];
    return cs;
  }

  const px = (v) => parseFloat(v) || 0;

  /** A textarea: the mirror lies over its content box, holding its text up to the caret (invisible) and
   *  the ghost after it, so the ghost starts where the caret is and wraps where the textarea wraps. */
  function placeOverTextarea(o, el, ghostText) {
    const cs = copyFont(el, o.mirror);
    const r = el.getBoundingClientRect();
    const left = r.left + px(cs.borderLeftWidth);
    const top = r.top + px(cs.borderTopWidth);
    Object.assign(o.frame.style, { left: `${left}px`, top: `${top}px`, width: `${el.clientWidth}px`,
      height: `${el.clientHeight}px` });
    Object.assign(o.mirror.style, {
      padding: `${cs.paddingTop} ${cs.paddingRight} ${cs.paddingBottom} ${cs.paddingLeft}`,
      width: `${el.clientWidth}px`, boxSizing: "border-box", textIndent: cs.textIndent,
      top: `${-el.scrollTop}px`, left: `${-el.scrollLeft}px`,
    });
    o.typed.textContent = el.value.slice(0, el.selectionStart);
    o.ghost.textContent = ghostText;
  }

  function caretRect(el) {
    const sel = document.getSelection();
    if (!sel || !sel.rangeCount) return null;
    const range = sel.getRangeAt(0).cloneRange();
    range.collapse(true);
    const rects = range.getClientRects();
    if (rects.length) return { x: rects[rects.length - 1].left, top: rects[rects.length - 1].top,
      height: rects[rects.length - 1].height };
    const { startContainer: node, startOffset: offset } = range;
    if (node.nodeType === Node.TEXT_NODE && offset > 0) {  // measure the character before the caret
      const before = document.createRange();
      before.setStart(node, offset - 1);
      before.setEnd(node, offset);
      const r = before.getBoundingClientRect();
      return { x: r.right, top: r.top, height: r.height };
    }
    const target = node.nodeType === Node.ELEMENT_NODE ? (node.childNodes[offset] || node) : node.parentElement;
    const elem = target.nodeType === Node.ELEMENT_NODE ? target : target.parentElement;
    if (!elem) return null;
    const r = elem.getBoundingClientRect();
    const cs = getComputedStyle(elem);
    return { x: r.left + px(cs.paddingLeft) + px(cs.borderLeftWidth), top: r.top + px(cs.paddingTop), height: 0 };
  }

  /** A contenteditable: one box as wide as the editor's content, its first line indented to the caret,
   *  in the font at the caret; a second line of ghost starts at the editor's left edge. */
  function placeInEditable(o, el, ghostText) {
    const at = caretRect(el);
    if (!at) return false;
    const sel = document.getSelection();
    const node = sel.anchorNode;
    const fontOf = node.nodeType === Node.ELEMENT_NODE ? node : node.parentElement;
    const cs = copyFont(el.contains(fontOf) ? fontOf : el, o.mirror);
    const ecs = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    const left = r.left + px(ecs.borderLeftWidth) + px(ecs.paddingLeft);
    const width = Math.max(0, r.width - px(ecs.borderLeftWidth) - px(ecs.borderRightWidth) -
      px(ecs.paddingLeft) - px(ecs.paddingRight));
    if (at.top < Math.max(0, r.top) || at.top > Math.min(innerHeight, r.bottom)) return false;  // scrolled away
    const lineHeight = cs.lineHeight === "normal" ? null : px(cs.lineHeight);
    // the caret's rect is the text's box; a taller line box centres it
    const top = lineHeight && at.height ? at.top - (lineHeight - at.height) / 2 : at.top;
    Object.assign(o.frame.style, { left: `${left}px`, top: `${top}px`, width: `${width}px`,
      height: `${Math.max(0, r.bottom - top)}px` });
    Object.assign(o.mirror.style, { padding: "0", width: `${width}px`, boxSizing: "border-box",
      textIndent: `${Math.max(0, at.x - left)}px`, top: "0", left: "0" });
    o.typed.textContent = "";
    o.ghost.textContent = ghostText;
    return true;
  }

  let visible = false;  // whether the ghost is on screen: keys take only a ghost the writer can see

  function render() {
    const text = current ? current.text.slice(current.taken) : "";
    visible = false;
    if (!text || !box) {
      if (overlay) {
        overlay.frame.classList.add("hidden");
        overlay.ghost.textContent = "";
        overlay.typed.textContent = "";
      }
      return;
    }
    const o = ensureOverlay();
    const placed = box instanceof HTMLTextAreaElement ? (placeOverTextarea(o, box, text), true)
      : placeInEditable(o, box, text);
    o.frame.classList.toggle("hidden", !placed);
    visible = placed;
  }

  // --------------------------------------------------------------------------- asking and telling

  async function ask(msg) {
    try {
      return await api.runtime.sendMessage(msg);
    } catch {
      return null;  // the extension was reloaded or removed: this copy of the script is an orphan
    }
  }

  function sendEvent(s, kind) {
    ask({ type: "event", id: s.id, kind, accepted_chars: s.taken });
  }

  function finish(kind) {
    const done = current;
    current = null;
    render();
    if (done) sendEvent(done, kind);
  }

  function cancelPending() {
    clearTimeout(timer);
    timer = 0;
    asked++;
  }

  function dismiss() {
    cancelPending();
    finish("dismissed");
  }

  function schedule() {
    cancelPending();
    timer = setTimeout(request, DEBOUNCE_MS);
  }

  async function request() {
    timer = 0;
    const el = box;
    if (!el || document.activeElement !== el && !el.contains(document.activeElement)) return;
    const state = caretState(el);
    if (!state.ok || !state.prefix.trim()) return;
    const mine = ++asked;
    const reply = await ask({ type: "complete", prefix: state.prefix, subject: subjectFor(el),
      context: contextFor(el) });
    if (!reply) return;
    if (reply.enabled === false) { stop(); return; }  // the site was switched off meanwhile
    if (mine !== asked || el !== box || reply.error || !reply.text) return;
    const now = caretState(el);  // the writer kept going while the model thought: a stale answer
    if (!now.ok || now.prefix !== state.prefix) return;
    if (current) finish("dismissed");
    current = { id: reply.id, base: state.prefix, text: norm(reply.text), taken: 0 };
    render();
    sendEvent(current, "shown");
  }

  // --------------------------------------------------------------------------- typing and keys

  // The browser fires a trusted beforeinput before the person's typing, pasting, dropping, Enter and undo,
  // but none before document.execCommand, whose input event is trusted all the same: so an input counts
  // as the person's only after a trusted beforeinput (or from our own insertion).
  function onBeforeInput(e) {
    personEdit = e.isTrusted && Boolean(box) && (e.target === box || box.contains(e.target));
  }

  function onInput(e) {
    if (!box || !(e.target === box || box.contains(e.target))) return;
    const byPerson = (e.isTrusted && personEdit) || inserting;
    personEdit = false;
    if (!byPerson) { if (current) dismiss(); return; }  // a page script changed the text: ask nothing
    if (current) {
      const state = caretState(box);
      const typed = state.prefix.startsWith(current.base) ? state.prefix.slice(current.base.length) : null;
      if (typed !== null && state.ok && current.text.startsWith(typed)) {
        current.taken = typed.length;
        if (typed.length < current.text.length) {
          cancelPending();
          render();
          return;
        }
        finish("accepted");
      } else {
        finish("dismissed");
      }
    }
    schedule();
  }

  /** Setting the caret where it is ends the browser's current typing step, so that the insertion below
   *  is an undo step of its own: Ctrl+Z then takes back the suggestion, not the writer's last word too. */
  function endTypingStep() {
    if (box instanceof HTMLTextAreaElement) {
      const { selectionStart: a, selectionEnd: b, selectionDirection: d } = box;
      box.setSelectionRange(a, b, d);
      return;
    }
    const sel = document.getSelection();
    if (!sel || !sel.rangeCount) return;
    const range = sel.getRangeAt(0);
    sel.removeAllRanges();
    sel.addRange(range);
  }

  function insertAtCaret(text) {
    // execCommand keeps the insertion in the site's undo history and fires "input" like typing does
    endTypingStep();
    inserting = true;
    try {
      if (!document.execCommand("insertText", false, text) && box instanceof HTMLTextAreaElement) {
        box.setRangeText(text, box.selectionStart, box.selectionEnd, "end");
        box.dispatchEvent(new InputEvent("input", { bubbles: true, inputType: "insertText", data: text }));
      }
    } finally {
      inserting = false;
    }
  }

  const nextWord = (text) => (text.match(/^\s*\S+/) || [text])[0];

  function onKeyDown(e) {
    if (!e.isTrusted || e.isComposing || !box || !(e.target === box || box.contains(e.target))) return;
    const ghost = current && visible ? current.text.slice(current.taken) : "";
    const plain = !e.ctrlKey && !e.altKey && !e.metaKey && !e.shiftKey;
    if (e.key === "Escape") {
      if (ghost) { e.preventDefault(); e.stopImmediatePropagation(); }
      dismiss();
    } else if (!ghost) {
      // nothing shown: the key keeps the site's meaning, Tab included
    } else if (e.key === "Tab" && plain) {
      e.preventDefault();
      e.stopImmediatePropagation();
      insertAtCaret(ghost);
    } else if (e.key === "ArrowRight" && e.ctrlKey && !e.altKey && !e.metaKey && !e.shiftKey) {
      e.preventDefault();
      e.stopImmediatePropagation();
      insertAtCaret(nextWord(ghost));
    }
  }

  function onFocusIn(e) {
    const found = composeBoxOf(e.target);
    if (found === box) return;
    if (current) dismiss();
    box = found;
    if (found) lastBox = found;
  }

  // --------------------------------------------------------------------------- "sent"

  // A server started with --learn learns the person's writing from the mail they send. The page shows when
  // that happens only through its own Send control: a trusted click on a button named Send, or Ctrl/Cmd+Enter
  // in the box (Gmail's, Outlook's and Roundcube's shortcut), with the box's text, subject and quoted original.
  const SEND_NAME = /^\s*send\b/i;

  function isSendControl(el) {
    const control = el instanceof Element
      ? el.closest('button, [role="button"], input[type="submit"], input[type="button"]') : null;
    if (!control) return false;
    const name = control.getAttribute("aria-label") || control.getAttribute("data-tooltip") ||
      control.getAttribute("title") || control.value || control.textContent || "";
    return SEND_NAME.test(name);
  }

  function sameMessage(control, el) {
    // the Send control belongs to the compose box when they share the nearest form, dialog or main region
    const scope = (node) => node.closest('form, [role="dialog"], main') || node.ownerDocument.body;
    return scope(control) === scope(el);
  }

  function reportSent(el) {
    if (!el || !el.isConnected) return;
    const body = el instanceof HTMLTextAreaElement ? el.value : editableText(el, null, 0).text;
    if (!body.trim()) return;
    ask({ type: "sent", subject: subjectFor(el), body, context: contextFor(el) });
  }

  function onClick(e) {
    if (!e.isTrusted || !lastBox || !isSendControl(e.target)) return;
    if (sameMessage(e.target, lastBox)) reportSent(lastBox);
  }

  function onSendKey(e) {
    if (!e.isTrusted || !box || e.key !== "Enter" || !(e.ctrlKey || e.metaKey)) return;
    if (e.target === box || box.contains(e.target)) reportSent(box);
  }

  function onFocusOut(e) {
    if (!box || !(e.target === box || box.contains(e.target))) return;
    // focus moving within the editor (a nested editable) is not leaving it
    if (e.relatedTarget && box.contains(e.relatedTarget)) return;
    dismiss();
    box = null;
  }

  function onSelectionChange() {
    if (!current || !box) return;
    const state = caretState(box);
    const typed = state.prefix.startsWith(current.base) ? state.prefix.slice(current.base.length) : null;
    if (!state.ok || typed === null || !current.text.startsWith(typed)) dismiss();
  }

  function reposition() {
    if (current) render();
  }

  const listeners = [
    [window, "focusin", onFocusIn], [window, "focusout", onFocusOut], [window, "keydown", onKeyDown],
    [window, "click", onClick], [window, "keydown", onSendKey],
    [window, "beforeinput", onBeforeInput], [window, "input", onInput],
    [document, "selectionchange", onSelectionChange],
    [window, "scroll", reposition], [window, "resize", reposition],
  ];

  function start() {
    for (const [target, type, fn] of listeners) target.addEventListener(type, fn, true);
    onFocusIn({ target: document.activeElement });
  }

  function stop() {
    if (stopped) return;
    stopped = true;
    for (const [target, type, fn] of listeners) target.removeEventListener(type, fn, true);
    cancelPending();
    current = null;
    box = null;
    lastBox = null;
    if (overlay) overlay.host.remove();
    overlay = null;
  }

  // Dormant until the worker confirms that this page's origin is switched on.
  ask({ type: "hello" }).then((reply) => { if (reply && reply.enabled) start(); });
})();
