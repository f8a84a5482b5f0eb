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
 * at once on each edit, with the caret at the end of its line; Tab takes it all, Ctrl+Right one word, Esc
 * dismisses it, and typing its own letters shrinks it without asking again. When nothing is shown, every
 * key keeps the site's meaning (Tab included). The same pacing too: one request in flight per box (an
 * edit made meanwhile waits for its answer, which is never drawn, and then asks for the newest text), at
 * most one start per MIN_GAP_MS, and a request nothing can use any more is cancelled (the worker aborts
 * its fetch). Events say how many characters were inserted (Tab, Ctrl+Right) and how many the person
 * typed through, as the page's do. The older pacing (wait a debounce after the last key, then ask) comes
 * back with a number in this world's `__seqlabDebounceMs`, which only DevTools can set (the latency
 * benchmark's side-by-side, seqlab/bench/latency_browser.py); `__seqlabTimes` gives it when each
 * suggestion was drawn. The pacing, the typing through, the keys and the events' counts are ghost_core.js's
 * (registered before this file, in this same isolated world), shared with the compose page.
 *
 * A switched-on site sees what the person accepts into its box, never what is suggested:
 * - The ghost is pixels, not text: drawn on a <canvas> in the closed shadow root of a plain <div>. A
 *   built-in element runs none of the page's code when it is made (a custom element's constructor would,
 *   and could keep the "closed" root through attachInternals), and a canvas puts no text in the DOM for
 *   window.find(), the selection or the accessibility tree to reach. The overlay lies outside the compose
 *   box with pointer-events:none. Accepting inserts the text with document.execCommand("insertText"), so
 *   the site sees ordinary typing and Ctrl+Z takes it back.
 * - The prompt is what the person can see: text the page hides in the box (display:none, visibility,
 *   opacity or colour transparent, aria-hidden, a tiny font, clipped, or placed outside the box) is left
 *   out, and nothing is asked while the box holds anything but what the person's last edit left there.
 * - An email counts as sent only from a box the person typed into, unchanged by the page since, on a
 *   trusted click on a drawn Send control that the click really hit (or Ctrl/Cmd+Enter in the box).
 */
