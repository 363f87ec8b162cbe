// The logs page: the driver's log followed by offset (new lines appended), or a trial's output (its newest
// part, replaced). Polled every few seconds until the job is final, then once more and no longer.
"use strict";

(function () {
  const pre = document.getElementById("log");
  if (!pre) return;
  const S = window.smartune;
  const status = document.getElementById("log-status");
  const POLL_MS = 3000;
  const MAX_CHARS = 2000000; // the page keeps at most this much of a long log (the oldest part dropped)
  const chosen = pre.dataset.attempt || null; // an attempt named in the page's URL, else the latest
  let offset = 0;
  let attempt = null; // the attempt whose log is shown (the latest unless one was chosen)

  function follow() { return window.innerHeight + window.scrollY >= document.body.scrollHeight - 40; }

  function show(text, replace) {
    const atBottom = follow();
    if (replace) pre.textContent = text;
    else pre.textContent += text;
    if (pre.textContent.length > MAX_CHARS) pre.textContent = pre.textContent.slice(-MAX_CHARS);
    if (atBottom) window.scrollTo(0, document.body.scrollHeight);
  }

  async function driver() {
    let url = pre.dataset.url + "?offset=" + offset;
    if (chosen) url += "&attempt=" + encodeURIComponent(chosen);
    const data = await S.getJSON(url);
    if (attempt !== null && data.attempt !== attempt) { pre.textContent = ""; offset = 0; attempt = data.attempt; return false; }
    attempt = data.attempt;
    if (data.reset) pre.textContent = "";
    if (data.skipped) show("… " + data.skipped + " older characters not shown …\n", false);
    show(data.text, false);
    offset = data.offset;
    status.textContent = "attempt " + data.attempt + (data.final ? " · complete" : " · following");
    return data.final;
  }

  async function trial() {
    const data = await S.getJSON(pre.dataset.url);
    show((data.truncated ? "… older output not shown …\n" : "") + (data.text || ""), true);
    status.textContent = data.starts.length ? (data.running ? "running · following" : "ended") : "nothing printed yet";
    return data.final && !data.running;
  }

  async function poll() {
    let done = false;
    try {
      done = await (pre.dataset.kind === "trial" ? trial() : driver());
    } catch (e) {
      status.textContent = "could not read the log: " + e.message;
      done = e.message.startsWith("404");
    }
    pre.dataset.lines = String(pre.textContent.split("\n").length - 1);
    document.body.dataset.ready = "1"; // what the browser test waits for
    if (!done) window.setTimeout(poll, POLL_MS);
  }

  const choice = document.getElementById("log-choice");
  if (choice) choice.addEventListener("change", () => choice.submit());
  poll();
})();
