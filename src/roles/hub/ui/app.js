// Saltpeter dashboard: live state over /ws (the original UI protocol), history and
// commands over /api/v1. No build step; served from the daemon binary.
"use strict";

const S = {
  config: null,          // config.config of the last `config` message
  status: { running: {}, last_state: {} },
  details: {},           // job -> details data
  outputs: {},           // "job\u0000machine" -> {instance, text, pos, complete}
  tz: localStorage.getItem("sp.tz") || "local",
  sort: JSON.parse(localStorage.getItem("sp.sort") || '{"key":"name","dir":1}'),
  open: {},              // machine -> panel open
  autoscroll: true,
  wrap: false,
  view: null,
  job: null,             // the job of the details view
  ws: null,
  wsDelay: 500,
  authed: false,
};

const $ = (sel, root) => (root || document).querySelector(sel);
const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k === "style") Object.assign(e.style, v); // CSSOM: allowed by the CSP
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
};
const pad = (n) => String(n).padStart(2, "0");

function fmtTime(iso) {
  if (!iso) return "-";
  const d = new Date(iso);
  if (isNaN(d)) return "-";
  if (S.tz === "utc") {
    return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} UTC`;
  }
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function fmtSpan(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return "-";
  let s = Math.max(0, Math.round(ms / 1000));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + (d || h || m ? m + "m " : "") + s + "s";
}

// --- HTTP ---------------------------------------------------------------------------

async function api(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: {} };
  if (method !== "GET") opts.headers["X-Saltpeter-Csrf"] = "1";
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  let data = null;
  const ct = r.headers.get("content-type") || "";
  if (ct.includes("json")) data = await r.json().catch(() => null);
  if (r.status === 401) showLogin();
  if (!r.ok) {
    const msg = data && data.error ? data.error.message : `${r.status} ${r.statusText}`;
    throw Object.assign(new Error(msg), { status: r.status });
  }
  return data;
}

function notice(text, isError) {
  const b = $("#banner-notice");
  b.textContent = text;
  b.hidden = !text;
  b.style.background = isError ? "#4a1c1c" : "";
  clearTimeout(notice.timer);
  if (text) notice.timer = setTimeout(() => { b.hidden = true; }, 6000);
}

// --- Live connection ------------------------------------------------------------------

function connect() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${proto}//${location.host}/ws`);
  S.ws = ws;
  ws.onopen = () => {
    S.wsDelay = 500;
    setConn(true);
    // A new connection starts every position at 0: the buffers start over.
    S.outputs = {};
    if (S.job) send({ subscribe: [S.job] });
    if (S.view === "timeline") loadTimeline();
  };
  ws.onmessage = (ev) => {
    let m;
    try { m = JSON.parse(ev.data); } catch (e) { return; }
    onMessage(m);
  };
  ws.onclose = () => {
    setConn(false);
    if (S.ws === ws) {
      S.ws = null;
      // Reconnect by itself (a daemon restart), without reloading the page.
      setTimeout(() => { if (S.authed) connect(); }, S.wsDelay);
      S.wsDelay = Math.min(S.wsDelay * 2, 5000);
    }
  };
}

function send(obj) {
  if (S.ws && S.ws.readyState === WebSocket.OPEN) S.ws.send(JSON.stringify(obj));
}

function setConn(up) {
  const c = $("#conn");
  c.textContent = up ? "live" : "reconnecting";
  c.className = "conn " + (up ? "up" : "down");
}

function onMessage(m) {
  switch (m.type) {
    case "config":
      S.config = m.config;
      $("#sp-version").textContent = m.sp_version || "?";
      renderBanners();
      render();
      break;
    case "status":
      S.status = m;
      render();
      if (S.view === "job") loadHistory();
      // Runs started or ended: next run times moved on.
      clearTimeout(S.nextTimer);
      if (S.view === "jobs") S.nextTimer = setTimeout(refreshNextRuns, 300);
      break;
    case "details":
      S.details[m.cron] = m.data;
      if (S.view === "job" && m.cron === S.job) renderJob();
      break;
    case "output_chunk":
      onChunk(m);
      break;
    case "timeline":
      renderTimeline($("#timeline-chart"), m.timeline.content || []);
      break;
  }
}

