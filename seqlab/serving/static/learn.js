/* "Mark as sent": under `seqlab serve --learn`, an email the writer has finished goes to the server, which
 * keeps it (RUN_DIR/personal, readable by them only) and learns their writing from it while idle.
 *
 * The button shows only when /health says the server learns; without --learn the server stores no text and
 * the page offers nothing. After the server has kept the email the form is cleared, as after sending.
 * API: POST /v1/sent {subject, body} -> {stored, emails}, through compose.js's `seqlabApi` (this tab's credential).
 */
(() => {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const button = $("sent");
  const status = $("status");

  function say(text, kind = "") {
    const span = document.createElement("span");
    span.textContent = text;
    if (kind) span.className = kind;
    status.replaceChildren(span);
  }

  async function learning() {
    try {
      const res = await window.seqlabApi("/health", { cache: "no-store" });
      const data = await res.json().catch(() => ({}));
      if (res.status === 503) return setTimeout(learning, 1000);  // still loading: ask again
      button.hidden = !(res.ok && data.learning);
    } catch {
      button.hidden = true;
    }
    return undefined;
  }

  button.addEventListener("click", async () => {
    const body = $("body").value;
    if (!body.trim()) {
      say("nothing to keep: the message is empty", "error");
      return;
    }
    button.disabled = true;
    try {
      const res = await window.seqlabApi("/v1/sent", {
        method: "POST",
        // the message it answered, when the writer pasted one into "Replying to"
        body: JSON.stringify({ subject: $("subject").value, body,
          ...(($("reply-to") && $("reply-to").value.trim()) ? { context: $("reply-to").value } : {}) }),
      });
      const data = await res.json().catch(() => ({}));
      if (!res.ok) {
        say(`not kept: ${data.error || `server answered ${res.status}`}`, "error");
        return;
      }
      $("discard").click();  // the email is finished: a clean form for the next one
      say(`kept for learning (${data.emails} email${data.emails === 1 ? "" : "s"} so far)`);
    } catch {
      say("not kept: the server is unreachable", "error");
    } finally {
      button.disabled = false;
    }
  });

  learning();
})();
