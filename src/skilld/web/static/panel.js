// skilld panel: confirmations before an action, and the live events view (Server-Sent Events).
// Everything shown comes from the server as text: rows are built with textContent, never HTML.
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});

const COLUMNS = ["id", "ts", "kind", "library", "skill", "session", "source", "reason", "detail"];

function eventRow(record) {
  const row = document.createElement("tr");
  for (const key of COLUMNS) {
    const cell = document.createElement("td");
    let value = record[key];
    if (key === "detail") {
      value = value && Object.keys(value).length ? JSON.stringify(value) : "";
    } else if (value === null || value === undefined) {
      value = key === "reason" ? "" : "-";
    }
    cell.textContent = String(value);
    row.appendChild(cell);
  }
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
