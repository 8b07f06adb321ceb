// The inbox viewer (docs/API.md §13). Every byte of an event, a state value or an email is
// untrusted: the DOM is built with createElement and textContent only, never from HTML text.
// The read token lives in sessionStorage and leaves the page only in the Authorization header.
"use strict";
(function () {
  const STORE = "agentaddress.inbox";
  const WAIT = 25;
  const $ = (id) => document.getElementById(id);

  let session = null; // {id, token}
  let cursor = 0;
  let run = 0; // bumped on every open and close: a loop of an older run stops
  let aborter = null;
  let stateTimer = null;

  class Failure extends Error {
    constructor(status, code, message, retryAfter) {
      super(message);
      this.status = status;
      this.code = code;
      this.retryAfter = retryAfter;
    }
  }

  // el("p", {className: "x"}, "text", child…): an element with text and children, no markup.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "className") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const root = () => "/api/v1/addresses/" + encodeURIComponent(session.id);
  const str = (v) => (v === null || v === undefined ? "" : String(v));

  function say(text, kind) {
    const m = $("message");
    m.textContent = text;
    m.className = kind || "";
    m.hidden = !text;
  }

  function live(text) {
    $("live").textContent = text;
  }

  // A request with the token; a non-2xx answer becomes a Failure with the contract's error code.
  async function api(method, path, signal) {
    const r = await fetch(path, {
      method,
      headers: { Authorization: "Bearer " + session.token },
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
      signal,
    });
    if (r.ok) return r;
    let body = null;
    try {
      body = await r.json();
    } catch (_) {
      body = null;
    }
    const err = (body && body.error) || {};
    let retry = Number(err.retry_after_seconds);
    if (!Number.isFinite(retry)) retry = Number(r.headers.get("Retry-After"));
    throw new Failure(r.status, str(err.code), str(err.message), Number.isFinite(retry) ? retry : null);
  }

  // What a failure means to the person; returns true when the viewer must stop.
  function explain(e, what) {
    if (e instanceof Failure) {
      if (e.status === 401) {
        close("Wrong address id or read token (401 unauthorized). Check both and open again.");
        return true;
      }
      if (e.status === 410 && e.code === "address_gone") {
        stop();
        $("no-events").hidden = true;
        say("This address is gone (410): it was deleted or has expired. Its events and state are no longer kept.");
        live("Stopped.");
        return true;
      }
      if (e.status === 429) {
        say("Rate limited (429): " + what + " again in " + (e.retryAfter || 1) + " s.", "info");
        return false;
      }
      say(what + " failed: HTTP " + e.status + (e.code ? " " + e.code : "") + (e.message ? ": " + e.message : ""));
      return false;
    }
    say(what + " failed: the server cannot be reached (" + str(e && e.message) + ").");
    return false;
  }

  function fmtTime(t) {
    const d = new Date(t);
    return Number.isNaN(d.getTime()) ? str(t) : d.toLocaleString();
  }

  function fmtSize(n) {
    n = Number(n) || 0;
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
    return (n / 1048576).toFixed(1) + " MiB";
  }

  function pretty(v) {
    try {
      return JSON.stringify(v, null, 2);
    } catch (_) {
      return str(v);
    }
  }

  // Fetches a download with the token and saves it through a Blob URL. A file the deployment
  // does not answer itself (on AWS, over 4 MiB) comes back as a short-lived link instead of a
  // redirect (redirect=false: a redirect to another origin is one this page may not read); the
  // browser then downloads it from there, without the token.
  async function download(path, filename, button) {
    button.disabled = true;
    const label = button.textContent;
    button.textContent = "Downloading…";
    try {
      const r = await api("GET", path + "?redirect=false");
      if (r.headers.get("AgentAddress-Download") === "link") {
        const link = await r.json();
        const url = new URL(str(link.url));
        if (url.protocol !== "https:" && url.protocol !== "http:") throw new Error("not a web link");
        const a = el("a", { href: url.href, rel: "noreferrer" });
        document.body.append(a);
        a.click();
        a.remove();
        say("Downloading " + (filename || "the file") + " from a link valid until " + fmtTime(link.expires_at) + ".", "info");
        return;
      }
      const blob = await r.blob();
      const url = URL.createObjectURL(blob);
      const a = el("a", { href: url, download: filename || "download" });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      say("Saved " + (filename || "the download") + " (" + fmtSize(blob.size) + ").", "info");
    } catch (e) {
      if (e instanceof Failure && e.status === 410 && e.code === "attachment_unavailable") {
        say("This message is no longer stored (410 attachment_unavailable).");
      } else if (e instanceof Failure) {
        explain(e, "The download");
      } else {
        say("The download failed: " + str(e && e.message) + ".");
      }
    } finally {
      button.disabled = false;
      button.textContent = label;
    }
  }

  function mailView(ev) {
    const d = ev.data || {};
    const rows = [
      ["From", d.from],
      ["To", Array.isArray(d.to) ? d.to.join(", ") : d.to],
      ["Cc", Array.isArray(d.cc) && d.cc.length ? d.cc.join(", ") : null],
      ["Subject", d.subject],
      ["Date", d.date ? fmtTime(d.date) : null],
    ];
    const dl = el("dl");
    for (const [k, v] of rows) {
      if (v === null || v === undefined) continue;
      dl.append(el("dt", { text: k }), el("dd", { text: str(v) }));
    }
    // The reply's own text first (docs/API.md §10, "The reply's text"); the whole text, quoted
    // history and all, a click away. An event from before reply_text shows its text.
    const text = str(d.text);
    const reply = typeof d.reply_text === "string" ? d.reply_text : text;
    const box = el("div", { className: "mail" }, dl, el("pre", { className: "mail-text", text: reply }));
    if (reply !== text) {
      box.append(
        el("details", { className: "mail-whole" },
          el("summary", { text: "Show the whole message" }),
          el("pre", { className: "mail-full", text })));
    }
    if (d.truncated) box.append(el("p", { text: "This message was cut to fit the feed; the raw message has all of it." }));
    if (typeof d.html === "string") {
      box.append(
        el("details", {},
          el("summary", { text: "HTML part (shown as source, never rendered)" }),
          el("pre", { className: "mail-html", text: d.html })));
    }
    const actions = el("p", { className: "actions" });
    const base = root() + "/events/" + encodeURIComponent(ev.id);
    for (const att of Array.isArray(d.attachments) ? d.attachments : []) {
      if (!att || typeof att !== "object") continue;
      const name = str(att.filename) || "attachment";
      const b = el("button", { type: "button", className: "attachment" },
        "Download " + name + " (" + str(att.content_type) + ", " + fmtSize(att.size) + ")");
      b.addEventListener("click", () =>
        download(base + "/attachments/" + encodeURIComponent(str(att.id)), name, b));
      actions.append(b);
    }
    const raw = el("button", { type: "button", className: "raw" }, "Download the raw message (.eml)");
    raw.addEventListener("click", () => download(base + "/raw", str(d.email_id || ev.id) + ".eml", raw));
    actions.append(raw);
    box.append(actions);
    return box;
  }

  function ackedText(at) {
    return el("span", { className: "acked", tabindex: "-1" }, "Acknowledged at " + fmtTime(at));
  }

  async function ack(ev, button) {
    button.disabled = true;
    try {
      const r = await api("POST", root() + "/events/" + encodeURIComponent(ev.id) + "/ack");
      const body = await r.json();
      const at = body && body.event && body.event.acknowledged_at;
      const done = ackedText(at);
      done.dataset.acknowledgedAt = str(at);
      button.replaceWith(done);
      done.focus();
    } catch (e) {
      button.disabled = false;
      explain(e, "Acknowledging");
    }
  }

  const PREVIEW_CHARS = 120;

  // `text` on one line: line breaks, tabs, other control and bidirectional formatting
  // characters become single spaces; at most `max` characters, ending in "…" when cut.
  function oneLine(text, max) {
    const flat = str(text).replace(/[\s\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]+/g, " ").trim();
    const chars = Array.from(flat);
    return chars.length > max ? chars.slice(0, max - 1).join("") + "…" : flat;
  }

  function compact(v) {
    try {
      return str(JSON.stringify(v));
    } catch (_) {
      return str(v);
    }
  }

  // The row's one-line preview of `data` (docs/API.md §13), or null: a body kept as text shows
  // its text, a state write its key and value, an answer its choice and comment, anything else
  // its compact JSON. Mail shows its own subject and text instead.
  function preview(ev, mail) {
    const d = ev.data;
    if (mail || d === null || d === undefined) return null;
    const obj = typeof d === "object" && !Array.isArray(d);
    const keys = obj ? Object.keys(d).sort().join(",") : "";
    if (obj && ev.ingress_surface === "state" && ev.type === "state.deleted") {
      return { text: oneLine(str(d.key) + " deleted", PREVIEW_CHARS), json: false };
    }
    if (obj && ev.ingress_surface === "state") {
      return { text: oneLine(str(d.key) + " = " + compact(d.value), PREVIEW_CHARS), json: true };
    }
    if (obj && ev.ingress_surface === "request" && ev.type === "request.answered") {
      const said = "Answered " + str(d.choice) + (d.comment ? ": " + str(d.comment) : "");
      return { text: oneLine(said, PREVIEW_CHARS), json: false };
    }
    if (keys === "content_type,text" && typeof d.text === "string") {
      return { text: oneLine(d.text, PREVIEW_CHARS), json: false };
    }
    if (keys === "base64,content_type" && typeof d.base64 === "string") {
      return { text: oneLine("Binary body (" + str(d.content_type) + ")", PREVIEW_CHARS), json: false };
    }
    return { text: oneLine(compact(d), PREVIEW_CHARS), json: true };
  }

  // "from SOURCE · SURFACE · TIME", without a missing source and without a source that only
  // repeats the surface (a state write's source is "state").
  function metaText(ev) {
    const parts = [];
    const source = str(ev.source);
    if (source && source !== str(ev.ingress_surface)) parts.push("from " + source);
    if (ev.ingress_surface) parts.push(str(ev.ingress_surface));
    parts.push(fmtTime(ev.received_at));
    return parts.join(" · ");
  }

  function addEvent(ev) {
    if (document.querySelector('[data-sequence="' + Number(ev.sequence) + '"]')) return;
    const li = el("li", { className: "event", "data-sequence": String(Number(ev.sequence)) });
    li.dataset.eventId = str(ev.id);
    li.dataset.type = str(ev.type);
    const head = el("p", { className: "head" },
      el("span", { className: "seq", text: "#" + str(ev.sequence) }), " ",
      el("span", { className: "type", text: str(ev.type) }), " ",
      el("span", { className: "meta", text: metaText(ev) }));
    li.append(head);
    // Only mail the server received is shown as mail: a webhook may call itself email.received.
    const mail = ev.type === "email.received" && ev.ingress_surface === "email";
    const line = preview(ev, mail);
    if (line && line.text) {
      li.append(el("p", { className: line.json ? "preview json" : "preview", title: line.text }, line.text));
    }
    if (mail && ev.data && typeof ev.data === "object") li.append(mailView(ev));
    const actions = el("p", { className: "actions" });
    if (ev.acknowledged_at) {
      actions.append(ackedText(ev.acknowledged_at));
    } else {
      const b = el("button", { type: "button", className: "ack" }, "Acknowledge #" + str(ev.sequence));
      b.addEventListener("click", () => ack(ev, b));
      actions.append(b);
    }
    li.append(actions);
    li.append(el("details", {}, el("summary", { text: "Details (JSON)" }), el("pre", { className: "json", text: pretty(ev) })));
    $("events").append(li);
    $("no-events").hidden = true;
    if (ev.type === "state.updated" || ev.type === "state.deleted") refreshStateSoon();
  }

  // The first read answers at once (what is there already); later ones wait for news.
  async function poll(mine) {
    let delay = 1000;
    let wait = 0;
    while (mine === run) {
      aborter = new AbortController();
      try {
        const r = await api("GET", root() + "/events?after=" + cursor + "&wait=" + wait, aborter.signal);
        const page = await r.json();
        if (mine !== run) return;
        for (const ev of page.events || []) addEvent(ev);
        if (Number.isInteger(page.next_cursor)) cursor = page.next_cursor;
        wait = page.has_more ? 0 : WAIT;
        live("Live: new events appear here as they arrive.");
        if ($("message").className === "info") say("");
        delay = 1000;
      } catch (e) {
        if (mine !== run) return;
        if (explain(e, "Reading the feed")) return;
        let pause = delay;
        if (e instanceof Failure && e.status === 429) pause = Math.max(1, e.retryAfter || 1) * 1000;
        else delay = Math.min(delay * 2, 30000);
        live("Waiting " + Math.round(pause / 1000) + " s before reading again.");
        await sleep(pause);
      }
    }
  }

  function refreshStateSoon() {
    clearTimeout(stateTimer);
    stateTimer = setTimeout(loadState, 300);
  }

  async function loadState() {
    if (!session) return;
    const mine = run;
    const info = $("state-info");
    info.textContent = "Loading…";
    try {
      const list = await (await api("GET", root() + "/state")).json();
      const rows = [];
      for (const k of list.keys || []) {
        const v = await (await api("GET", root() + "/state/" + encodeURIComponent(k.key))).json();
        rows.push([k, v]);
      }
      if (mine !== run) return;
      const dl = $("state");
      dl.replaceChildren();
      for (const [k, v] of rows) {
        dl.append(
          el("dt", { text: str(k.key) }),
          el("dd", {},
            el("span", { className: "meta", text: "revision " + str(k.revision) + " · " + fmtSize(k.size) + " · " + fmtTime(k.updated_at) }),
            el("pre", { text: pretty(v.value) })));
      }
      const n = Number(list.state_keys) || 0;
      info.textContent = n + (n === 1 ? " key, " : " keys, ") + fmtSize(list.state_bytes) + " of " +
        fmtSize(list.limits && list.limits.max_bytes);
    } catch (e) {
      if (mine !== run) return;
      info.textContent = "";
      if (e instanceof Failure && e.status === 404) return refreshStateSoon(); // deleted meanwhile
      explain(e, "Reading the state");
    }
  }

  function stop() {
    run += 1;
    if (aborter) aborter.abort();
    clearTimeout(stateTimer);
    $("state-info").textContent = "";
  }

  function open(id, token) {
    stop();
    session = { id, token };
    cursor = 0;
    $("events").replaceChildren();
    $("state").replaceChildren();
    $("no-events").hidden = false;
    $("current-id").textContent = id;
    $("login").hidden = true;
    $("viewer").hidden = false;
    say("");
    live("Connecting…");
    poll(run);
    loadState();
  }

  // Back to the form; `why` says what went wrong (the token is forgotten either way).
  function close(why) {
    stop();
    const id = session ? session.id : $("address-id").value;
    session = null;
    sessionStorage.removeItem(STORE);
    $("viewer").hidden = true;
    $("login").hidden = false;
    $("address-id").value = id;
    $("read-token").value = "";
    say(why || "");
    (id ? $("read-token") : $("address-id")).focus();
  }

  // ---- Sign-in links (docs/API.md §13, "Sign-in links") --------------------------------------
  // `agentaddress inbox TASK` opens /inbox#code=avc_…: the one-time code rides in the fragment,
  // which a browser never sends to a server. It leaves the address bar at once (history keeps
  // URLs) and is traded, once, for the address id and read token in a POST body, never a URL;
  // the token is then kept like a typed one.
  const REDEEM = "/api/v1/viewer-codes/redeem";
  const LINK_USED = "This link was already used or has expired — run the command again.";

  // The code of a `#code=…` fragment, which is removed from the URL; null without one.
  function takeLinkCode() {
    const fragment = location.hash.replace(/^#/, "");
    if (!fragment) return null;
    const code = new URLSearchParams(fragment).get("code");
    if (code === null) return null;
    history.replaceState(null, "", location.pathname + location.search);
    return code;
  }

  // A failed link: the tab's earlier sign-in (if any) goes on, and the page says why.
  function linkFailed(why, saved) {
    if (session) return say(why);
    if (saved) open(saved.id, saved.token);
    else $("address-id").focus();
    say(why);
  }

  async function redeemLink(code, saved) {
    say("Signing in with the link…", "info");
    let r = null;
    let body = null;
    try {
      r = await fetch(REDEEM, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ code: String(code).slice(0, 256) }),
        cache: "no-store",
        credentials: "omit",
        referrerPolicy: "no-referrer",
      });
      body = await r.json();
    } catch (e) {
      if (!r) {
        linkFailed("Signing in with the link failed: the server cannot be reached (" + str(e && e.message) + ").", saved);
        return;
      }
    }
    const ok = r.ok && body && typeof body.address_id === "string" && typeof body.read_token === "string";
    if (ok) {
      sessionStorage.setItem(STORE, JSON.stringify({ id: body.address_id, token: body.read_token }));
      open(body.address_id, body.read_token);
      return;
    }
    const err = (body && body.error) || {};
    if (r.status === 410) linkFailed(LINK_USED, saved);
    else if (r.status === 429) linkFailed("Too many sign-in attempts from this network (429): wait a minute, then run the command again.", saved);
    else linkFailed("Signing in with the link failed: HTTP " + r.status + (err.code ? " " + str(err.code) : "") + ".", saved);
  }

  // The sign-in this tab keeps, if any.
  function savedSession() {
    try {
      const saved = JSON.parse(sessionStorage.getItem(STORE) || "null");
      return saved && typeof saved.id === "string" && typeof saved.token === "string" ? saved : null;
    } catch (_) {
      return null;
    }
  }
  // ---- end of sign-in links ----------------------------------------------------------------

  function start() {
    // First, before anything else: a sign-in link's code leaves the address bar.
    const code = takeLinkCode();
    $("login-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const id = $("address-id").value.trim();
      const token = $("read-token").value.trim();
      if (!id || !token) return;
      sessionStorage.setItem(STORE, JSON.stringify({ id, token }));
      $("read-token").value = "";
      open(id, token);
    });
    $("forget").addEventListener("click", () => close(""));
    $("refresh-state").addEventListener("click", loadState);
    const saved = savedSession();
    if (code !== null) redeemLink(code, saved);
    else if (saved) open(saved.id, saved.token);
    else $("address-id").focus();
    // A link pasted into this tab changes only the fragment: no reload, so redeem it here.
    window.addEventListener("hashchange", () => {
      const pasted = takeLinkCode();
      if (pasted !== null) redeemLink(pasted, session ? { id: session.id, token: session.token } : savedSession());
    });
    // The form works from here on: automation waits for this mark (docs/API.md §13).
    document.documentElement.dataset.ready = "true";
  }

  start();
})();
