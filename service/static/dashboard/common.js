// Shared by the chart pages: JSON reads (same-origin, with the session cookie), curve traces with their
// labels and per-cell bands, the empty state. No inline script anywhere: the pages' CSP allows scripts
// from this origin only.
"use strict";

window.smartune = (function () {
  const MANY = 60; // above this many trials, one trace with gaps draws all curves (fast with 500+)
  const MANY_CELLS = 24; // above this many cells, bands and means are one trace each (no legend entry per cell)
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf"];

  async function getJSON(url) {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) {
      let detail = response.statusText;
      try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
      throw new Error(response.status + ": " + detail);
    }
    return response.json();
  }

  // The i-th colour (Plotly's ten, then hues a golden angle apart), solid or with `alpha`.
  function colour(i, alpha) {
    if (i < PALETTE.length) {
      const hex = PALETTE[i];
      const [r, g, b] = [1, 3, 5].map((k) => parseInt(hex.slice(k, k + 2), 16));
      return alpha === undefined ? hex : "rgba(" + r + "," + g + "," + b + "," + alpha + ")";
    }
    const hue = Math.round((i * 137.508) % 360);
    return "hsla(" + hue + ",60%,42%," + (alpha === undefined ? 1 : alpha) + ")";
  }

  // A chart with nothing to draw says so instead of showing bare axes; `clearEmpty` before drawing again.
  function empty(element, text) {
    if (element.dataset.empty === "1") { element.querySelector(".chart-empty").textContent = text; return; }
    if (window.Plotly) Plotly.purge(element);
    element.replaceChildren();
    const note = document.createElement("p");
    note.className = "chart-empty";
    note.textContent = text;
    element.appendChild(note);
    element.dataset.empty = "1";
  }

  function clearEmpty(element) {
    if (element.dataset.empty !== "1") return;
    element.replaceChildren();
    element.dataset.empty = "0";
  }

  const fmt = (v) => (v === null || v === undefined ? "–" : Number(v).toPrecision(4));

  // One trace per trial, named by its label (cell and seed): the compare page, and the seeds of a cell.
  function trialTraces(trials, key, highlight, combine) {
    const withData = trials.filter((t) => (t.curves[key] || []).length);
    if (withData.length <= MANY && !combine) {
      return withData.map((t) => {
        const pts = t.curves[key];
        return {
          type: "scatter", mode: "lines+markers", name: t.label || t.trial_id,
          x: pts.map((p) => p[0]), y: pts.map((p) => p[1]),
          line: { width: t.trial_id === highlight ? 3 : 1.5 }, marker: { size: 4 },
          hovertemplate: (t.label || "") + "<br>" + t.trial_id + ", epoch %{x}: %{y:.4g}<extra></extra>",
        };
      });
    }
    const x = [], y = [], text = [];
    for (const t of withData) {
      for (const p of t.curves[key]) { x.push(p[0]); y.push(p[1]); text.push(t.label || t.trial_id); }
      x.push(null); y.push(null); text.push(""); // a gap between trials
    }
    return [{
      type: "scatter", mode: "lines", name: "each of " + withData.length + " trials", x, y, text,
      connectgaps: false, line: { width: 1, color: "rgba(31,119,180,0.35)" },
      hovertemplate: "%{text}<br>epoch %{x}: %{y:.4g}<extra></extra>",
    }];
  }

  // A band's outline: mean + std forward, mean - std back (kept above 0 on a log axis), as one closed path.
  function outline(rows, log) {
    const x = [], y = [];
    for (const r of rows) { x.push(r[0]); y.push(r[1] + (r[2] || 0)); }
    for (const r of [...rows].reverse()) {
      const low = r[1] - (r[2] || 0);
      x.push(r[0]); y.push(log && low <= 0 ? r[1] / 10 : low);
    }
    return { x, y };
  }

  const spread = (r) => (r[2] === null ? "n=" + r[3] + ", no std" : "± " + fmt(r[2]) + " (n=" + r[3] + ")");

  // Per cell: its mean line (the legend entry), its ± std band and its seeds, in one legend group, so a
  // click on the legend shows or hides the cell; the seeds are drawn when `seeds` is on.
  function cellTraces(data, key, opts) {
    const byId = new Map(data.trials.map((t) => [t.trial_id, t]));
    const cells = data.cells.filter((c) => c.bands[key]);
    const bestCell = (byId.get(opts.highlight) || {}).cell;
    const traces = [];
    if (cells.length > MANY_CELLS) return manyCellTraces(cells, data.trials, key, opts, bestCell);
    cells.forEach((c, i) => {
      const rows = c.bands[key];
      const group = "cell-" + i, best = c.label === bestCell;
      if (rows.some((r) => r[2] !== null)) {
        const band = outline(rows, opts.log);
        traces.push({ type: "scatter", mode: "lines", x: band.x, y: band.y, fill: "toself",
          fillcolor: colour(i, 0.18), line: { width: 0 }, hoverinfo: "skip", legendgroup: group,
          showlegend: false, name: c.label + " ± std", meta: "band" });
      }
      traces.push({ type: "scatter", mode: "lines+markers", name: c.label,
        x: rows.map((r) => r[0]), y: rows.map((r) => r[1]), customdata: rows.map(spread), legendgroup: group,
        line: { width: best ? 3.5 : 2, color: colour(i) }, marker: { size: 4 }, meta: "mean",
        hovertemplate: c.label + "<br>epoch %{x}: %{y:.4g} %{customdata}<extra></extra>" });
      for (const id of c.trial_ids) {
        const t = byId.get(id), pts = (t && t.curves[key]) || [];
        if (!pts.length) continue;
        traces.push({ type: "scatter", mode: "lines", name: t.label, legendgroup: group, showlegend: false,
          visible: opts.seeds, x: pts.map((p) => p[0]), y: pts.map((p) => p[1]), meta: "seed",
          line: { width: id === opts.highlight ? 2 : 1, color: colour(i, 0.65), dash: "dot" },
          hovertemplate: t.label + "<br>epoch %{x}: %{y:.4g}<extra></extra>" });
      }
    });
    return traces;
  }

  // Many cells: every band one trace with gaps (each segment filled on its own), every mean one trace,
  // the seeds one trace; the best cell drawn on top under its own name.
  function manyCellTraces(cells, trials, key, opts, bestCell) {
    const bx = [], by = [], mx = [], my = [], mt = [];
    for (const c of cells) {
      const rows = c.bands[key];
      const band = outline(rows, opts.log);
      bx.push(...band.x, null); by.push(...band.y, null);
      for (const r of rows) { mx.push(r[0]); my.push(r[1]); mt.push(c.label + " " + spread(r)); }
      mx.push(null); my.push(null); mt.push("");
    }
    const traces = [
      { type: "scatter", mode: "lines", x: bx, y: by, fill: "toself", fillcolor: "rgba(31,119,180,0.10)",
        line: { width: 0 }, hoverinfo: "skip", name: "± std of each cell", meta: "band" },
      { type: "scatter", mode: "lines", x: mx, y: my, text: mt, connectgaps: false, meta: "mean",
        name: "mean of each of " + cells.length + " cells", line: { width: 1.2, color: "rgba(31,119,180,0.6)" },
        hovertemplate: "%{text}<br>epoch %{x}: %{y:.4g}<extra></extra>" },
    ];
    const seeds = trialTraces(trials, key, null, true)[0];
    if (seeds) traces.push(Object.assign(seeds, { visible: opts.seeds, meta: "seed",
      line: { width: 0.8, color: "rgba(127,127,127,0.35)" } }));
    const best = cells.find((c) => c.label === bestCell);
    if (best) {
      const rows = best.bands[key];
      traces.push({ type: "scatter", mode: "lines+markers", name: "best cell: " + best.label, meta: "mean",
        x: rows.map((r) => r[0]), y: rows.map((r) => r[1]), customdata: rows.map(spread),
        line: { width: 3, color: "#d62728" }, hovertemplate: best.label + "<br>epoch %{x}: %{y:.4g} %{customdata}<extra></extra>" });
    }
    return traces;
  }

  // The x axis is the epoch (said in the title, so the legend under the plot has the room of its title).
  function layout(title, ytitle, log, entries) {
    const rows = Math.ceil(entries / 2); // a horizontal legend under the plot, about two entries a row
    return {
      title: { text: title + " per epoch", font: { size: 14 } }, margin: { l: 55, r: 15, t: 35, b: 30 },
      xaxis: { dtick: 1 },
      yaxis: { title: { text: ytitle + (log ? " (log)" : "") }, type: log ? "log" : "linear" },
      showlegend: entries > 0, legend: { orientation: "h", x: 0, y: -0.1, yanchor: "top", font: { size: 11 } },
      height: 300 + 21 * rows, hovermode: "closest",
    };
  }

  const config = { displaylogo: false, responsive: true };

  // data: a /curves answer; opts: {highlight, bands (per-cell means, default true), seeds, log, emptyText}.
  // Sets data-points (the trials' points), data-traces, data-bands, data-log and data-legend on the element.
  function drawCurves(element, data, key, title, opts) {
    const o = Object.assign({ highlight: null, bands: true, seeds: false, log: false,
      emptyText: "No epoch logged yet." }, opts || {});
    let points = 0;
    for (const t of data.trials) points += (t.curves[key] || []).length;
    element.dataset.points = String(points);
    if (!points) {
      element.dataset.traces = "0";
      empty(element, o.emptyText);
      return Promise.resolve();
    }
    clearEmpty(element);
    const traces = o.bands && data.cells ? cellTraces(data, key, o) : trialTraces(data.trials, key, o.highlight);
    const legend = traces.filter((t) => t.showlegend !== false).length;
    element.dataset.traces = String(traces.length);
    element.dataset.bands = String(traces.filter((t) => t.meta === "band").length);
    element.dataset.log = o.log ? "1" : "0";
    element.dataset.legend = String(legend);
    return Plotly.react(element, traces, layout(title, key, o.log, legend), config);
  }

  return { getJSON, drawCurves, layout, config, empty, clearEmpty, colour, fmt };
})();