// Code points, as the server counts positions.
function cpLength(s) {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) n--;
  }
  return n;
}

function onChunk(m) {
  const key = m.cron + "\u0000" + m.machine;
  let b = S.outputs[key];
  if (!b || b.instance !== m.job_instance || (m.position === 0 && b.pos > 0)) {
    b = S.outputs[key] = { instance: m.job_instance, text: "", pos: 0, complete: false };
  }
  if (m.position < b.pos) return; // already have it
  if (m.position > b.pos) b.text += "\n[... earlier output not shown ...]\n";
  b.text += m.chunk;
  b.pos = m.position + cpLength(m.chunk);
  b.complete = m.is_complete;
  if (S.view === "job" && m.cron === S.job) renderOutput(m.machine);
}

// --- Jobs table -------------------------------------------------------------------------

function jobStatus(name, cron) {
  if (cron.error) return "Error";
  const running = Object.values(S.status.running || {}).some((r) => r.name === name);
  if (running) return "Running";
  const last = (S.status.last_state || {})[name];
  if (last) return last.result_ok ? "Success" : "Fail";
  if (cron.enabled === false) return "Disabled";
  return "NotRun";
}

function scheduleText(c) {
  if (c.error) return "";
  return [c.sec, c.min, c.hour, c.dom, c.mon, c.dow, c.year].join(" ") + (c.timezone && c.timezone !== "UTC" ? ` (${c.timezone})` : "");
}

function jobRows() {
  const crons = (S.config && S.config.crons) || {};
  const q = $("#search").value.trim().toLowerCase();
  const rows = Object.entries(crons).map(([name, c]) => {
    const last = (S.status.last_state || {})[name];
    const d = S.details[name];
    return {
      name, c, group: c.group || "", schedule: scheduleText(c),
      targets: Array.isArray(c.targets) ? c.targets.join(", ") : (c.targets || ""),
      status: jobStatus(name, c),
      next: d && d.next_run ? d.next_run : (c.next_run || null),
      last: last ? last.last_run : null,
    };
  }).filter((r) => !q || [r.name, r.group, r.c.command || "", r.status].some((v) => v.toLowerCase().includes(q)));
  const { key, dir } = S.sort;
  rows.sort((a, b) => String(a[key] || "").localeCompare(String(b[key] || "")) * dir);
  return rows;
}

async function refreshNextRuns() {
  // The table shows next runs from the API (details only come for watched jobs).
  try {
    const jobs = await api("GET", "/api/v1/jobs");
    S.nextRuns = {};
    S.paused = {};
    S.inactive = {};
    for (const j of jobs) { S.nextRuns[j.name] = j.next_run; S.paused[j.name] = j.paused; S.inactive[j.name] = j.inactive; }
    await loadJobCtl(); // jobctl.js: until and skip counts
    render();
  } catch (e) { /* shown elsewhere */ }
}

function renderJobs() {
  const tbody = $("#jobs-table tbody");
  const rows = jobRows();
  tbody.replaceChildren(...rows.map((r) => {
    const next = (S.nextRuns || {})[r.name] || r.next;
    // Outside its active_from / active_until range: say why (no next run, or a late one).
    const inactive = (S.inactive || {})[r.name];
    return el("tr", { "data-job": r.name, "data-paused": S.paused[r.name] ? "1" : null, onclick: () => { location.hash = "#/job/" + encodeURIComponent(r.name); } },
      el("td", { class: "name", text: r.name }),
      el("td", { text: r.group }),
      el("td", { class: "mono", text: r.schedule }),
      el("td", { text: r.targets }),
      el("td", { class: "status" }, el("span", { class: "badge st-" + r.status, text: r.status }), ...jobCtlBadges(r.name)),
      el("td", { class: "next", "data-next": next || "", title: inactive || null, text: next ? fmtTime(next) : (inactive ? "- (" + inactive + ")" : "-") }),
      el("td", { class: "last", text: fmtTime(r.last) }));
  }));
  $("#job-count").textContent = `${rows.length} job(s)`;
  for (const th of document.querySelectorAll("#jobs-table th")) {
    th.className = th.dataset.sort === S.sort.key ? (S.sort.dir > 0 ? "sorted-asc" : "sorted-desc") : "";
  }
}

