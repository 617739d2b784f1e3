// phalanx dashboard: live refresh of server-rendered fragments, and the output tail.
// Elements with data-live="URL" are replaced with the HTML at URL every data-every ms
// (paused while the tab is hidden or focus is inside them); a <pre data-log="URL">
// follows a job's output from its end.
"use strict";

function refresh(el) {
  const every = parseInt(el.dataset.every || "2000", 10);
  let busy = false;
  async function tick() {
    if (document.hidden || busy || el.contains(document.activeElement) && document.activeElement !== document.body) {
      return;
    }
    busy = true;
    try {
      const res = await fetch(el.dataset.live, { credentials: "same-origin", headers: { "Accept": "text/html" } });
      if (res.redirected || res.status === 401) { window.location.reload(); return; }
      if (res.ok) {
        const html = await res.text();
        if (html !== el.dataset.last) { el.innerHTML = html; el.dataset.last = html; bindConfirm(el); }
      }
    } catch (e) { /* the next tick tries again */ }
    finally { busy = false; }
  }
  setInterval(tick, every);
}

function follow(pre) {
  let offset = -1;
  let finished = false;
  async function tick() {
    if (finished || document.hidden) { return; }
    try {
      const res = await fetch(pre.dataset.log + "?offset=" + offset, { credentials: "same-origin" });
      if (!res.ok) { return; }
      const data = await res.json();
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      if (data.text) { pre.textContent += data.text; if (atBottom) { pre.scrollTop = pre.scrollHeight; } }
      offset = data.offset;
      finished = data.finished;
    } catch (e) { /* try again */ }
  }
  tick();
  setInterval(tick, 1500);
}

function bindConfirm(root) {
  root.querySelectorAll("form[data-confirm]").forEach((form) => {
    if (form.dataset.bound) { return; }
    form.dataset.bound = "1";
    form.addEventListener("submit", (ev) => { if (!window.confirm(form.dataset.confirm)) { ev.preventDefault(); } });
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-live]").forEach(refresh);
  document.querySelectorAll("pre[data-log]").forEach(follow);
  bindConfirm(document);
});
