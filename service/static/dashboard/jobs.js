// The jobs list: its state, progress, times and best value refresh every few seconds without a reload.
"use strict";

(function () {
  const table = document.getElementById("jobs-table");
  if (!table) return;
  const POLL_MS = 5000;
  const when = (iso) => (iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace(/(Z|\+00:00)$/, "") + " UTC" : "");

  // An audit's row shows its verdict (PASS / FAIL / NOT-COMPARABLE) where a sweep's shows its best value.
  function showVerdict(cell, job) {
    if (!job.verdict) { cell.textContent = job.state === "SUCCEEDED" || job.state === "FAILED" || job.state === "CANCELLED" ? "no report" : "pending"; return; }
    const badge = document.createElement("span");
    badge.className = "verdict verdict-" + job.verdict;
    badge.textContent = job.verdict;
    cell.replaceChildren(badge);
  }

  async function refresh() {
    try {
      const response = await fetch("/ui/data/jobs?" + table.dataset.query, { credentials: "same-origin" });
      if (!response.ok) return;
      const data = await response.json();
      for (const job of data.jobs) {
        const row = table.querySelector('tr[data-job="' + CSS.escape(job.id) + '"]');
        if (!row) continue;
        const state = row.querySelector('[data-field="state"]');
        state.textContent = job.state;
        state.className = "state state-" + job.state;
        state.title = job.wait_reason || "";
        const p = job.progress;
        const audit = job.kind === "audit";
        row.querySelector('[data-field="trials"]').textContent = audit ? "audit" : p.trials_done + " / " + p.trials_planned;
        const bar = row.querySelector('[data-field="epochs"]');
        bar.max = p.epochs_planned || 1;
        bar.value = p.epochs_done;
        bar.hidden = audit;  // an audit re-runs recorded trials: its rows count no epochs of its own
        row.querySelector('[data-field="epochs-text"]').textContent = audit ? "–" : p.epochs_done + " / " + p.epochs_planned;
        row.querySelector('[data-field="started"]').textContent = when(job.started_at);
        row.querySelector('[data-field="finished"]').textContent = when(job.finished_at);
        const best = row.querySelector('[data-field="best"]');
        if (audit) showVerdict(best, job);
        else best.textContent = job.best_value === null ? "–" : Number(job.best_value).toPrecision(4);
      }
    } finally {
      window.setTimeout(refresh, POLL_MS);
    }
  }
  window.setTimeout(refresh, POLL_MS);
  document.body.dataset.ready = "1";
})();