// --- Job details ------------------------------------------------------------------------

const SCHEDULE_KEYS = ["sec", "min", "hour", "dom", "mon", "dow", "year", "timezone"];

function renderJob() {
  const name = S.job;
  const c = (S.config && S.config.crons || {})[name];
  const d = S.details[name] || {};
  $("#job-name").textContent = name;
  if (!c) { $("#job-message").textContent = "No such job in the configuration."; return; }
  const status = jobStatus(name, c);
  $("#job-group").textContent = c.group ? "group " + c.group : "";
  $("#job-status").className = "badge st-" + status;
  $("#job-status").textContent = status;
  $("#job-icon").textContent = d.overlap ? "!" : { Running: "▶", Success: "✔", Fail: "✖", Error: "⚠" }[status] || "○";
  $("#job-message").textContent = c.error ? "Disabled by a configuration error: " + c.error : "";
  $("#kill-job").disabled = status !== "Running";
  const live = Object.values(d.results || {}).filter((r) => r.state === "running" && !r.endtime);
  $("#suspend-run").disabled = !d.run || !live.some((r) => !r.suspended);
  $("#resume-run").disabled = !d.run || !live.some((r) => r.suspended);
  $("#run-now").disabled = !!c.error;
  $("#job-schedule").replaceChildren(...SCHEDULE_KEYS.map((k) => el("tr", {}, el("th", { text: k }), el("td", { class: "mono", text: c[k] === undefined ? "" : String(c[k]) }))));
  const skip = new Set([...SCHEDULE_KEYS, "name", "group", "schedule"]);
  $("#job-config").replaceChildren(...Object.entries(c).filter(([k]) => !skip.has(k)).map(([k, v]) =>
    el("tr", {}, el("th", { text: k }), el("td", { class: "mono", text: typeof v === "object" && v !== null ? JSON.stringify(v) : String(v) }))));
  const inactive = (S.inactive || {})[name];
  $("#job-next").textContent = fmtTime(d.next_run) + (inactive ? " (" + inactive + ")" : "");
  $("#job-last").textContent = fmtTime(d.last_run);
  $("#job-instance").textContent = d.job_instance ? "(" + d.job_instance + ")" : "";
  renderJobControl(); // jobctl.js
  renderTargets(d);
}

function targetClass(r) {
  if (r.state === "skipped_maintenance") return ["t-maint", "⚠", "maintenance"];
  if (r.state === "running" && r.suspended) return ["t-pending", "⏸", "suspended"];
  if (r.state === "running" || r.state === "launching" || r.state === "picked_up") return ["t-running", "▶", r.state];
  if (r.state === "finished") return r.retcode === 0 ? ["t-ok", "■", "ok"] : ["t-fail", "⚠", `exit ${r.retcode}`];
  if (r.state === "waiting_unreachable") return ["t-pending", "◌", "waiting_unreachable (minion did not answer)"];
  return ["t-pending", "○", r.state || "pending"];
}

