/* The "why?" panel of the compose page: what the model looked at when it suggested the last suggestion.
 *
 * compose.js announces every suggestion it shows with a "seqlab:shown" event ({prefix, subject, text, id}: the
 * email exactly as it was asked for). The "why?" button in the status line is enabled from then on; a
 * click asks POST /v1/why for that suggestion (by its id too, so the server can say where it came from)
 * and shows, in a small panel, the end of the prompt with the positions the model weighed most shaded by
 * weight (attention for attention models, how much a GRU rewrote its state for recurrent ones), and the
 * model's likeliest first tokens with their probabilities. A suggestion from the person's own earlier mail
 * says so and names that email (its subject and date); one from the message being answered says so.
 *
 * The button keeps the focus in the body (mousedown is not allowed to move it), so looking at "why?"
 * does not dismiss the suggestion: Tab still accepts it.
 */
(() => {
  "use strict";

  const CONTEXT_MAX_CHARS = 240;  // the server sends about 200 characters of the prompt's end

  const $ = (id) => document.getElementById(id);
  const button = $("why");
  const panel = $("why-panel");
  const title = $("why-title");
  const content = $("why-body");

  let last = null;   // {prefix, subject, text} of the suggestion shown last
  let asking = null; // the AbortController of the request in flight
  let shown = null;  // the suggestion the open panel explains

  function el(tag, text, attrs = {}) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  }

  // Whitespace drawn as the glyphs the probes use, where a highlighted token would otherwise be invisible.
  // `breaks` keeps a newline's line break after its glyph (in the prompt's text, not in a token list).
  const visible = (text, breaks = false) =>
    text.replace(/ /g, "␣").replace(/\n/g, breaks ? "⏎\n" : "⏎").replace(/\t/g, "⇥");
  const pct = (p) => (p >= 0.1 ? `${Math.round(100 * p)}%` : `${(100 * p).toFixed(1)}%`);

  function open(heading, ...nodes) {
    title.textContent = heading;
    content.replaceChildren(...nodes);
    panel.hidden = false;
    button.setAttribute("aria-expanded", "true");
  }

  function close() {
    if (asking) asking.abort();
    asking = null;
    panel.hidden = true;
    shown = null;
    button.setAttribute("aria-expanded", "false");
  }

  // The end of the prompt as the model saw it; the top positions shaded by their weight relative to the
  // heaviest, with rank and weight on hover.
  function contextView(context, measure) {
    const box = el("p", null, { class: "why-context" });
    const pieces = context.pieces || [];
    const heaviest = Math.max(1e-9, ...pieces.filter((p) => p.rank).map((p) => p.weight));
    let total = pieces.reduce((n, p) => n + p.text.length, 0);
    if (context.cut || total > CONTEXT_MAX_CHARS) box.append("…");
    for (const piece of pieces) {
      let text = piece.text;
      if (total > CONTEXT_MAX_CHARS && !piece.rank) {  // keep the end: that is where the model was
        const drop = Math.min(text.length, total - CONTEXT_MAX_CHARS);
        text = text.slice(drop);
        total -= drop;
      }
      if (!piece.rank) {
        box.append(text);
        continue;
      }
      const shade = 0.12 + 0.68 * (piece.weight / heaviest);
      const what = measure === "rewrite" ? "rewrote" : "weight";
      const hit = el("mark", /^\s+$/.test(text) ? visible(text, true) : text, {
        class: "why-hit",
        title: `#${piece.rank} · ${what} ${pct(piece.weight)}`,
        "data-rank": String(piece.rank),
      });
      // through the CSSOM: the page's Content-Security-Policy refuses inline style attributes
      hit.style.backgroundColor = `rgba(26, 115, 232, ${shade.toFixed(3)})`;
      box.append(hit);
    }
    return box;
  }

  function alternativesView(alternatives) {
    const list = el("ol", null, { class: "why-alts" });
    for (const alt of alternatives || []) {
      const item = el("li", null, alt.suggested ? { class: "chosen" } : {});
      const bar = el("span", null, { class: "why-bar" });
      bar.style.width = `${Math.max(2, Math.round(60 * alt.p))}px`;
      item.append(el("code", visible(alt.text || alt.token)), " ", bar, ` ${pct(alt.p)}`);
      if (alt.suggested) item.append(el("span", " ← suggested", { class: "why-note" }));
      list.append(item);
    }
    return list;
  }

  // A suggestion from the person's own earlier mail (naming it, on the compose page) or from the message
  // being answered: no model to look into, only where it came from.
  function showSource(asked, data) {
    const nodes = [el("p", data.about, { class: "why-about" })];
    if (data.origin) {
      const from = el("p", "From your email: ", { class: "why-origin" });
      from.append(el("cite", data.origin));
      nodes.push(from);
    }
    open(`Why “${asked.text.trim()}”?`, ...nodes);
    shown = asked;
  }

  function show(asked, data) {
    if (data.source && data.source !== "model") {
      showSource(asked, data);
      return;
    }
    const nodes = [el("p", data.about, { class: "why-about" })];
    if (data.positions && data.positions.length) nodes.push(contextView(data.context || {}, data.measure));
    const first = data.first_token;
    nodes.push(el("h3", "The model's next token there"));
    nodes.push(alternativesView(data.alternatives));
    if (first && !data.alternatives.some((a) => a.suggested)) {
      nodes.push(el("p", `The suggestion's first token “${visible(first.text)}” was its choice #${first.rank} ` +
        `(${pct(first.p)}).`, { class: "why-about" }));
    }
    open(`Why “${asked.text.trim()}”?`, ...nodes);
    shown = asked;
  }

  async function explain() {
    if (!last) return;
    const asked = last;
    if (asking) asking.abort();
    const ctrl = new AbortController();
    asking = ctrl;
    open(`Why “${asked.text.trim()}”?`, el("p", "asking the model…", { class: "why-about" }));
    try {
      const res = await window.seqlabApi("/v1/why", {
        method: "POST",
        body: JSON.stringify({ prefix: asked.prefix, subject: asked.subject, text: asked.text,
                               ...(asked.id ? { id: asked.id } : {}) }),
        signal: ctrl.signal,
      });
      const data = await res.json().catch(() => ({}));
      if (asking !== ctrl) return;  // closed, or asked again meanwhile
      if (!res.ok) {
        open("Why?", el("p", `no answer: ${data.error || `server answered ${res.status}`}`, { class: "error" }));
        return;
      }
      show(asked, data);
    } catch (err) {
      if (err.name !== "AbortError") open("Why?", el("p", "no answer: the server is unreachable", { class: "error" }));
    } finally {
      if (asking === ctrl) asking = null;
    }
  }

  document.addEventListener("seqlab:shown", (e) => {
    last = e.detail;
    button.disabled = false;
  });
  button.addEventListener("mousedown", (e) => e.preventDefault());  // the body keeps the focus and the ghost
  // a second click on the same explanation closes it; after a newer suggestion it explains that one
  button.addEventListener("click", () => (!panel.hidden && shown === last ? close() : explain()));
  $("why-close").addEventListener("click", close);
  panel.addEventListener("keydown", (e) => { if (e.key === "Escape") close(); });
  $("discard").addEventListener("click", () => {
    last = null;
    button.disabled = true;
    close();
  });
})();
