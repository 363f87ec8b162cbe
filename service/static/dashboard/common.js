// Shared by the chart pages: JSON reads (same-origin, with the session cookie) and curve traces.
// No inline script anywhere: the pages' CSP allows scripts from this origin only.
"use strict";

window.smartune = (function () {
  const MANY = 60; // above this many trials, one trace with gaps draws all curves (fast with 500+)

  async function getJSON(url) {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) {
      let detail = response.statusText;
      try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
      throw new Error(response.status + ": " + detail);
    }
    return response.json();
  }

  // trials: [{trial_id, curves: {key: [[epoch, value], ...]}}] -> Plotly traces and the point count.
  function curveTraces(trials, key, highlight) {
    const withData = trials.filter((t) => (t.curves[key] || []).length);
    let points = 0;
    if (withData.length <= MANY) {
      const traces = withData.map((t) => {
        const pts = t.curves[key];
        points += pts.length;
        return {
          type: "scatter", mode: "lines+markers", name: t.trial_id,
          x: pts.map((p) => p[0]), y: pts.map((p) => p[1]),
          line: { width: t.trial_id === highlight ? 3 : 1.5 }, marker: { size: 4 },
          hovertemplate: t.trial_id + "<br>epoch %{x}: %{y:.4g}<extra></extra>",
        };
      });
      return { traces, points };
    }
    const x = [], y = [], text = [];
    for (const t of withData) {
      for (const p of t.curves[key]) { x.push(p[0]); y.push(p[1]); text.push(t.trial_id); points += 1; }
      x.push(null); y.push(null); text.push(""); // a gap between trials
    }
    const all = {
      type: "scatter", mode: "lines", name: withData.length + " trials", x, y, text,
      connectgaps: false, line: { width: 1, color: "rgba(31,119,180,0.35)" },
      hovertemplate: "%{text}<br>epoch %{x}: %{y:.4g}<extra></extra>",
    };
    const traces = [all];
    const best = withData.find((t) => t.trial_id === highlight);
    if (best) {
      const pts = best.curves[key];
      traces.push({ type: "scatter", mode: "lines+markers", name: best.trial_id + " (best)",
        x: pts.map((p) => p[0]), y: pts.map((p) => p[1]), line: { width: 3, color: "#d62728" } });
    }
    return { traces, points };
  }

  function layout(title, ytitle) {
    return {
      title: { text: title, font: { size: 14 } }, margin: { l: 55, r: 15, t: 35, b: 40 },
      xaxis: { title: { text: "epoch" }, dtick: 1 }, yaxis: { title: { text: ytitle } },
      showlegend: false, height: 320, hovermode: "closest",
    };
  }

  const config = { displaylogo: false, responsive: true };

  function drawCurves(element, trials, key, title, highlight) {
    const { traces, points } = curveTraces(trials, key, highlight);
    element.dataset.points = String(points);
    element.dataset.traces = String(traces.length);
    return Plotly.react(element, traces, layout(title, key), config);
  }

  return { getJSON, drawCurves, layout, config };
})();