function renderTargets(d) {
  const box = $("#job-targets");
  const results = d.results || {};
  const machines = Object.keys(results).sort();
  if (!machines.length) { box.replaceChildren(el("p", { class: "muted", text: "No run yet." })); return; }
  const keep = new Set(machines);
  for (const node of [...box.children]) if (!keep.has(node.dataset.machine)) node.remove();
  if (!machines.some((m) => S.open[m] !== undefined)) S.open[machines[0]] = true;
  for (const m of machines) {
    const r = results[m];
    let node = box.querySelector(`.target[data-machine="${CSS.escape(m)}"]`);
    if (!node) {
      node = el("div", { class: "target", "data-machine": m },
        el("div", { class: "target-head", onclick: (ev) => { if (ev.target.closest(".tools")) return; S.open[m] = !S.open[m]; renderJob(); } },
          el("span", { class: "icon" }), el("span", { class: "machine", text: m }), el("span", { class: "facts" }),
          el("span", { class: "tools" },
            el("label", {}, el("input", { type: "checkbox", class: "autoscroll", onchange: (e) => { S.autoscroll = e.target.checked; } }), " autoscroll"),
            el("label", {}, el("input", { type: "checkbox", class: "wrap", onchange: (e) => { S.wrap = e.target.checked; renderJob(); } }), " wrap"),
            el("button", { type: "button", class: "suspend-machine", onclick: () => suspendMachine(m) }, "Suspend"),
            el("button", { type: "button", class: "danger kill-machine", onclick: () => killMachine(m) }, "Kill"))),
        el("div", { class: "target-body" }, el("pre", { class: "output", "data-machine": m })));
      box.append(node);
    }
    const [cls, icon, word] = targetClass(r);
    node.querySelector(".icon").className = "icon " + cls;
    node.querySelector(".icon").textContent = icon;
    const ran = r.starttime ? fmtSpan((r.endtime ? new Date(r.endtime) : new Date()) - new Date(r.starttime)) : "-";
    node.querySelector(".facts").textContent =
      `${word} · started ${fmtTime(r.starttime)} · ended ${fmtTime(r.endtime)} · ran ${ran} · ret ${r.retcode === "" || r.retcode === null ? "-" : r.retcode}` +
      ` · wrapper ${r.wrapper_version || "-"}` + (r.last_heartbeat && !r.endtime ? ` · heartbeat ${fmtSpan(Date.now() - new Date(r.last_heartbeat))} ago` : "") +
      (r.waiting ? ` · ${r.waiting}` : "") + (r.limits ? ` · limits: ${r.limits}` : "") + (r.server ? ` · through ${r.server}` : "");
    node.querySelector(".kill-machine").disabled = !(r.state === "running" || r.state === "launching" || r.state === "picked_up" || r.state === "pending" || r.state === "queued" || r.state === "waiting_unreachable");
    const sus = node.querySelector(".suspend-machine");
    sus.textContent = r.suspended ? "Resume" : "Suspend";
    sus.title = r.suspended ? "continue its command (SIGCONT)" : "stop its command (SIGSTOP) until resumed";
    sus.disabled = r.state !== "running" || !!r.endtime;
    node.querySelector(".autoscroll").checked = S.autoscroll;
    node.querySelector(".wrap").checked = S.wrap;
    node.querySelector(".target-body").hidden = !S.open[m];
    renderOutput(m);
  }
}

// Lines rewritten with \r (progress bars) show their last state.
function crCollapse(text) {
  if (!text.includes("\r")) return text;
  return text.split("\n").map((line) => {
    const parts = line.split("\r").filter((p, i, a) => p !== "" || i === a.length - 1);
    return parts.length ? parts[parts.length - 1] : "";
  }).join("\n");
}

function renderOutput(machine) {
  const pre = document.querySelector(`pre.output[data-machine="${CSS.escape(machine)}"]`);
  if (!pre) return;
  const b = S.outputs[S.job + "\u0000" + machine];
  pre.textContent = b ? crCollapse(b.text) : "";
  pre.classList.toggle("wrap", S.wrap);
  pre.dataset.complete = b && b.complete ? "1" : "0";
  if (S.autoscroll) pre.scrollTop = pre.scrollHeight;
}

