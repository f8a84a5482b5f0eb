/* What the compose page and the extension's content script share: the ghost text's rules, written once.
 *
 * Two byte-identical copies, no build step: extension/ghost_core.js (registered before content.js, so it
 * runs in the content script's isolated world, whose globals no script of the page can see) and
 * seqlab/serving/static/ghost_core.js (a <script> of the compose page, before compose.js).
 * tests/test_extension_shared.py keeps them the same. Everything is in one frozen namespace,
 * `seqlabGhostCore`; the drawing, the box's text and the messaging stay with each page.
 *
 * - A suggestion: {id, base, text, taken, by}. `base` is the text before the caret it was asked for;
 *   `taken` counts its characters now in the box, so the ghost is text.slice(taken); `by` says, one letter
 *   per taken character, whether it was inserted ("i": Tab, Ctrl+Right) or typed through by hand ("t").
 * - Its events carry the characters inserted and those typed through; it closes "accepted" only when all
 *   of it is in the box and some was inserted (a suggestion typed out by hand saved nothing).
 * - The keys: Tab takes it all, Ctrl+Right one word, Esc dismisses; with nothing shown every key keeps its
 *   usual meaning.
 * - The pacing: one request in flight, at most one start per MIN_GAP_MS, an edit made meanwhile asked
 *   about (its newest text) once the answer is in, and a request nothing can use any more cancelled.
 */
(() => {
  "use strict";

  const MIN_GAP_MS = 40;  // between two requests' starts: a burst of keys costs one request per 40 ms

  /** A suggestion just shown: `text` after `base`, none of it taken yet. */
  const suggestion = (id, base, text) => ({ id, base, text, taken: 0, by: "" });

  /** What of the suggestion is still to show (the ghost), "" for none. */
  const rest = (s) => (s ? s.text.slice(s.taken) : "");

  /** What was written of `s` since it was asked for, when the text before the caret (`prefix`) still
   *  follows it and the caret may show it (`ok`); else null: the suggestion no longer fits. */
  function typedSince(s, prefix, ok) {
    const typed = prefix.startsWith(s.base) ? prefix.slice(s.base.length) : null;
    return typed !== null && ok && s.text.startsWith(typed) ? typed : null;
  }

  /** An edit left `prefix` before the caret: "typing" while it is still a prefix of the suggestion (the
   *  ghost shrinks, `s` records who wrote each character: `inserting`, ours, or the person's), "accepted"
   *  once all of it is written, "dismissed" when the text left it. */
  function typeThrough(s, prefix, ok, inserting) {
    const typed = typedSince(s, prefix, ok);
    if (typed === null) return "dismissed";
    const grown = typed.length - s.taken;  // < 0: the person deleted some of what was taken
    s.by = grown >= 0 ? s.by + (inserting ? "i" : "t").repeat(grown) : s.by.slice(0, typed.length);
    s.taken = typed.length;
    return typed.length < s.text.length ? "typing" : "accepted";
  }

  const insertedChars = (s) => s.by.split("i").length - 1;

  /** The event body for `s`: {id, kind, accepted_chars, typed_through_chars} (POST /v1/events). */
  function eventOf(s, kind) {
    const chars = insertedChars(s);
    return { id: s.id, kind, accepted_chars: chars, typed_through_chars: s.by.length - chars };
  }

  /** The closing event of `s` ended as `kind`: "accepted" only when some of it was inserted. */
  const closingEvent = (s, kind) => eventOf(s, kind === "accepted" && !insertedChars(s) ? "dismissed" : kind);

  // One word of the ghost: its leading spaces and the run of non-spaces after them, the same notion of a
  // word the model's completion counts in.
  const nextWord = (text) => (text.match(/^\s*\S+/) || [text])[0];

  /** What a keydown does with the ghost shown (`ghost`, "" for none): null (the key keeps its meaning), or
   *  {dismiss} (Esc) or {take: the text to insert}, with `claim` when the key is ours, not the page's. */
  function keyAction(e, ghost) {
    const only = (ctrl) => e.ctrlKey === ctrl && !e.altKey && !e.metaKey && !e.shiftKey;
    if (e.key === "Escape") return { dismiss: true, claim: Boolean(ghost) };
    if (!ghost) return null;
    if (e.key === "Tab" && only(false)) return { take: ghost, claim: true };
    if (e.key === "ArrowRight" && only(true)) return { take: nextWord(ghost), claim: true };
    return null;
  }

  /** The pacing of one box's requests. `request()` starts one (it calls begin(handle) as it starts and
   *  end(handle) once answered or failed); `cancel(handle)` is told of each cancelling, with the request in
   *  flight (null when none), to stop it; `debounceMs()` > 0 brings back the older pacing (wait that long
   *  after the last edit, then ask), for the latency benchmark's side-by-side. */
  function pacer({ request, cancel, debounceMs = () => 0 }) {
    let timer = 0;          // the debounce, or the wait for MIN_GAP_MS
    let inflight = null;    // the handle of the one request allowed in flight
    let wanted = false;     // an edit is waiting to be asked about (the newest text is read when it goes)
    let lastStart = -Infinity;

    /** Drop what is waiting and stop the request in flight: nothing can use its answer any more. */
    function cancelPending() {
      clearTimeout(timer);
      timer = 0;
      wanted = false;
      const stopped = inflight;
      inflight = null;
      cancel(stopped);
    }

    /** Start the wanted request once none is in flight and MIN_GAP_MS has passed since the last start. */
    function pump() {
      if (!wanted || inflight !== null || timer) return;
      const wait = lastStart + MIN_GAP_MS - performance.now();
      if (wait > 0) {
        timer = setTimeout(() => { timer = 0; pump(); }, wait);
        return;
      }
      wanted = false;
      request();
    }

    /** An edit wants a suggestion for the text as it now is. */
    function schedule() {
      const wait = debounceMs();
      if (wait > 0) {
        cancelPending();
        timer = setTimeout(() => { timer = 0; request(); }, wait);
        return;
      }
      wanted = true;
      pump();
    }

    function begin(handle) {
      inflight = handle;
      lastStart = performance.now();
    }

    /** The request `handle` is over; unless it was cancelled meanwhile (another may be on its way), an
     *  edit made while it was answered is asked about now. */
    function end(handle) {
      if (inflight !== handle) return;
      inflight = null;
      pump();
    }

    return Object.freeze({ schedule, cancelPending, begin, end });
  }

  Object.defineProperty(globalThis, "seqlabGhostCore", {
    value: Object.freeze({ MIN_GAP_MS, suggestion, rest, typedSince, typeThrough, eventOf, closingEvent,
      nextWord, keyAction, pacer }),
    configurable: true,
  });
})();
