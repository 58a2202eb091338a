// Saltpeter dashboard, job control (issue 19): paused and skipping jobs in the jobs table
// and on a job's page, the pause / resume / skip-next buttons, and the next maintenance
// windows on the maintenance page. Loaded after app.js and uses its helpers ($, el, api,
// fmtTime, notice, S). The paused state comes from the API, never from the page's own
// guess: `paused` of /api/v1/jobs (a pause whose end has passed no longer counts there)
// and /api/v1/jobctl for the until and skip counts.
"use strict";

// job -> {paused, paused_by, paused_at, until, skip_next} of /api/v1/jobctl.
S.jobctl = {};
// job -> the API's `paused` note ("paused by ... until ..."), while it is paused.
S.paused = {};

async function loadJobCtl() {
  try {
    const data = await api("GET", "/api/v1/jobctl");
    S.jobctl = {};
    for (const e of data.jobs || []) S.jobctl[e.job] = e;
  } catch (e) { /* 401 handled by api(); the table keeps its last state */ }
}

function pauseOf(name) {
  const note = S.paused[name];
  if (!note) return null;
  const e = S.jobctl[name] || {};
  return { note, until: e.until || null };
}

function pauseText(p) {
  return p.until ? `Paused until ${fmtTime(p.until)}` : "Paused";
}

// The status cell of the jobs table: the run status, then the pause and pending skips.
function jobCtlBadges(name) {
  const out = [];
  const p = pauseOf(name);
  if (p) out.push(el("span", { class: "badge st-Paused", title: p.note, text: pauseText(p) }));
  const skips = (S.jobctl[name] || {}).skip_next || 0;
  if (skips) out.push(el("span", { class: "badge st-Skip", text: `skips next ${skips}` }));
  return out;
}

function renderJobControl() {
  const name = S.job;
  const p = pauseOf(name);
  const badge = $("#job-paused");
  badge.hidden = !p;
  badge.textContent = p ? pauseText(p) : "";
  badge.title = p ? p.note : "";
  const skips = (S.jobctl[name] || {}).skip_next || 0;
  $("#job-skips").textContent = skips ? `skips the next ${skips} slot(s)` : "";
  $("#pause-job").disabled = !!p;
  $("#resume-job").disabled = !p && !skips;
}

// The until field is read in the dashboard's time zone (local or UTC).
function pauseUntil() {
  const v = $("#pause-until").value;
  if (!v) return null;
  const d = new Date(S.tz === "utc" ? v + "Z" : v);
  if (isNaN(d)) throw new Error(`"${v}" is not a date and time`);
  return d.toISOString();
}

async function jobControl(action, body) {
  const job = S.job;
  try {
    const r = await api("POST", `/api/v1/jobs/${encodeURIComponent(job)}/${action}`, body);
    notice(r && r.note ? r.note : `${job}: ${action} done.`);
  } catch (e) { notice(`Could not ${action} ${job}: ${e.message}`, true); }
  await refreshNextRuns();
}

async function pauseJob() {
  let until;
  try { until = pauseUntil(); } catch (e) { notice(e.message, true); return; }
  await jobControl("pause", until ? { until } : {});
}

// --- Maintenance windows ------------------------------------------------------------------

function windowScope(w) {
  const machines = w.machines && w.machines.length ? "machines " + w.machines.join(", ") : "whole fleet";
  const groups = w.groups && w.groups.length ? "groups " + w.groups.join(", ") : "every job";
  return `${machines}; ${groups}` + (w.timezone ? ` (${w.timezone})` : "");
}

async function loadWindows() {
  const tbody = $("#mt-windows tbody");
  try {
    const list = await api("GET", "/api/v1/maintenance/windows?count=20");
    $("#mt-windows-empty").hidden = list.length > 0;
    tbody.replaceChildren(...list.map((w) => el("tr", { "data-window": w.name, class: w.open ? "open" : "" },
      el("td", { class: "name", text: w.name + (w.open ? " (open now)" : "") }),
      el("td", { class: "mono", text: fmtTime(w.start) }),
      el("td", { class: "mono", text: fmtTime(w.end) }),
      el("td", { text: windowScope(w) }),
      el("td", { class: "policy-" + w.policy, text: w.policy }))));
  } catch (e) {
    $("#mt-windows-empty").hidden = false;
    $("#mt-windows-empty").textContent = "Could not load the windows: " + e.message;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#pause-job").addEventListener("click", pauseJob);
  $("#resume-job").addEventListener("click", () => jobControl("resume"));
  $("#skip-job").addEventListener("click", () => jobControl("skip", { next: 1 }));
});