async function loadHistory() {
  const job = S.job;
  try {
    const data = await api("GET", `/api/v1/runs?job=${encodeURIComponent(job)}&limit=20`);
    if (job !== S.job) return;
    const tbody = $("#job-history tbody");
    tbody.replaceChildren(...data.runs.map((r) => {
      const took = r.started ? fmtSpan((r.ended ? new Date(r.ended) : new Date()) - new Date(r.started)) : "-";
      return el("tr", { "data-run": r.id, onclick: () => showRun(r) },
        el("td", { text: "#" + r.id }), el("td", { text: r.trigger }),
        el("td", { class: "state-" + r.state, text: r.state + (r.reason ? ` (${r.reason})` : "") }),
        el("td", { text: fmtTime(r.started || r.slot) }), el("td", { text: fmtTime(r.ended) }),
        el("td", { text: took }), el("td", { text: r.targets.map((t) => `${t.machine}:${t.exit_code ?? t.state}`).join(" ") }));
    }));
    const content = [];
    for (const r of data.runs) for (const t of r.targets) {
      if (t.started) content.push({ cron: r.job, job_instance: `${r.job}_${r.id}`, machine: t.machine, msg_type: "machine_start", timestamp: t.started });
      if (t.ended) content.push({ cron: r.job, job_instance: `${r.job}_${r.id}`, machine: t.machine, msg_type: "machine_result", timestamp: t.ended, ret_code: t.exit_code });
    }
    renderTimeline($("#job-timeline"), content);
  } catch (e) { /* 401 handled by api() */ }
}

async function showRun(r) {
  const box = $("#run-view");
  box.replaceChildren(el("h3", { text: `Run #${r.id} (${r.state})` }));
  if (r.reason) box.append(el("div", { class: "muted", text: r.reason }));
  for (const t of r.targets) {
    const pre = el("pre", { class: "output wrap", text: "loading…" });
    box.append(el("div", { class: "muted", text: `${t.machine}: ${t.state}, exit ${t.exit_code ?? "-"}` + (t.waiting ? ` (${t.waiting})` : "") + (t.limits ? ` · limits: ${t.limits}` : "") + (t.server ? ` · through ${t.server}` : "") + (t.reason === "memory_limit" ? " · killed by its memory limit" : "") }), pre);
    try {
      const out = await api("GET", `/api/v1/runs/${r.id}/targets/${encodeURIComponent(t.machine)}/output?tail=1048576`);
      pre.textContent = crCollapse(out.data) || "(no output)";
    } catch (e) { pre.textContent = e.message; }
  }
}

// --- Timeline ---------------------------------------------------------------------------

function renderTimeline(box, content) {
  const bars = {};
  for (const ev of content) {
    const k = ev.job_instance + "\u0000" + (ev.machine || "");
    const b = bars[k] || (bars[k] = { label: `${ev.job_instance} ${ev.machine || ""}`, cron: ev.cron });
    if (ev.msg_type === "machine_start") b.start = new Date(ev.timestamp).getTime();
    if (ev.msg_type === "machine_result") { b.end = new Date(ev.timestamp).getTime(); b.ok = ev.ret_code === 0; }
  }
  const list = Object.values(bars).filter((b) => b.start || b.end);
  if (!list.length) { box.replaceChildren(el("div", { class: "empty", text: "No runs in this period." })); return; }
  const now = Date.now();
  const lo = Math.min(...list.map((b) => b.start || b.end));
  const hi = Math.max(...list.map((b) => b.end || now));
  const span = Math.max(hi - lo, 1000);
  list.sort((a, b) => (a.start || a.end) - (b.start || b.end));
  box.replaceChildren(...list.map((b) => {
    const s = b.start || b.end, e = b.end || now;
    const cls = b.end ? (b.ok ? "ok" : "fail") : "running";
    return el("div", { class: "row", title: `${b.label}: ${fmtSpan(e - s)}` },
      el("span", { class: "label", text: b.label }),
      el("span", { class: "bar " + cls, style: { left: `${((s - lo) / span) * 100}%`, width: `${Math.max(((e - s) / span) * 100, 0.3)}%` } }));
  }), el("div", { class: "axis" }, el("span", { text: fmtTime(new Date(lo).toISOString()) }), el("span", { text: fmtTime(new Date(hi).toISOString()) })));
}

