// skilld panel: confirmations before an action, and the live events view (Server-Sent Events).
// Everything shown comes from the server as text: rows are built with textContent, never HTML.
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});

// A live row as the server renders one: links for the skill, library and session, the time
// relative (exact on hover), the detail as key–value text. Text only, never HTML.
function link(href, text) {
  const anchor = document.createElement("a");
  anchor.href = href;
  anchor.textContent = text;
  return anchor;
}

function cell(row, content, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  if (content instanceof Node) td.appendChild(content);
  else td.textContent = content;
  row.appendChild(td);
}

function eventRow(record) {
  const row = document.createElement("tr");
  const enc = encodeURIComponent;
  cell(row, String(record.id), "id");
  const time = document.createElement("time");
  time.dateTime = record.ts;
  time.title = record.ts;
  time.textContent = "just now";
  cell(row, time, "nowrap");
  cell(row, link(`/events?kind=${enc(record.kind)}`, record.kind));
  cell(row, record.library ? link(`/skills?library=${enc(record.library)}`, record.library) : "-");
  cell(row, record.skill && record.library
    ? link(`/skills/${enc(record.library)}/${enc(record.skill)}`, record.skill)
    : record.skill || "-");
  cell(row, record.session ? link(`/events?session=${enc(record.session)}`, record.session) : "-", "id");
  cell(row, record.source || "-");
  cell(row, record.reason || "");
  const detail = document.createElement("dl");
  detail.className = "detail";
  for (const [key, value] of Object.entries(record.detail || {})) {
    const dt = document.createElement("dt");
    dt.textContent = key;
    const dd = document.createElement("dd");
    dd.textContent = typeof value === "string" ? value : JSON.stringify(value);
    detail.append(dt, dd);
  }
  cell(row, detail);
  return row;
}

const live = document.getElementById("live");
if (live) {
  let source = null;
  const state = document.getElementById("live-state");
  const rows = document.getElementById("event-rows");
  live.addEventListener("click", () => {
    if (source) {
      source.close();
      source = null;
      live.setAttribute("aria-pressed", "false");
      state.textContent = "";
      return;
    }
    source = new EventSource(live.dataset.src);
    live.setAttribute("aria-pressed", "true");
    state.textContent = "showing new events as they are written";
    source.onmessage = (message) => {
      rows.insertBefore(eventRow(JSON.parse(message.data)), rows.firstChild);
    };
    source.onerror = () => {
      state.textContent = "reconnecting";
    };
  });
}
