"use strict";
// The web view: the session list (refreshed every two seconds), a live read-only terminal per
// session (xterm.js fed from the server's raw log over server-sent events), replay of the
// recording (asciinema player), take over, and signals. Everything a session says is put into
// the page as text (textContent) or into the terminal emulator: never as HTML.

const API = "/ui/api/sessions";
const REFRESH_MS = 2000;
const PAGE_BACK = 64 * 1024; // the history is shown in windows of this many bytes
const TAIL = -65536; // live view: the end of the log, then following it
const RENEW_MS = 30000; // a hold lapses on the server after 90 s without renewal
const $ = (id) => document.getElementById(id);

const state = {
  rows: [],
  selected: null, // session id
  source: null, // EventSource of the live terminal
  term: null,
  fit: null,
  shownFrom: 0, // log offset the terminal starts at
  next: 0, // log offset of the next byte to draw
  until: null, // end of the history window shown, or null: live
  size: 0, // the log's size when the view opened
  held: false,
  typing: Promise.resolve(),
  agentSize: null, // the session's size before a person took it over
  renew: null, // the timer renewing a hold
  player: null,
};

function signedOut(response) {
  if (response.status === 401) {
    location.href = "/ui/login";
    return true;
  }
  return false;
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (signedOut(response)) return null;
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = data.error || {};
    note(`${error.message || response.statusText}${error.hint ? " — " + error.hint : ""}`);
    return null;
  }
  return data;
}

function note(text) {
  $("note").textContent = text;
}

// -- the list ---------------------------------------------------------------------------------
function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d`;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text == null || text === "" ? "—" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function badge(status, held) {
  const span = document.createElement("span");
  span.className = `badge ${status}`;
  span.textContent = held ? `${status} · person` : status;
  return span;
}

function renderList() {
  const body = document.querySelector("#sessions tbody");
  body.replaceChildren();
  for (const row of state.rows) {
    const tr = document.createElement("tr");
    tr.dataset.id = row.session_id;
    if (row.session_id === state.selected) tr.className = "selected";
    cell(tr, row.name, "name");
    cell(tr, row.project_path, "path").title = row.project_path;
    cell(tr, "").replaceChildren(badge(row.status, row.held_by_person));
    cell(tr, row.foreground, "mono");
    cell(tr, row.cwd, "mono path");
    cell(tr, row.memory_mb == null ? null : `${Math.round(row.memory_mb)} MiB`, "num");
    cell(tr, row.cpu_percent == null ? null : `${row.cpu_percent.toFixed(0)} %`, "num");
    cell(tr, age(row.created_at));
    cell(tr, row.durable ? "yes" : "no");
    tr.addEventListener("click", () => select(row.session_id));
    body.appendChild(tr);
  }
  $("empty").hidden = state.rows.length > 0;
  const row = current();
  if (row) {
    $("state").replaceChildren(badge(row.status, row.held_by_person));
    $("tab-replay").disabled = !row.recorded;
  }
}

function current() {
  return state.rows.find((r) => r.session_id === state.selected) || null;
}

async function refresh() {
  try {
    const response = await fetch(API);
    if (signedOut(response)) return;
    const data = await response.json();
    state.rows = data.sessions;
    renderList();
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (!state.selected && location.hash.startsWith("#s=")) select(location.hash.slice(3));
  } catch (err) {
    $("updated").textContent = "server unreachable: retrying";
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

// -- the live terminal ------------------------------------------------------------------------
function bytes(b64) {
  const text = atob(b64);
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

function newTerminal(row) {
  if (state.term) state.term.dispose();
  const term = new Terminal({
    cols: row.cols,
    rows: row.rows,
    disableStdin: true,
    scrollback: 20000,
    fontSize: 13,
    fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, monospace",
    theme: { background: "#0f1419", foreground: "#d6dde6" },
  });
  state.fit = new FitAddon.FitAddon();
  term.loadAddon(state.fit);
  term.open($("terminal"));
  term.onData((data) => type(data));
  state.term = term;
}

function streamUrl(from, align) {
  let url = `${API}/${encodeURIComponent(state.selected)}/stream?from=${from}`;
  if (align) url += "&align=1";
  if (state.until !== null) url += `&to=${state.until}`;
  return url;
}

function follow(from, fresh, align = false) {
  if (state.source) state.source.close();
  const id = state.selected;
  const source = new EventSource(streamUrl(from, align));
  state.source = source;
  source.addEventListener("hello", (e) => {
    const hello = JSON.parse(e.data);
    if (fresh) {
      state.shownFrom = hello.from;
      state.size = hello.size;
      state.term.resize(hello.cols, hello.rows);
    }
    state.next = hello.from;
    const live = state.until === null;
    $("earlier").disabled = state.shownFrom === 0;
    $("from-start").disabled = state.shownFrom === 0;
    $("later").disabled = live;
    $("to-live").disabled = live;
  });
  source.addEventListener("end", (e) => {
    source.close();
    state.next = JSON.parse(e.data).next;
    const kib = (n) => `${Math.round(n / 1024)} KiB`;
    note(`History: ${kib(state.shownFrom)} to ${kib(state.next)} of ${kib(state.size)} (read-only).`);
    // once the terminal has drawn every page (writes are queued)
    if (state.readFromTop) state.term.write("", () => state.term.scrollToTop());
  });
  source.addEventListener("page", (e) => {
    const page = JSON.parse(e.data);
    state.term.write(bytes(page.data));
    state.next = page.next;
  });
  source.addEventListener("exit", () => {
    source.close();
    note("The session has ended.");
  });
  source.onerror = () => {
    // reconnect where we stopped (the browser's own retry would start over)
    source.close();
    if (state.source === source && state.selected === id) {
      setTimeout(() => {
        if (state.source !== source) return;
        if (current()) follow(state.next, false);
        else note("The session is gone.");
      }, 1000);
    }
  };
}

function watch(from, until = null, align = false) {
  const row = current();
  if (!row) return;
  state.until = until;
  state.readFromTop = until !== null && !align; // going back through history: read upwards
  newTerminal(row);
  note(state.held || until !== null ? "" : "Watching live, read-only.");
  follow(from, true, align);
}

function later() {
  const from = state.next; // where the window ended: the start of a line
  if (from >= state.size) watch(TAIL);
  else watch(from, from + PAGE_BACK);
}

function select(id) {
  if (state.held && state.selected !== id) release();
  state.selected = id;
  history.replaceState(null, "", `#s=${id}`);
  const row = current();
  if (!row) return;
  $("detail").hidden = false;
  $("pick").hidden = true;
  $("title").textContent = `${row.name} · ${row.session_id}`;
  renderList();
  showTab("live");
  watch(TAIL);
}