function loadTimeline() {
  send({ getTimeline: { start_date: $("#tl-from").value, end_date: $("#tl-to").value, id: Date.now() } });
}

// --- Commands -----------------------------------------------------------------------------

async function runNow() {
  try {
    const r = await api("POST", `/api/v1/jobs/${encodeURIComponent(S.job)}/run`);
    notice(`Run #${r.run} of ${S.job} started.`);
    S.open = {};
  } catch (e) { notice(`Could not start ${S.job}: ${e.message}`, true); }
}

async function killJob() {
  try {
    const r = await api("POST", `/api/v1/jobs/${encodeURIComponent(S.job)}/kill`);
    notice(r.message);
  } catch (e) { notice(`Kill failed: ${e.message}`, true); }
}

async function killMachine(machine) {
  const d = S.details[S.job] || {};
  if (!d.run) return;
  try {
    const r = await api("POST", `/api/v1/runs/${d.run}/targets/${encodeURIComponent(machine)}/kill`);
    notice(r.message);
  } catch (e) { notice(`Kill failed: ${e.message}`, true); }
}

// Suspend or resume the run shown (every target, or `machine`); audited like a kill.
async function suspendRun(action, machine) {
  const d = S.details[S.job] || {};
  if (!d.run) return;
  const where = machine ? `/targets/${encodeURIComponent(machine)}` : "";
  try {
    const r = await api("POST", `/api/v1/runs/${d.run}${where}/${action}`);
    notice(r.message);
  } catch (e) { notice(`${action === "suspend" ? "Suspend" : "Resume"} failed: ${e.message}`, true); }
}

function suspendMachine(machine) {
  const r = ((S.details[S.job] || {}).results || {})[machine] || {};
  suspendRun(r.suspended ? "resume" : "suspend", machine);
}

// --- Banners, maintenance, login, views ---------------------------------------------------

function renderBanners() {
  const m = (S.config && S.config.maintenance) || {};
  const mb = $("#banner-maintenance");
  const machines = m.machines || [];
  mb.hidden = !m.global && !machines.length;
  mb.textContent = m.global ? "Maintenance: no new runs start anywhere." : `Machines in maintenance: ${machines.join(", ")}`;
  const errors = (S.config && S.config.errors) || [];
  $("#banner-errors").hidden = !errors.length;
  $("#banner-errors").textContent = errors.length ? "Configuration errors:\n" + errors.join("\n") : "";
  $("#mt-global").textContent = m.global ? "on" : "off";
  $("#mt-machines").textContent = machines.length ? machines.join(", ") : "none";
}

function showLogin() {
  S.authed = false;
  if (S.ws) { const ws = S.ws; S.ws = null; ws.close(); }
  show("login");
}

function show(view) {
  S.view = view;
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== "view-" + view;
}