(() => {
  "use strict";

  const LOADED = "__seqlabComposeLoaded";  // the isolated world's global: the page cannot see or set it
  if (globalThis[LOADED]) return;
  globalThis[LOADED] = true;

  const api = globalThis.browser ?? globalThis.chrome;
  const core = globalThis.seqlabGhostCore;  // ghost_core.js: this world's own global, set just before
  // > 0: the older pacing (top of this file); a number only: a page's element named so is no setting
  const debounceMs = () => (typeof globalThis.__seqlabDebounceMs === "number" ? globalThis.__seqlabDebounceMs : 0);
  const CONTEXT_MAX = 16_000;
  const GHOST_COLOR = "#8a8f98";
  const BLOCKS = new Set(["ADDRESS", "ARTICLE", "ASIDE", "BLOCKQUOTE", "DD", "DIV", "DL", "DT", "FIGURE",
    "FOOTER", "FORM", "H1", "H2", "H3", "H4", "H5", "H6", "HEADER", "HR", "LI", "MAIN", "NAV", "OL", "P",
    "PRE", "SECTION", "TABLE", "TD", "TH", "TR", "UL"]);
  const SKIP = new Set(["SCRIPT", "STYLE", "TEMPLATE", "NOSCRIPT"]);
  const SUBJECT = ['input[name="subject" i]', 'input[name="subjectbox" i]', 'input[name="_subject" i]',
    'input[id*="subject" i]', 'input[aria-label*="subject" i]', 'input[placeholder*="subject" i]'].join(",");
  // where webmail keeps the message being answered: Gmail, Roundcube/Thunderbird (cite), Outlook
  const QUOTE = ['blockquote', '.gmail_quote', '[type="cite"]', '#divRplyFwdMsg', '.quoted-original'].join(",");

  let box = null;        // the compose box being watched: a textarea or a contenteditable editing host
  let left = null;       // {box, text, caret, verified}: the box's visible text as the person's last edit left
                         // it, and whether that edit did just what it should
  const typedIn = new WeakMap();  // compose box -> how many characters the person has written into it
  let current = null;    // the suggestion shown (ghost_core.js's suggestion())
  let asked = 0;         // increments per request and per cancelling; an answer to an older one is dropped
  const drawnAt = [];    // performance.now() of each new suggestion drawn (for the latency benchmark)
  let overlay = null;    // {host, frame, canvas, ctx, mirror}
  let stopped = false;
  let inserting = false; // our own execCommand is running: its input event is the writer's Tab
  let personEdit = false; // a trusted beforeinput came first: the next input is the person's editing

  const norm = (s) => s.replace(/\u00a0/g, " ");
  const px = (v) => parseFloat(v) || 0;

  // --------------------------------------------------------------------------- what the person can see

  const FAINT = 0.1;  // an opacity or colour alpha below this draws nothing a person reads
  const TINY_PX = 4;  // nor does text less than 4 px tall
  const SLACK_PX = 2; // rounding between a text's rectangles and its container's

  /** The alpha of a computed colour: rgb()/rgba() as Chromium computes them, or any "... / a)" form. */
  function alphaOf(color) {
    if (!color || color === "transparent") return 0;
    let m = /^rgba\([^,]+,[^,]+,[^,]+,\s*([\d.]+)\s*\)$/.exec(color);
    if (m) return parseFloat(m[1]);
    m = /\/\s*([\d.]+)(%?)\s*\)$/.exec(color);
    if (m) return parseFloat(m[1]) * (m[2] ? 0.01 : 1);
    return 1;
  }

  const inside = (r, c) => r.left >= c.left - SLACK_PX && r.right <= c.right + SLACK_PX &&
    r.top >= c.top - SLACK_PX && r.bottom <= c.bottom + SLACK_PX;
  const meets = (r, c) => r.right > c.left && r.left < c.right && r.bottom > c.top && r.top < c.bottom;
  const clipTo = (a, b) => ({ left: Math.max(a.left, b.left), top: Math.max(a.top, b.top),
    right: Math.min(a.right, b.right), bottom: Math.min(a.bottom, b.bottom) });

  /** What a person can see of the text inside `root`, for one reading (styles and places are cached).
   *  Inside `root`, an element hides its text when it is display:none, aria-hidden, content-visibility:
   *  hidden, clipped (clip, clip-path, or an overflow box under 2 px), or so transparent (its opacity times
   *  its ancestors') that nothing shows; a text is hidden by visibility, a transparent colour or a font
   *  under 4 px, and any part of it that lies outside the box (or outside an ancestor that clips it) is
   *  left out. Text placed with position or transform counts only where the box shows it now; the rest
   *  of the box's text counts wherever its scrolling can bring it. */
  function seer(root) {
    const r = root.getBoundingClientRect();
    const shownNow = { left: r.left, top: r.top, right: r.right, bottom: r.bottom };
    const rs = getComputedStyle(root);
    const scrolls = rs.overflowY !== "visible" && root.scrollHeight > root.clientHeight + 1;
    // the person can scroll the box to any of its lines, but not sideways to text pushed out of it
    const reach = scrolls ? { ...shownNow, top: r.top - root.scrollTop,
      bottom: r.top - root.scrollTop + Math.max(r.height, root.scrollHeight) } : shownNow;
    const info = new Map([[root, { hidden: false, opacity: 1, clip: reach }]]);
    const of = (el) => {
      let got = info.get(el);
      if (got) return got;
      const up = el.parentElement && root.contains(el.parentElement) ? of(el.parentElement)
        : { hidden: false, opacity: 1, clip: reach };
      got = { hidden: true, opacity: 0, clip: up.clip };
      info.set(el, got);
      if (up.hidden) return got;
      const cs = getComputedStyle(el);
      const opacity = up.opacity * px(cs.opacity);
      if (cs.display === "none" || el.getAttribute("aria-hidden") === "true" || opacity < FAINT ||
          cs.contentVisibility === "hidden" || cs.clipPath !== "none" ||
          ((cs.position === "absolute" || cs.position === "fixed") && cs.clip !== "auto")) return got;
      let clip = up.clip;
      if (cs.position === "absolute" || cs.position === "fixed" || cs.transform !== "none") {
        clip = clipTo(clip, shownNow);
      }
      if (cs.overflowX !== "visible" || cs.overflowY !== "visible") {
        const rect = el.getBoundingClientRect();
        if (rect.width < 2 || rect.height < 2) return got;
        clip = clipTo(clip, rect);
      }
      Object.assign(got, { hidden: false, opacity, clip, style: cs });
      return got;
    };
    const range = document.createRange();
    return {
      /** whether an element inside root hides all it holds */
      hides: (el) => of(el).hidden,
      /** a text node's visible characters: null for all of them, "" for none, else one boolean each */
      keep(node) {
        if (!node.data.trim()) return null;  // white space carries nothing to hide
        const el = node.parentElement;
        const { hidden, opacity, clip, style } = of(el);
        if (hidden) return "";
        const cs = style || getComputedStyle(el);
        if (cs.visibility !== "visible" || px(cs.fontSize) < TINY_PX ||
            alphaOf(cs.color) * opacity < FAINT || alphaOf(cs.webkitTextFillColor) < FAINT) return "";
        range.selectNodeContents(node);
        const rects = Array.from(range.getClientRects()).filter((b) => b.width > 0 || b.height > 0);
        const readable = (b) => b.height >= TINY_PX;
        if (rects.length && rects.every((b) => readable(b) && inside(b, clip))) return null;
        if (!rects.some((b) => readable(b) && meets(b, clip))) return "";
        const mask = [];  // in part: character by character
        for (let i = 0; i < node.data.length; i++) {
          range.setStart(node, i);
          range.setEnd(node, i + 1);
          const b = range.getBoundingClientRect();
          const x = (b.left + b.right) / 2;
          const y = (b.top + b.bottom) / 2;
          mask.push(/\s/.test(node.data[i]) ||
            (readable(b) && x >= clip.left && x <= clip.right && y >= clip.top && y <= clip.bottom));
        }
        return mask;
      },
    };
  }

  /** Whether an element is drawn at all: not hidden, not transparent (its opacity and its ancestors'). */
  function drawn(el) {
    if (!el.isConnected || !el.checkVisibility({ opacityProperty: true, visibilityProperty: true })) return false;
    let opacity = 1;
    for (let node = el; node; node = node.parentElement) opacity *= px(getComputedStyle(node).opacity);
    return opacity >= FAINT;
  }

  /** Whether an element is drawn, at least `w` x `h` pixels, and at least partly in the window. */
  function onScreen(el, w, h) {
    if (!drawn(el)) return false;
    const r = el.getBoundingClientRect();
    return r.width >= w && r.height >= h && meets(r, { left: 0, top: 0, right: innerWidth, bottom: innerHeight });
  }

  // --------------------------------------------------------------------------- the compose box and caret

  function composeBoxOf(el) {
    if (!el || !(el instanceof Element)) return null;
    if (el instanceof HTMLTextAreaElement) return el.readOnly || el.disabled ? null : el;
    if (!el.isContentEditable) return null;  // inputs (password fields included) are never compose boxes
    let host = el;
    while (host.parentElement && host.parentElement.isContentEditable) host = host.parentElement;
    return host;
  }

  /** The visible text of an element's subtree as the writer reads it, and where the caret falls in it
   *  (-1 when it is not there, or in text the person cannot see). */
  function editableText(root, caretNode, caretOffset) {
    const see = seer(root);
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
        const keep = see.keep(node);
        const part = (from, to) => norm(keep === null ? node.data.slice(from, to) : keep === "" ? ""
          : node.data.slice(from, to).split("").filter((_, i) => keep[from + i]).join(""));
        if (node === caretNode) {
          const before = part(0, caretOffset);
          if (before) { flush(); out += before; }
          if (keep !== "") mark();
          out += part(caretOffset);
        } else {
          const data = part(0);
          if (data) { flush(); out += data; }
        }
        return;
      }
      if (node.nodeType !== Node.ELEMENT_NODE || SKIP.has(node.nodeName)) return;
      if (node !== root && see.hides(node)) return;
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

  /** {text, caret}: what the person sees in the box, and where the caret is in it (-1: no single caret). */
  function snapshot(el) {
    if (el instanceof HTMLTextAreaElement) {
      const { selectionStart: a, selectionEnd: b, value } = el;
      return { text: value, caret: a === b ? a : -1 };
    }
    const sel = el.ownerDocument.getSelection();
    const one = sel && sel.rangeCount === 1 && sel.isCollapsed && el.contains(sel.anchorNode);
    const { text, caret } = editableText(el, one ? sel.anchorNode : null, one ? sel.anchorOffset : 0);
    return { text, caret: one ? caret : -1 };
  }

  /** {prefix, ok}: the text before the caret, and whether a suggestion may be shown there (one caret,
   *  no selection, nothing but spaces after it on its line). */
  function caretState(el, snap = snapshot(el)) {
    if (snap.caret < 0) return { ok: false, prefix: "" };
    const line = snap.text.slice(snap.caret).split("\n", 1)[0];
    return { ok: line.trim() === "", prefix: snap.text.slice(0, snap.caret) };
  }

  function subjectFor(el) {
    for (let node = el.parentElement; node; node = node.parentElement) {
      const field = node.querySelector(SUBJECT);
      if (field && field.type !== "password" && field.type !== "hidden") return drawn(field) ? field.value : "";
    }
    return "";
  }

  /** The quoted original of a reply, as far as it is shown: inside the compose box (Gmail, Roundcube),
   *  else next to it. */
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
        return parts.filter(drawn).map((p) => editableText(p, null, 0).text).join("\n").trim()
          .slice(0, CONTEXT_MAX);
      }
      if (node.matches("form, [role=dialog], main")) break;  // not another message's quote on the page
    }
    return "";
  }

  // --------------------------------------------------------------------------- the overlay

  const STYLE = `
    :host { all: initial !important; display: block !important; position: fixed !important;
            left: 0 !important; top: 0 !important; width: 0 !important; height: 0 !important;
            overflow: visible !important; pointer-events: none !important; z-index: 2147483647 !important; }
    .frame { position: fixed; overflow: hidden; pointer-events: none; margin: 0; border: 0; padding: 0; }
    canvas { position: absolute; left: 0; top: 0; pointer-events: none; }
    .mirror { position: fixed; left: 0; top: 0; margin: 0; border: 0; white-space: pre-wrap;
              overflow-wrap: break-word; word-wrap: break-word; visibility: hidden; pointer-events: none; }
    .hidden { display: none; }`;

  function ensureOverlay() {
    if (overlay && overlay.host.isConnected) return overlay;
    // a built-in element: making it runs no constructor of the page's, so the closed root stays ours
    const host = document.createElement("div");
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
    const canvas = document.createElement("canvas");
    frame.append(canvas);
    const mirror = document.createElement("div");  // measures where the caret is; empty between renders
    mirror.className = "mirror";
    root.append(...(style ? [style] : []), frame, mirror);
    document.documentElement.append(host);
    overlay = { host, frame, canvas, ctx: canvas.getContext("2d"), mirror, lines: [] };
    return overlay;
  }

  const COPIED = ["fontFamily", "fontSize", "fontWeight", "fontStyle", "fontVariant", "fontStretch",
    "lineHeight", "letterSpacing", "wordSpacing", "textTransform", "tabSize", "direction", "textAlign"];

  function copyFont(cs, to) {
    for (const k of COPIED) to.style[k] = cs[k];
  }

  /** The caret's line in the mirror set up for `cs`'s font: {x, top, height} of a zero-width mark at the
   *  end of `before`, and the line height (the distance to the same mark one line below). The mirror holds
   *  text only during this call: what it measures with is the page's own text, never the suggestion. */
  function measureLine(o, cs, before, place) {
    const m = o.mirror;
    copyFont(cs, m);
    Object.assign(m.style, place);
    const at = document.createElement("span");
    const below = document.createElement("span");
    at.textContent = below.textContent = "\u200b";
    m.replaceChildren(before, at, "\n", below);
    const a = at.getBoundingClientRect();
    const b = below.getBoundingClientRect();
    m.replaceChildren();
    return { x: a.left, top: a.top, height: a.height, lineHeight: b.top - a.top };
  }

  /** The ghost's lines as the box would wrap them: the first from the caret, the rest from the line's start,
   *  breaking after spaces (which may hang past the edge) and inside a word wider than the line. */
  function wrapLines(ctx, text, firstX, lineLeft, lineRight) {
    const lines = [];
    let x = firstX;
    let line = { x: firstX, text: "" };
    const width = (s) => ctx.measureText(s).width;
    const newLine = () => { lines.push(line); x = lineLeft; line = { x: lineLeft, text: "" }; };
    text.split("\n").forEach((para, p) => {
      if (p) newLine();
      for (const token of para.match(/\S+\s*|\s+/g) || []) {
        const w = width(token.trimEnd());
        const atStart = line.text === "" && x <= lineLeft + 0.5;
        if (!atStart && x + w > lineRight + 0.5) newLine();
        if (w > lineRight - lineLeft && line.text === "") {  // a word wider than the line: broken anywhere
          for (const ch of token) {
            const cw = width(ch);
            if (line.text && !/\s/.test(ch) && x + cw > lineRight + 0.5) newLine();
            line.text += ch;
            x += cw;
          }
          continue;
        }
        line.text += token;
        x += width(token);
      }
    });
    lines.push(line);
    return lines;
  }

  const TRANSFORMS = { uppercase: (s) => s.toUpperCase(), lowercase: (s) => s.toLowerCase(),
    capitalize: (s) => s.replace(/(^|\s)(\S)/g, (_, a, b) => a + b.toUpperCase()) };

  /** Draw `text` on the canvas: `at` is the caret line ({x, top, height, lineHeight}, viewport pixels),
   *  `edges` the left and right of the box's lines, `clip` what of the box is shown; in `cs`'s font. */
  function paint(o, cs, text, at, edges, clip) {
    const { ctx, canvas, frame } = o;
    const font = `${cs.fontStyle} ${cs.fontVariantCaps === "small-caps" ? "small-caps " : ""}${cs.fontWeight} ` +
      `${cs.fontSize} ${cs.fontFamily}`;
    const setFont = () => {
      ctx.font = font;
      if ("letterSpacing" in ctx) ctx.letterSpacing = cs.letterSpacing === "normal" ? "0px" : cs.letterSpacing;
      if ("wordSpacing" in ctx) ctx.wordSpacing = cs.wordSpacing === "normal" ? "0px" : cs.wordSpacing;
    };
    setFont();
    const shown = (TRANSFORMS[cs.textTransform] || ((s) => s))(text);
    const lines = wrapLines(ctx, shown, at.x, edges.left, edges.right);
    const lineHeight = at.lineHeight > 0 ? at.lineHeight : at.height || px(cs.fontSize) * 1.2;
    const view = { left: 0, top: 0, right: innerWidth, bottom: innerHeight };
    const band = { left: Math.min(edges.left, at.x), right: Math.max(edges.right, at.x), top: at.top - 2,
      bottom: at.top + (lines.length - 1) * lineHeight + Math.max(lineHeight, at.height) + 2 };
    const r = clipTo(clipTo(band, clip), view);
    if (r.right - r.left < 1 || r.bottom - r.top < 1 || at.top + at.height <= r.top) return false;
    // the caret's mark spans the font's ascent and descent; the baseline lies the ascent below its top
    const m = ctx.measureText("");
    const ascent = m.fontBoundingBoxAscent;
    const content = ascent + m.fontBoundingBoxDescent;
    const baseline = at.top + (at.height > 0 ? (at.height - content) / 2 : (lineHeight - content) / 2) + ascent;
    // shown only if some line with letters is at least half inside the box: a ghost whose words wrap below a
    // textarea's last visible line (a space left on the caret's line) would be taken by keys unseen
    const seen = lines.some((line, i) => line.text.trim() && Math.min(r.bottom, baseline + i * lineHeight +
      m.fontBoundingBoxDescent) - Math.max(r.top, baseline + i * lineHeight - ascent) >= content / 2);
    if (!seen) return false;
    const dpr = devicePixelRatio || 1;
    const w = Math.ceil((r.right - r.left) * dpr);
    const h = Math.ceil((r.bottom - r.top) * dpr);
    Object.assign(frame.style, { left: `${r.left}px`, top: `${r.top}px`, width: `${w / dpr}px`, height: `${h / dpr}px` });
    if (canvas.width !== w || canvas.height !== h) {
      canvas.width = w;  // resizing resets the context's state
      canvas.height = h;
      Object.assign(canvas.style, { width: `${w / dpr}px`, height: `${h / dpr}px` });
    }
    ctx.setTransform(dpr, 0, 0, dpr, -r.left * dpr, -r.top * dpr);  // draw in viewport pixels
    ctx.clearRect(r.left, r.top, w / dpr, h / dpr);
    setFont();
    ctx.fillStyle = GHOST_COLOR;
    ctx.textBaseline = "alphabetic";
    lines.forEach((line, i) => ctx.fillText(line.text, line.x, baseline + i * lineHeight));
    o.lines = lines.map((l) => l.text);
    return true;
  }

  /** A textarea: the caret is found by laying the text before it out in the mirror, over the textarea's
   *  content box and in its font; the ghost wraps at the content box's edges and is clipped to the box. */
  function placeOverTextarea(o, el, text) {
    const cs = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    const left = r.left + px(cs.borderLeftWidth);
    const top = r.top + px(cs.borderTopWidth);
    const at = measureLine(o, cs, el.value.slice(0, el.selectionStart), {
      left: `${left - el.scrollLeft}px`, top: `${top - el.scrollTop}px`, width: `${el.clientWidth}px`,
      boxSizing: "border-box", padding: `${cs.paddingTop} ${cs.paddingRight} ${cs.paddingBottom} ${cs.paddingLeft}`,
      textIndent: cs.textIndent,
    });
    const edges = { left: left + px(cs.paddingLeft) - el.scrollLeft,
      right: left + el.clientWidth - px(cs.paddingRight) - el.scrollLeft };
    const clip = { left, top, right: left + el.clientWidth, bottom: top + el.clientHeight };
    return paint(o, cs, text, at, edges, clip);
  }

  function caretRect() {
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

  /** A contenteditable: the ghost starts at the caret, in the font at the caret, and wraps at the editor's
   *  content edges; it is clipped to the editor. */
  function placeInEditable(o, el, text) {
    const caret = caretRect();
    if (!caret) return false;
    const node = document.getSelection().anchorNode;
    const fontOf = node.nodeType === Node.ELEMENT_NODE ? node : node.parentElement;
    const cs = getComputedStyle(el.contains(fontOf) ? fontOf : el);
    const ecs = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    if (caret.top < Math.max(0, r.top) || caret.top > Math.min(innerHeight, r.bottom)) return false;  // scrolled away
    const line = measureLine(o, cs, "", { left: "0px", top: "0px", width: "auto", padding: "0", textIndent: "0" });
    // the caret's rect is its text's box (a zero height: the top of an empty line's box)
    const at = { x: caret.x, top: caret.height ? caret.top : caret.top + (line.lineHeight - line.height) / 2,
      height: caret.height || line.height, lineHeight: line.lineHeight };
    const edges = { left: r.left + px(ecs.borderLeftWidth) + px(ecs.paddingLeft),
      right: r.right - px(ecs.borderRightWidth) - px(ecs.paddingRight) };
    const clip = { left: r.left + px(ecs.borderLeftWidth), right: r.right - px(ecs.borderRightWidth),
      top: at.top - (line.lineHeight - at.height) / 2, bottom: r.bottom - px(ecs.borderBottomWidth) };
    return paint(o, cs, text, at, edges, clip);
  }

  let visible = false;  // whether the ghost is on screen: keys take only a ghost the writer can see

  function render() {
    const text = core.rest(current);
    visible = false;
    if (!text || !box) {
      if (overlay) {
        overlay.frame.classList.add("hidden");
        overlay.ctx.clearRect(-1e5, -1e5, 2e5, 2e5);
        overlay.lines = [];
      }
      return;
    }
    const o = ensureOverlay();
    o.frame.classList.remove("hidden");
    const placed = box instanceof HTMLTextAreaElement ? placeOverTextarea(o, box, text) : placeInEditable(o, box, text);
    o.frame.classList.toggle("hidden", !placed);
    visible = placed;
  }

  /** What is drawn, for the extension's own tests (read through DevTools: the page cannot see this world's
   *  globals): the ghost's text and lines, and the canvas's inked pixels with their bounds in the window. */
  function drawnGhost() {
    const text = visible ? core.rest(current) : "";
    const report = { text, lines: visible && overlay ? overlay.lines : [], inked: 0, ink: null };
    if (!visible || !overlay) return report;
    const { canvas, ctx, frame } = overlay;
    const pixels = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let [x0, y0, x1, y1] = [Infinity, Infinity, -1, -1];
    for (let i = 3; i < pixels.length; i += 4) {
      if (!pixels[i]) continue;
      report.inked++;
      const p = (i - 3) / 4;
      const x = p % canvas.width;
      const y = Math.floor(p / canvas.width);
      x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
    if (report.inked) {
      const f = frame.getBoundingClientRect();
      const sx = canvas.width / f.width;
      const sy = canvas.height / f.height;
      report.ink = { left: f.left + x0 / sx, top: f.top + y0 / sy, right: f.left + (x1 + 1) / sx,
        bottom: f.top + (y1 + 1) / sy };
    }
    return report;
  }

  Object.defineProperty(globalThis, "__seqlabGhost", { get: drawnGhost });
  Object.defineProperty(globalThis, "__seqlabTimes", { get: () => ({ drawn: [...drawnAt] }) });

  // --------------------------------------------------------------------------- asking and telling

  async function ask(msg) {
    try {
      return await api.runtime.sendMessage(msg);
    } catch {
      return null;  // the extension was reloaded or removed: this copy of the script is an orphan
    }
  }

  /** `event`: ghost_core.js's eventOf() or closingEvent(). */
  function sendEvent(event) {
    ask({ type: "event", ...event });
  }

  // "accepted" only when some of it was inserted (ghost_core.js's closingEvent())
  function finish(kind) {
    const done = current;
    current = null;
    render();
    if (done) sendEvent(core.closingEvent(done, kind));
  }

  // The request in flight is its number (`asked`); a cancelled one's answer is dropped, and the worker
  // aborts its fetch: nothing can use it.
  const pace = core.pacer({
    request: () => request(),
    cancel: (seq) => {
      asked++;
      if (seq !== null) ask({ type: "cancel", seq });
    },
    debounceMs,
  });
  const cancelPending = pace.cancelPending;

  function dismiss() {
    cancelPending();
    finish("dismissed");
  }

  /** Whether the box holds just what the person's last edit left there, the caret where it put it. */
  function asLeft(el, snap) {
    return Boolean(left && left.box === el && left.verified && snap.text === left.text && snap.caret === left.caret);
  }

  async function request() {
    const el = box;
    if (!el || document.activeElement !== el && !el.contains(document.activeElement)) return;
    const snap = snapshot(el);
    if (!asLeft(el, snap)) return;  // the page changed the box since the person's last edit
    const state = caretState(el, snap);
    if (!state.ok || !state.prefix.trim()) return;
    const mine = ++asked;
    pace.begin(mine);
    let reply;
    try {
      reply = await ask({ type: "complete", seq: mine, prefix: state.prefix, subject: subjectFor(el),
        context: contextFor(el) });
    } finally {
      pace.end(mine);  // an edit made meanwhile is asked about now
    }
    if (!reply) return;
    if (reply.enabled === false) { stop(); return; }  // the site was switched off meanwhile
    if (mine !== asked || el !== box || reply.error || !reply.text) return;
    const now = snapshot(el);  // the writer kept going while the model thought: a stale answer
    if (now.text !== snap.text || now.caret !== snap.caret) return;
    if (current) finish("dismissed");
    current = core.suggestion(reply.id, state.prefix, norm(reply.text));
    render();
    drawnAt.push(performance.now());
    if (drawnAt.length > 1000) drawnAt.shift();
    sendEvent(core.eventOf(current, "shown"));
  }

  // --------------------------------------------------------------------------- typing and keys

  /** The box's text and caret that an edit of `type` with `data` turns `prev` into (several where a
   *  character may be one or two code units); none for an edit whose outcome cannot be foretold. */
  function expected(prev, type, data) {
    if (!prev || prev.caret < 0) return [];
    const { text, caret } = prev;
    const insert = (s) => [{ text: text.slice(0, caret) + s + text.slice(caret), caret: caret + s.length }];
    if (type === "insertText" && data) return insert(norm(data));
    if (type === "insertParagraph" || type === "insertLineBreak") return insert("\n");
    if (type === "deleteContentBackward") {
      return [1, 2].filter((k) => k <= caret).map((k) => ({ text: text.slice(0, caret - k) + text.slice(caret),
        caret: caret - k }));
    }
    return [];
  }

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
    // What the edit left is the person's only if it is what the edit should have made of what the last
    // one left: a page that changed the box meanwhile (or in this very event, before us) makes the box
    // the page's until the person's next edit, and nothing is asked for it.
    const snap = snapshot(box);
    const prev = left && left.box === box ? left : null;
    const verified = expected(prev, e.inputType, e.data).some((x) => x.text === snap.text && x.caret === snap.caret);
    const added = prev ? Math.max(0, snap.text.length - prev.text.length) : (e.data || "").length;
    typedIn.set(box, (typedIn.get(box) || 0) + added);
    left = { box, text: snap.text, caret: snap.caret, verified };
    if (!verified) {
      cancelPending();
      if (current) finish("dismissed");
      return;
    }
    if (current) {
      const state = caretState(box, snap);
      const step = core.typeThrough(current, state.prefix, state.ok, inserting);
      if (step === "typing") {
        cancelPending();
        render();
        return;
      }
      finish(step);
    }
    pace.schedule();
  }

  /** The person moved the caret (a click, an arrow key): where it now is counts as theirs, as long as
   *  the text is still what their last edit left. */
  function onCaretMoved(e) {
    if (!e.isTrusted || !box || !left || left.box !== box || !(e.target === box || box.contains(e.target))) return;
    if (e.type === "keyup" && !/^(Arrow|Home|End|Page)/.test(e.key)) return;
    const snap = snapshot(box);
    if (snap.text === left.text) left = { ...left, caret: snap.caret };
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

  // ghost_core.js's keys, on a ghost the person can see; with nothing shown, the key keeps the site's
  // meaning (Tab included), and one that is ours reaches none of the page's listeners
  function onKeyDown(e) {
    if (!e.isTrusted || e.isComposing || !box || !(e.target === box || box.contains(e.target))) return;
    const act = core.keyAction(e, visible ? core.rest(current) : "");
    if (!act) return;
    if (act.claim) {
      e.preventDefault();
      e.stopImmediatePropagation();
    }
    if (act.dismiss) dismiss();
    else insertAtCaret(act.take);
  }

  function onFocusIn(e) {
    const found = composeBoxOf(e.target);
    if (found === box) return;
    if (current) dismiss();
    box = found;
  }

  // --------------------------------------------------------------------------- "sent"

  // A server started with --learn learns the person's writing from the mail they send. The page shows when
  // that happens only through its own Send control: a trusted click on a control named Send, or Ctrl/Cmd+
  // Enter in the box (Gmail's, Outlook's and Roundcube's shortcut). What is sent is the visible text of the
  // box the person last typed into, and only while it holds just what their last edit left: focus that the
  // page's script moved, and text that it put there after the person's typing, count for nothing.
  const SEND_NAME = /^\s*send\b/i;
  // Gmail's Send is a <div role="button">, so a [role=button] still counts: what a page could do with one
  // (any element it labels Send) is ruled out by the other conditions, that it be drawn (not hidden,
  // transparent or tiny), that it be what the click hit at the click's point (not an invisible control laid
  // over something else), that its visible label say Send, and that the box be one the person typed into.
  const CONTROLS = 'button, [role="button"], input[type="submit"], input[type="button"]';

  /** Whether an element or one of its first descendants paints something: a picture, a background or a
   *  border the person can see. */
  function paints(el) {
    for (const node of [el, ...Array.from(el.querySelectorAll("*")).slice(0, 32)]) {
      if (!drawn(node)) continue;
      if (node instanceof HTMLImageElement || node instanceof SVGSVGElement || node instanceof HTMLCanvasElement) {
        return true;
      }
      const cs = getComputedStyle(node);
      if (alphaOf(cs.backgroundColor) >= FAINT || cs.backgroundImage !== "none") return true;
      if (["Top", "Right", "Bottom", "Left"].some((side) => px(cs[`border${side}Width`]) > 0 &&
          alphaOf(cs[`border${side}Color`]) >= FAINT)) return true;
    }
    return false;
  }

  function labelOf(control) {
    if (control instanceof HTMLInputElement) return alphaOf(getComputedStyle(control).color) >= FAINT ? control.value : "";
    // the label the person reads; the accessible name only for a control that shows no text but a picture
    const shown = editableText(control, null, 0).text.trim();
    if (shown || !paints(control)) return shown;
    return control.getAttribute("aria-label") || control.getAttribute("data-tooltip") ||
      control.getAttribute("title") || "";
  }

  function sendControlOf(e) {
    const control = e.target instanceof Element ? e.target.closest(CONTROLS) : null;
    if (!control || !onScreen(control, 16, 12) || !SEND_NAME.test(labelOf(control))) return null;
    if (e.detail === 0) {  // a keyboard's click (Enter or Space on the focused control) has no point
      return control.contains(document.activeElement) ? control : null;
    }
    const r = control.getBoundingClientRect();
    if (e.clientX < r.left || e.clientX > r.right || e.clientY < r.top || e.clientY > r.bottom) return null;
    const hit = document.elementFromPoint(e.clientX, e.clientY);
    return hit && control.contains(hit) ? control : null;
  }

  function sameMessage(control, el) {
    // the Send control belongs to the compose box when they share the nearest form, dialog or main region
    const scope = (node) => node.closest('form, [role="dialog"], main') || node.ownerDocument.body;
    return scope(control) === scope(el);
  }

  // The page's own text in a box the person then typed a little into (a signature, a draft, a focus steal
  // onto a box it filled) is sent with theirs only while it is small beside what they wrote.
  const PAGE_PART_MAX = 500;

  /** How much of the box's visible text is the quoted original (the cleaner on the server removes it). */
  function quotedLength(el) {
    if (el instanceof HTMLTextAreaElement) {
      return el.value.split("\n").filter((l) => /^>/.test(l)).reduce((n, l) => n + l.length + 1, 0);
    }
    return Array.from(el.querySelectorAll(QUOTE)).filter((q) => !q.parentElement.closest(QUOTE))
      .reduce((n, q) => n + editableText(q, null, 0).text.length, 0);
  }

  function reportSent(el) {
    if (!el || !left || left.box !== el || !el.isConnected || !onScreen(el, 40, 16)) return;
    const snap = snapshot(el);
    if (snap.text !== left.text || !snap.text.trim()) return;  // the page wrote in it since the person did
    const typed = typedIn.get(el) || 0;
    if (snap.text.length - quotedLength(el) - typed > Math.max(typed, PAGE_PART_MAX)) return;
    ask({ type: "sent", subject: subjectFor(el), body: snap.text, context: contextFor(el) });
  }

  function onClick(e) {
    if (!e.isTrusted || !left) return;
    const control = sendControlOf(e);
    if (control && sameMessage(control, left.box)) reportSent(left.box);
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
    if (core.typedSince(current, state.prefix, state.ok) === null) dismiss();
  }

  function reposition() {
    if (current) render();
  }

  const listeners = [
    [window, "focusin", onFocusIn], [window, "focusout", onFocusOut], [window, "keydown", onKeyDown],
    [window, "click", onClick], [window, "keydown", onSendKey],
    [window, "beforeinput", onBeforeInput], [window, "input", onInput],
    [window, "keyup", onCaretMoved], [window, "pointerup", onCaretMoved],
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
    left = null;
    if (overlay) overlay.host.remove();
    overlay = null;
  }

  // Dormant until the worker confirms that this page's origin is switched on.
  ask({ type: "hello" }).then((reply) => { if (reply && reply.enabled) start(); });
})();
