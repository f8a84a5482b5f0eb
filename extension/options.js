/* The options page: pair with `seqlab serve`, show its status and model, and switch sites on and off.
 * It asks the service worker for everything (background.js); only the site permission is requested here,
 * since the browser grants it only inside the click that asks for it. */
"use strict";

(() => {
  const api = globalThis.browser ?? globalThis.chrome;
  const $ = (id) => document.getElementById(id);
  // Webmail people use, listed switched off; any other site (a Roundcube, say) can be added by address.
  const KNOWN = [
    ["https://mail.google.com", "Gmail"],
    ["https://outlook.office.com", "Outlook on the web (work)"],
    ["https://outlook.live.com", "Outlook on the web (personal)"],
    ["https://app.fastmail.com", "Fastmail"],
    ["https://mail.proton.me", "Proton Mail"],
  ];

  const label = navigator.userAgent.includes("Firefox") ? "seqlab extension in Firefox"
    : "seqlab extension in Chromium";

  function say(text, error = false) {
    $("message").textContent = text;
    $("message").className = error ? "message error" : "message";
  }

  async function ask(msg) {
    const reply = await api.runtime.sendMessage(msg);
    if (reply && reply.error) throw new Error(reply.error);
    return reply;
  }

  // "gru · 61k parameters · byte tokens · reads the quoted message": what is suggesting, in a few words.
  function describeModel(model) {
    if (!model) return "—";
    const parts = [];
    if (model.mixer) parts.push(model.mixer);
    if (model.params) {
      parts.push(`${model.params >= 1e6 ? `${(model.params / 1e6).toFixed(1)}M`
        : `${Math.round(model.params / 1e3)}k`} parameters`);
    }
    if (model.tokenizer) parts.push(`${model.tokenizer} tokens`);
    parts.push(model.cross_attention ? "reads the quoted message" : "reads no quoted message");
    return parts.join(" · ");
  }

  function showServer(st) {
    const state = $("server-state");
    $("server-info").hidden = !st.paired;
    $("forget").hidden = !st.paired;
    const notices = st.notices || [];
    $("notice").hidden = !notices.length;
    $("notice").textContent = notices.join(" ");
    if (!st.paired) {
      state.textContent = "Not paired. Start `seqlab serve RUN_DIR` and paste the URL it prints.";
      state.className = "state off";
      return;
    }
    const h = st.health || {};
    // every answer used is proven by the server (background.js): "impostor" is a program on the port that could not
    state.textContent = h.status === "impostor"
      ? `What answers at ${st.base} is not your seqlab server: it could not prove it holds this extension's `
        + "pairing, so nothing it can read is sent to it and nothing it says is shown. Stop it and start "
        + "`seqlab serve` again."
      : h.status === "unpaired"
        ? "The server at this address no longer knows this extension (it was unpaired there, or it is not your "
          + "seqlab server): paste the URL `seqlab serve` printed to pair anew."
        : h.status === "ok" ? "Paired: suggestions are on where you switch them on."
          : `Paired, but the server is ${h.status}${h.error ? ` (${h.error})` : ""}. If it now runs on another `
            + "port, paste the URL it printed to pair with it there.";
    state.className = h.status === "ok" ? "state ok" : "state off";
    $("server-base").textContent = st.base;
    $("server-status").textContent = h.status === "impostor" ? "not your seqlab server" : h.status || "—";
    $("server-model").textContent = describeModel(h.model);
  }

  function showSites(sites) {
    const names = new Map(KNOWN);
    const all = [...new Set([...KNOWN.map(([o]) => o), ...sites])];
    const list = $("sites");
    list.replaceChildren();
    for (const origin of all) {
      const li = document.createElement("li");
      const lab = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.role = "switch";
      box.checked = sites.includes(origin);
      box.dataset.origin = origin;
      box.addEventListener("change", () => switchSite(origin, box.checked, box));
      const name = document.createElement("span");
      name.textContent = names.has(origin) ? `${names.get(origin)} (${origin})` : origin;
      lab.append(box, name);
      li.append(lab);
      list.append(li);
    }
  }

  function show(st) {
    showServer(st);
    showSites(st.sites || []);
  }

  async function refresh() {
    try {
      show(await ask({ type: "status" }));
    } catch (err) {
      say(String(err.message || err), true);
    }
  }

  // Called straight from the click or submit: the browser shows its permission prompt only inside one.
  function switchSite(text, on, box = null) {
    let origin;
    try {
      origin = siteOrigin(text);
    } catch (err) {
      say(err.message, true);
      return;
    }
    const granted = on ? api.permissions.request({ origins: [originPattern(origin)] }) : Promise.resolve(true);
    granted.then(async (ok) => {
      if (!ok) {
        if (box) box.checked = false;
        say(`the browser did not grant access to ${origin}: it stays off`, true);
        return;
      }
      show(await ask({ type: "site", origin, on }));
      say(on ? `on at ${origin}: reload its open tabs if a compose box stays quiet` : `off at ${origin}`);
    }).catch((err) => {
      if (box) box.checked = !on;
      say(String(err.message || err), true);
    });
  }

  $("pair-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    say("pairing…");
    try {
      show(await ask({ type: "pair", url: $("pair-url").value, name: label }));
      $("pair-url").value = "";  // the pasted secret is not kept: the worker keeps only what pairing derived
      say("paired");
    } catch (err) {
      say(String(err.message || err), true);
    }
  });

  $("forget").addEventListener("click", async () => {
    try {
      show(await ask({ type: "forget" }));
      say("forgotten: pair again to get suggestions");
    } catch (err) {
      say(String(err.message || err), true);
    }
  });

  $("site-form").addEventListener("submit", (e) => {
    e.preventDefault();
    switchSite($("site-origin").value, true);
    $("site-origin").value = "";
  });

  refresh();
})();