function route() {
  if (!S.authed) return;
  const hash = decodeURIComponent(location.hash.replace(/^#\/?/, ""));
  const job = hash.startsWith("job/") ? hash.slice(4) : null;
  if (S.job && S.job !== job) { send({ unsubscribe: [S.job] }); S.job = null; S.open = {}; }
  if (job) {
    if (S.job !== job) { S.job = job; $("#run-view").replaceChildren(); send({ subscribe: [job] }); }
    show("job");
    renderJob();
    loadHistory();
    refreshNextRuns();
  } else if (hash === "timeline") {
    show("timeline");
    loadTimeline();
  } else if (hash === "maintenance") {
    show("maintenance");
    loadWindows(); // jobctl.js
  } else {
    show("jobs");
    renderJobs();
    refreshNextRuns();
  }
}

function render() {
  if (S.view === "jobs") renderJobs();
  if (S.view === "job") renderJob();
}

async function start() {
  try {
    await api("GET", "/api/v1/status");
  } catch (e) {
    if (e.status === 401) return;
    notice("The daemon does not answer: " + e.message, true);
  }
  S.authed = true;
  $("#logout").hidden = false;
  connect();
  route();
}

function tick() {
  const now = new Date();
  $("#clock").textContent = fmtTime(now.toISOString());
  for (const td of document.querySelectorAll("td.next[data-next]")) {
    if (!td.dataset.next) continue;
    const left = new Date(td.dataset.next) - now;
    td.textContent = `${fmtTime(td.dataset.next)} (in ${fmtSpan(left)})`;
  }
  if (S.view === "job") {
    const d = S.details[S.job] || {};
    $("#job-countdown").textContent = d.next_run ? "in " + fmtSpan(new Date(d.next_run) - now) : "";
  }
}

function setTz(tz) {
  S.tz = tz;
  localStorage.setItem("sp.tz", tz);
  $("#tz-local").classList.toggle("on", tz === "local");
  $("#tz-utc").classList.toggle("on", tz === "utc");
  render();
  tick();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      await api("POST", "/api/v1/login", { token: $("#login-token").value });
      $("#login-error").textContent = "";
      $("#login-token").value = "";
      start();
    } catch (e) { $("#login-error").textContent = e.message; }
  });
  $("#logout").addEventListener("click", async () => { await api("POST", "/api/v1/logout").catch(() => null); showLogin(); });
  $("#search").addEventListener("input", renderJobs);
  for (const th of document.querySelectorAll("#jobs-table th")) {
    th.addEventListener("click", () => {
      S.sort = { key: th.dataset.sort, dir: S.sort.key === th.dataset.sort ? -S.sort.dir : 1 };
      localStorage.setItem("sp.sort", JSON.stringify(S.sort));
      renderJobs();
    });
  }
  $("#run-now").addEventListener("click", runNow);
  $("#kill-job").addEventListener("click", killJob);
  $("#suspend-run").addEventListener("click", () => suspendRun("suspend"));
  $("#resume-run").addEventListener("click", () => suspendRun("resume"));
  $("#tl-refresh").addEventListener("click", loadTimeline);
  $("#tz-local").addEventListener("click", () => setTz("local"));
  $("#tz-utc").addEventListener("click", () => setTz("utc"));
  $("#mt-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const machines = $("#mt-machines-input").value.split(",").map((s) => s.trim()).filter(Boolean);
    try {
      // One change per request: global, then the run-time machines added and removed.
      const cur = await api("GET", "/api/v1/maintenance");
      const have = new Set((cur.machines || []).filter((m) => m.sources.includes("runtime")).map((m) => m.machine));
      const want = new Set(machines);
      await api("PUT", "/api/v1/maintenance", { global: $("#mt-global-input").checked });
      for (const m of want) if (!have.has(m)) await api("PUT", "/api/v1/maintenance", { add: m });
      for (const m of have) if (!want.has(m)) await api("PUT", "/api/v1/maintenance", { remove: m });
      $("#mt-result").textContent = "Applied.";
    } catch (e) { $("#mt-result").textContent = e.message; }
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "F3" || ((ev.ctrlKey || ev.metaKey) && ev.key === "f" && S.view === "jobs")) {
      ev.preventDefault();
      $("#search").focus();
    }
  });
  window.addEventListener("hashchange", route);
  $("#ui-version").textContent = "built-in";
  setTz(S.tz);
  setInterval(tick, 1000);
  setInterval(() => { if (S.view === "jobs") refreshNextRuns(); }, 30000);
  start();
});