// -- take over --------------------------------------------------------------------------------
function setHeld(held) {
  state.held = held;
  clearInterval(state.renew);
  if (held) {
    const id = state.selected;
    state.renew = setInterval(() => post(`${API}/${encodeURIComponent(id)}/takeover`, { hold: true }), RENEW_MS);
  }
  $("banner").hidden = !held;
  $("takeover").disabled = held;
  document.body.classList.toggle("holding", held);
  if (state.term) {
    state.term.options.disableStdin = !held;
    if (held) state.term.focus();
  }
  note(held ? "" : "Watching live, read-only.");
}

function type(data) {
  if (!state.held) return;
  const id = state.selected;
  // one request after another, so keys arrive in the order they were pressed
  state.typing = state.typing.then(() => post(`${API}/${encodeURIComponent(id)}/input`, { data }));
}

async function fitToWindow(held) {
  // while a person types, the session's terminal takes the size of their window; after, the
  // agent's size comes back
  const id = state.selected;
  let size = state.agentSize;
  if (held) {
    const row = current();
    state.agentSize = { rows: row.rows, cols: row.cols };
    const proposed = state.fit.proposeDimensions();
    if (!proposed || !proposed.rows || !proposed.cols) return;
    size = { rows: Math.max(proposed.rows, 10), cols: Math.max(proposed.cols, 40) };
  }
  if (!size) return;
  const done = await post(`${API}/${encodeURIComponent(id)}/resize`, size);
  if (done && state.term) state.term.resize(done.cols, done.rows);
}

async function takeOver() {
  const dialog = $("confirm");
  dialog.returnValue = "";
  dialog.showModal();
  dialog.addEventListener(
    "close",
    async () => {
      if (dialog.returnValue !== "yes") return;
      const done = await post(`${API}/${encodeURIComponent(state.selected)}/takeover`, { hold: true });
      if (!done) return;
      if (state.until !== null) watch(TAIL); // a person types into the live terminal
      setHeld(true);
      await fitToWindow(true);
    },
    { once: true },
  );
}

async function release() {
  const id = state.selected;
  await state.typing;
  await fitToWindow(false);
  setHeld(false);
  await post(`${API}/${encodeURIComponent(id)}/takeover`, { hold: false });
}

async function signal(sig) {
  note(`Sending ${sig}…`);
  const result = await post(`${API}/${encodeURIComponent(state.selected)}/signal`, { signal: sig });
  if (!result) return;
  if (!result.foreground_before) note("Nothing was running in the foreground.");
  else note(`${result.foreground_before}: sent ${result.signals_sent.join(", ") || "nothing"}; ${result.stopped ? "it stopped" : "it is still running"}.`);
}

// -- replay -----------------------------------------------------------------------------------
function showTab(name) {
  $("live").hidden = name !== "live";
  $("replay").hidden = name !== "replay";
  $("tab-live").classList.toggle("active", name === "live");
  $("tab-replay").classList.toggle("active", name === "replay");
  if (name === "replay") replay();
}

function replay() {
  if (state.player) state.player.dispose();
  $("player").replaceChildren();
  const url = `${API}/${encodeURIComponent(state.selected)}/recording`;
  state.player = AsciinemaPlayer.create(url, $("player"), {
    fit: "width",
    idleTimeLimit: 2,
    controls: true,
    terminalFontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, monospace",
  });
}

// -- wiring -----------------------------------------------------------------------------------
$("takeover").addEventListener("click", takeOver);
$("release").addEventListener("click", release);
for (const button of document.querySelectorAll("button.signal")) {
  button.addEventListener("click", () => signal(button.dataset.signal));
}
$("earlier").addEventListener("click", () =>
  watch(Math.max(0, state.shownFrom - PAGE_BACK), state.shownFrom, true),
);
$("from-start").addEventListener("click", () => watch(0, PAGE_BACK));
$("later").addEventListener("click", later);
$("to-live").addEventListener("click", () => watch(TAIL));
$("tab-live").addEventListener("click", () => showTab("live"));
$("tab-replay").addEventListener("click", () => showTab("replay"));
window.addEventListener("pagehide", () => {
  // leaving the page gives the agent its turn back
  if (!state.held) return;
  fetch(`${API}/${encodeURIComponent(state.selected)}/takeover`, {
    method: "POST",
    keepalive: true,
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ hold: false }),
  });
});
refresh();
