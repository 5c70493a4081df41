// The HTML book's host of live figures (tools/bookext/live.py writes the
// elements; mlbook/common/live.py holds the Python side). The book serves this
// file as <book>/vendor/live.js, beside the vendored vega/ and pyodide/
// (tools/vendor_js.py) and mlbook-py.zip (tools/bookbuild/archive.py).
//
// Each element [data-mlbook-live] holds its payload as JSON: "function"
// ("mlbook.<module>:<name>"), "ranges" (a function path or null), "fixed"
// (build-time keyword arguments), "controls" (name, label, kind, min, max,
// step, scale, options, value) and "spec" (the default figure, a Vega-Lite
// spec). This script:
//
// 1. draws the default spec at once with vega-embed (no Python needed, so it
//    works opened from file:// too);
// 2. opened from file://, disables the controls and shows the hint (browsers
//    refuse Pyodide's fetches from file://: `make serve` serves the book);
// 3. starts Python (Pyodide, once a page, shared by every figure, in a worker
//    of its own, live-worker.js, so that the page stays live meanwhile; from
//    the memory snapshot an earlier page kept) in the background as soon as
//    a live figure has been in view for half a second, or a reader reaches
//    for a control, saying so in the figures' status lines while it starts,
//    so that the first change redraws at once (see warmUp); a page nobody
//    scrolls to a figure loads no Python. The worker unpacks mlbook-py.zip
//    and imports the page's figures' modules; on each change of a control
//    it calls mlbook.common.live.draw_json with the payload and the inputs'
//    text: it reads them (as the answer boxes read a number: "16,384" is
//    16384; a decimal comma, "2,5", and "abc" are refused), keeps a value
//    inside its range as typed and moves one outside to the nearest end,
//    applies "ranges", calls the function, and returns the values drawn,
//    the controls' ranges, the spec, which is drawn, and what it did to the
//    values: "notes" (the rule that moved a value: "at most 1,000,000: 1e9
//    became 1,000,000") and "refused" (why a value was not read; the control
//    keeps its value). Each shows on its control's own line
//    (.mlbook-live-note, .mlbook-live-field-error [data-for=name]) until the
//    next draw; the element carries them as data-notes and data-refused.
//    From a change until its redraw the figure says, over its dimmed chart,
//    that it is redrawing (data-updating), however long Python takes.
//
// Number boxes are text boxes (tools/bookext/live.py says why), which keep the
// reader's text while it is the value drawn; the arrow keys step them to the
// next point of the control's grid, Enter or leaving the box draws.
//
// After each live draw the payload's "controls" hold the values and ranges
// drawn ("spec" stays the default). After each draw the element carries
// data-values (the values drawn, JSON),
// data-result (the spec drawn, JSON), data-state ("static": the default,
// before Python; "booting"; "busy"; "live"; "error": the function raised, its
// message shows under the figure and the last good figure stays) and
// data-draws (finished draws). Changes that come faster than draws coalesce:
// each draw reads the inputs when it starts, draws run one at a time, so the
// last change wins and no older result is written after a newer one.
//
// A form (a payload with "view": the plan page's planner) draws the same way,
// but its function's result is data, not a spec: data-result holds the
// result, and what is shown comes from the payload's "display" (the default)
// or each draw's "display": "spec" drawn by vega-embed, "command" and "text"
// written into .mlbook-live-command and .mlbook-live-text. A bad input comes
// back as the function's FieldError: its message shows next to its control
// (.mlbook-live-field-error[data-for=name]) and under the fields, the inputs
// show the values tried (fitted), and the last good result, which is not for
// them, is hidden (its command, text and chart; .mlbook-live-stale says so;
// data-result keeps it) while the element carries data-stale, data-error
// (JSON: values, field, message) and data-errors (failed draws), until a good
// draw clears them.
//
// What is drawn is the spec fitted to the chart's column and in the page's
// light or dark theme, drawn again when either changes (fitSpec, themed).
//
// Timings for the book's benchmarks are kept in window.mlbookLive.
(function () {
  "use strict";
  var here = document.currentScript.src.replace(/[?#].*$/, "").replace(/[^/]*$/, "");
  var fromFile = window.location.protocol === "file:";
  var stats = (window.mlbookLive = {
    figures: 0,
    boot_ms: null, // Python's start (a figure in view, a reach or a change) to ready
    warm_cause: null, // what started Python: "view", "pointer", "focus" or "change"
    python_started_ms: null, // performance.now() when Python's start began
    python_ready_ms: null, // performance.now() when it was ready
    import_ms: null, // of that, importing the page's figures' modules (in the worker)
    python_start: null, // "fresh", or "snapshot": from the copy an earlier page kept
    snapshot_kept: null, // bytes of the copy this page kept, once stored
    snapshot_refused: null, // why a stored copy did not restore (it was dropped)
    first_live_ms: null, // first change to the first live draw finished
    draws: [] // {id, ms, python_ms}: change to redraw finished, for each live draw
  });

  // --- vega, vega-lite and vega-embed --------------------------------------------

  function loadScript(url) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = url;
      s.async = false;
      s.onload = resolve;
      s.onerror = function () { reject(new Error("could not load " + url)); };
      document.head.appendChild(s);
    });
  }

  var vegaReady = null;
  function vega() {
    if (vegaReady) return vegaReady;
    vegaReady = ["vega.min.js", "vega-lite.min.js", "vega-embed.min.js"].reduce(function (p, name) {
      return p.then(function () { return loadScript(here + "vega/" + name); });
    }, Promise.resolve()).then(function () { return window.vegaEmbed; });
    return vegaReady;
  }

  // --- Python ------------------------------------------------------------------------

  // Python runs in a worker of its own (live-worker.js), so that the page stays
  // live while it starts: starting Pyodide is seconds of compiling and
  // starting Python, and on the page's thread it froze the page for all of
  // it. The first page a reader opens keeps Pyodide's memory snapshot in
  // IndexedDB, and every later page starts from it (live-worker.js says how).
  // Measured in headless Chromium on the 2-core machine the book is built on,
  // shared with other builds: at a load average of 2-6 a fresh start took
  // 3.8-11.7 s (median 6.6 s) and a start from the snapshot 1.2-6.1 s (median
  // 2.8 s), the page's modules' import included (0.1-0.8 s for a chapter's
  // figures, 1.2-3.4 s for the plan page's planner); at 9-13, 12-35 s and
  // 3.3-9.1 s. With the cores to itself (measured earlier, on the page's
  // thread) a start from the snapshot took 1.05-1.62 s (median 1.30 s).
  // docs/live-figures.md gives the figures per page.

  // The modules of the page's live functions ("mlbook.plan.live:planner_form")
  function pageModules() {
    var names = {};
    figures.forEach(function (f) {
      [f.call["function"], f.call.ranges, f.call.view].forEach(function (path) {
        if (path) names[path.split(":")[0]] = true;
      });
    });
    return Object.keys(names);
  }

  var pythonReady = null;
  var pythonStarted = null;
  var worker = null;
  var waiting = {}; // draw id -> {resolve, reject}
  var drawId = 0;

  // One draw in the worker: mlbook.common.live.draw_json's text, and the
  // milliseconds Python took
  function drawInWorker(call, values) {
    return new Promise(function (resolve, reject) {
      drawId += 1;
      waiting[drawId] = { resolve: resolve, reject: reject };
      worker.postMessage({ type: "draw", id: drawId, call: call, values: values });
    });
  }

  function python() {
    if (pythonReady) return pythonReady;
    pythonStarted = stats.python_started_ms = performance.now();
    if (!stats.warm_cause) stats.warm_cause = "change";
    pythonReady = new Promise(function (resolve, reject) {
      try {
        worker = new Worker(here + "live-worker.js", { type: "module" });
      } catch (err) {
        reject(err);
        return;
      }
      worker.onmessage = function (event) {
        var m = event.data;
        if (m.type === "ready") {
          stats.python_start = m.python_start;
          stats.snapshot_refused = m.snapshot_refused;
          stats.import_ms = m.import_ms;
          stats.python_ready_ms = performance.now();
          stats.boot_ms = stats.python_ready_ms - pythonStarted;
          resolve(drawInWorker);
        } else if (m.type === "failed") {
          reject(new Error(m.message));
        } else if (m.type === "snapshot") {
          stats.snapshot_kept = m.bytes;
        } else if (m.type === "drawn") {
          var w = waiting[m.id];
          delete waiting[m.id];
          if (!w) return;
          if (m.error) w.reject(new Error(m.error));
          else w.resolve(m);
        }
      };
      worker.onerror = function (event) {
        event.preventDefault();
        var err = new Error(event.message || "its worker could not start");
        reject(err);
        for (var id in waiting) { waiting[id].reject(err); delete waiting[id]; }
      };
      worker.postMessage({ type: "start", indexURL: here + "pyodide/",
                           archiveURL: here + "mlbook-py.zip", modules: pageModules() });
    });
    return pythonReady;
  }

  // --- the chart's column and the page's theme -----------------------------------------

  // A spec comes from Python at the size it was designed for; what is drawn
  // fits the chart's column (at least MIN_WIDTH, below which the chart scrolls
  // in its own box) and follows the page's light or dark theme. A single view
  // takes the column's width ("width": "container", axes and legend inside);
  // side-by-side panels share it, stacked once each would be narrower than
  // MIN_PANEL; a legend beside the plot moves below it when the plot would be
  // narrower than MIN_PANEL; legends above or below wrap into as many columns
  // as fit; titles wrap into lines. Only what is drawn changes: data-result
  // keeps the spec as Python made it.
  var MIN_WIDTH = 300; // px: a readable chart on a phone (a 400 px window leaves about 360)
  var MIN_PANEL = 220; // px: a panel's plot narrower than this is stacked instead
  var AXIS_PX = 70; // px: a y axis's labels and title beside a plot (estimated)
  var EDGE_PX = 20; // px: a view's edge where it has no y axis (end labels overhang)
  var GAP_PX = 20; // px: Vega-Lite's default spacing between concatenated views
  var CHANNELS = ["color", "strokeDash", "shape", "fill", "stroke", "size", "opacity"];

  function copy(spec) { return JSON.parse(JSON.stringify(spec)); }

  function charPx(fontSize) { return 0.6 * fontSize; } // a wide average for sans-serif

  function wrapLine(text, chars) {
    var lines = [], line = "";
    String(text).split(" ").forEach(function (word) {
      if (line && line.length + 1 + word.length > chars) { lines.push(line); line = word; }
      else line = line ? line + " " + word : word;
    });
    if (line) lines.push(line);
    return lines.length > 1 ? lines : String(text);
  }

  function wrapText(text, chars) {
    if (Array.isArray(text)) {
      return [].concat.apply([], text.map(function (t) { return [].concat(wrapLine(t, chars)); }));
    }
    return wrapLine(text, chars);
  }

  function fitTitle(title, width) {
    if (title === undefined || title === null) return title;
    var t = typeof title === "object" && !Array.isArray(title) ? title : { text: title };
    if (t.text !== undefined) t.text = wrapText(t.text, Math.floor(width / charPx(t.fontSize || 13)));
    if (t.subtitle) {
      t.subtitle = wrapText(t.subtitle, Math.floor(width / charPx(t.subtitleFontSize || 10)));
    }
    return t;
  }

  // Every legend of a view (its layers' too), with the labels it names when
  // the scale lists them. Colour and dash that share a legend name the same
  // labels, so they get the same changes and Vega-Lite still merges them.
  function legendsOf(view) {
    var out = [];
    [view].concat(view.layer || []).forEach(function (v) {
      var enc = v.encoding || {};
      CHANNELS.forEach(function (name) {
        var ch = enc[name];
        if (!ch || !ch.field || ch.legend === null) return;
        ch.legend = ch.legend || {};
        out.push({ legend: ch.legend, labels: ch.scale && Array.isArray(ch.scale.domain) ? ch.scale.domain : null });
      });
    });
    return out;
  }

  function axisPx(view) {
    var y = [view].concat(view.layer || []).some(function (v) { return v.encoding && v.encoding.y; });
    return y ? AXIS_PX : EDGE_PX;
  }

  function legendPx(entry) {
    var longest = (entry.labels || []).reduce(function (n, l) { return Math.max(n, String(l).length); }, 12);
    return Math.ceil(longest * charPx(10)) + 30; // a symbol, its gap and the label
  }

  // The plot's width once the legends fit ``width`` (the view's whole width);
  // a legend above or below spans ``across`` (by default the plot).
  function fitLegends(view, width, across) {
    var plot = width - axisPx(view);
    var legends = legendsOf(view);
    legends.forEach(function (e) {
      var orient = e.legend.orient || "right";
      if ((orient === "right" || orient === "left") && plot - legendPx(e) < MIN_PANEL) {
        e.legend.orient = "bottom";
      }
    });
    legends.forEach(function (e) {
      var orient = e.legend.orient || "right";
      if (orient === "right" || orient === "left") {
        plot = Math.min(plot, width - axisPx(view) - legendPx(e));
        e.legend.labelLimit = Math.max(60, legendPx(e) - 30);
      }
    });
    legends.forEach(function (e) {
      var orient = e.legend.orient || "right";
      if (orient === "top" || orient === "bottom") {
        var n = e.labels ? e.labels.length : 0;
        var span = across || plot;
        var columns = Math.max(1, Math.floor(span / legendPx(e)));
        if (n && columns < n) {
          e.legend.columns = columns;
          e.legend.direction = "horizontal";
        }
        e.legend.labelLimit = Math.max(60, span - 30);
      }
    });
    return plot;
  }

  function fitView(view, width, across) {
    if (view.title) view.title = fitTitle(view.title, width);
    return fitLegends(view, width, across);
  }

  function fitSpec(spec, column) {
    var s = copy(spec);
    var width = Math.max(MIN_WIDTH, Math.floor(column));
    if (s.title) s.title = fitTitle(s.title, width);
    var panels = s.hconcat || s.vconcat || s.concat;
    if (!panels) {
      var plot = fitLegends(s, width);
      if (column >= MIN_WIDTH) {
        s.width = "container";
        s.autosize = { type: "fit-x", contains: "padding" };
      } else {
        s.width = plot;
      }
      return s;
    }
    var side = s.hconcat ? s.hconcat.length : 1;
    var share = Math.floor((width - (side - 1) * GAP_PX) / side);
    if (side > 1 && share - AXIS_PX < MIN_PANEL) {
      s.vconcat = s.hconcat;
      delete s.hconcat;
      panels = s.vconcat;
      share = width;
    }
    // a legend shared by the panels goes above or below them all
    var shared = !(s.resolve && s.resolve.legend) && !(s.resolve && s.resolve.scale
      && CHANNELS.some(function (c) { return s.resolve.scale[c] === "independent"; }));
    panels.forEach(function (panel) {
      if (panel.hconcat || panel.vconcat || panel.concat) return; // nested: as designed
      panel.width = Math.max(MIN_PANEL, fitView(panel, share, shared ? width - AXIS_PX : null));
    });
    return s;
  }

  function darkPage() {
    return document.documentElement.getAttribute("data-theme") === "dark";
  }

  // The dark theme's colours, from the theme's own variables
  function darkConfig() {
    var css = window.getComputedStyle(document.documentElement);
    var v = function (name, fallback) { return css.getPropertyValue(name).trim() || fallback; };
    var bg = v("--pst-color-background", "#14181e");
    var text = v("--pst-color-text-base", "#ced6dd");
    var muted = v("--pst-color-text-muted", "#9ca4af");
    var rule = v("--pst-color-border", "#48566b");
    return {
      colors: { text: text, muted: muted },
      config: {
        background: bg,
        title: { color: text, subtitleColor: muted },
        axis: { domainColor: muted, tickColor: muted, gridColor: rule, labelColor: text, titleColor: text },
        legend: { labelColor: text, titleColor: text },
        header: { labelColor: text, titleColor: text },
        view: { stroke: muted },
        text: { color: text },
        style: {
          "guide-label": { fill: text }, "guide-title": { fill: text },
          "group-title": { fill: text }, "group-subtitle": { fill: muted }
        }
      }
    };
  }

  var INK = { black: "text", "#000": "text", "#000000": "text", "#555": "muted", "#555555": "muted" };

  // On a dark page black ink becomes the theme's text colour and dark grey
  // its muted colour; data stay as they are.
  function reink(node, colors) {
    if (Array.isArray(node)) return node.map(function (x) { return reink(x, colors); });
    if (typeof node === "string") {
      var role = INK[node.toLowerCase()];
      return role ? colors[role] : node;
    }
    if (!node || typeof node !== "object") return node;
    var out = {};
    for (var k in node) out[k] = k === "data" || k === "datasets" ? node[k] : reink(node[k], colors);
    return out;
  }

  function merge(base, extra) {
    var out = Object.assign({}, base);
    for (var k in extra) {
      var both = out[k] && typeof out[k] === "object" && !Array.isArray(out[k]);
      out[k] = both && typeof extra[k] === "object" ? merge(out[k], extra[k]) : extra[k];
    }
    return out;
  }

  function themed(spec) {
    if (!darkPage()) return spec;
    var dark = darkConfig();
    var s = reink(spec, dark.colors);
    s.config = merge(s.config || {}, dark.config);
    return s;
  }

  // What is drawn for ``spec`` in ``el``: fitted to its column, in the page's theme.
  function drawable(spec, el) {
    return themed(fitSpec(spec, el.clientWidth));
  }

  // --- one figure ------------------------------------------------------------------

  function optionKey(option) {
    return typeof option === "string" ? option : JSON.stringify(option);
  }

  function gridIndex(c) {
    if (c.kind === "select-slider") return c.options.map(optionKey).indexOf(optionKey(c.value));
    if (c.scale === "log") {
      return Math.round(Math.log(c.value / c.min) / Math.log(c.step));
    }
    return Math.round((c.value - c.min) / c.step);
  }

  // The grid index of a value (fractional: between grid points for a typed value)
  function gridPosition(c, value) {
    if (c.scale === "log") return Math.log(value / c.min) / Math.log(c.step);
    return (value - c.min) / c.step;
  }

  function lastIndex(c) {
    if (c.kind === "select-slider") return c.options.length - 1;
    // max is the last position, on the grid or not (Control.last_step)
    return Math.ceil(gridPosition(c, c.max) - 1e-6);
  }

  // An end of the range as a value (Control._end, rule for rule): exact for
  // an integer control, else to six significant digits, inside the range (a
  // computed end such as 100 % MFU's 376.70097... tokens/s is 376.7).
  function endValue(c, end, up) {
    if (c.whole) return end;
    var near = Number(end.toPrecision(6));
    if (near === end || (near > end) === up) return near;
    var scale = Math.pow(10, Math.floor(Math.log10(Math.abs(end))) - 5);
    var inside = Number(((Math.round(end / scale) + (up ? 1 : -1)) * scale).toPrecision(6));
    return (inside >= end) === up ? inside : end;
  }

  // The value at grid index k, written as Python writes it (the ends as
  // endValue, a log slider's points to six digits, a linear one's without
  // 0.1 + 0.2's last digit), so that a step taken here is read back as it is.
  function fromIndex(c, k) {
    if (c.kind === "select-slider") return optionKey(c.options[k]);
    k = Math.max(0, Math.min(k, lastIndex(c)));
    if (k === 0) return String(endValue(c, c.min, true));
    if (k === lastIndex(c)) return String(endValue(c, c.max, false));
    if (c.scale === "log") return String(Number((c.min * Math.pow(c.step, k)).toPrecision(6)));
    return String(Number((c.min + k * c.step).toPrecision(12)));
  }

  // The grid point next above (or below) ``value``: an arrow key's step from
  // a typed value that may lie between grid points
  function stepFrom(c, value, up) {
    var at = gridPosition(c, value);
    if (!isFinite(at)) return fromIndex(c, 0);
    return fromIndex(c, up ? Math.floor(at + 1e-6) + 1 : Math.ceil(at - 1e-6) - 1);
  }

  function Figure(el, index) {
    this.el = el;
    this.id = el.id || "figure-" + index;
    var payload = JSON.parse(el.getAttribute("data-mlbook-live"));
    this.call = { "function": payload["function"], ranges: payload.ranges || null,
                  fixed: payload.fixed || {}, controls: payload.controls,
                  view: payload.view || null };
    this.spec = payload.spec;
    this.display = payload.display || null; // a form's default view
    this.command = el.querySelector(".mlbook-live-command");
    this.text = el.querySelector(".mlbook-live-text");
    this.errors = 0;
    this.chart = el.querySelector(".mlbook-live-chart");
    this.message = el.querySelector(".mlbook-live-message");
    this.status = el.querySelector(".mlbook-live-status");
    this.hint = el.querySelector(".mlbook-live-hint");
    this.view = null;
    this.draws = 0;
    this.wanted = 0; // changes seen
    this.done = 0; // changes drawn (or failed)
    this.running = false;
    this.failed = false;
    this.changedAt = null;
    this.inputs = {};
    this.drags = {};
    var self = this;
    if (!fromFile) {
      // a reader reaching for a control: start Python now if the figure in view
      // has not started it already
      var controls = el.querySelector(".mlbook-live-controls");
      controls.addEventListener("pointerenter", function () { warmUp("pointer"); }, { once: true });
      controls.addEventListener("focusin", function () { warmUp("focus"); }, { once: true });
    }
    payload.controls.forEach(function (c) {
      var input = el.querySelector('[name="' + c.name + '"]');
      var drag = input && input.parentNode.querySelector(".mlbook-live-drag");
      self.inputs[c.name] = input;
      if (drag) self.drags[c.name] = drag;
      if (!input) return;
      input.addEventListener("change", function () { self.changed(); });
      if (c.kind === "slider" || c.kind === "number") {
        // a number's text box steps with the arrow keys, on the control's grid
        // (a text box has no steps of its own: see tools/bookext/live.py)
        input.addEventListener("keydown", function (event) {
          if (event.key !== "ArrowUp" && event.key !== "ArrowDown") return;
          if (fromFile || input.disabled) return;
          event.preventDefault();
          var now = self.control(c.name);
          var typed = Number(String(input.value).replace(/[\s,_]/g, ""));
          var from = isFinite(typed) && String(input.value).trim() ? typed : now.value;
          input.value = stepFrom(now, from, event.key === "ArrowUp");
          self.changed();
        });
      }
      if (drag) {
        drag.addEventListener("input", function () {
          input.value = fromIndex(self.control(c.name), Number(drag.value));
          self.changed();
        });
      }
    });
  }

  Figure.prototype.control = function (name) {
    return this.call.controls.filter(function (c) { return c.name === name; })[0];
  };

  Figure.prototype.values = function () {
    var out = {};
    for (var name in this.inputs) {
      var input = this.inputs[name];
      if (input) out[name] = input.type === "checkbox" ? input.checked : input.value;
    }
    return out;
  };

  Figure.prototype.defaults = function () {
    var out = {};
    this.call.controls.forEach(function (c) { out[c.name] = c.value; });
    return out;
  };

  Figure.prototype.setState = function (state) {
    this.el.setAttribute("data-state", state);
  };

  Figure.prototype.say = function (text) {
    this.status.textContent = text || "";
  };

  // Draw a result: the spec itself, or for a form its display (spec, command, text).
  Figure.prototype.render = function (result, values, display) {
    var self = this;
    var spec = display ? display.spec : result;
    return Promise.resolve(spec && this.paint(spec)).then(function () {
      if (display && self.command) self.command.textContent = display.command ? "$ " + display.command : "";
      if (display && self.text) self.text.textContent = display.text || "";
      self.el.setAttribute("data-values", JSON.stringify(values));
      self.el.setAttribute("data-result", JSON.stringify(result));
      self.draws += 1;
      self.el.setAttribute("data-draws", String(self.draws));
    });
  };

  // Draw ``spec`` (by default the one shown) fitted to the chart's width and
  // in the page's theme, as they are now; draws run one after another.
  Figure.prototype.paint = function (spec) {
    var self = this;
    var job = (this.painting || Promise.resolve()).then(vega).then(function (embed) {
      if (spec) self.shown = spec;
      if (self.view) self.view.finalize();
      self.painted = { width: self.chart.clientWidth, dark: darkPage() };
      var options = { actions: false, renderer: "canvas" };
      return embed(self.chart, drawable(self.shown, self.chart), options);
    }).then(function (drawn) { self.view = drawn.view; });
    this.painting = job.catch(function () {});
    return job;
  };

  // The column's width or the theme changed: draw what is shown again.
  Figure.prototype.refit = function () {
    var p = this.painted;
    if (!p || (p.width === this.chart.clientWidth && p.dark === darkPage())) return;
    var self = this;
    this.paint().catch(function (err) { self.fail("the figure could not be drawn again: " + err.message); });
  };

  Figure.prototype.start = function () {
    var self = this;
    if (fromFile) {
      for (var name in this.inputs) {
        if (this.inputs[name]) this.inputs[name].disabled = true;
        if (this.drags[name]) this.drags[name].disabled = true;
      }
      this.hint.hidden = false;
    }
    return this.render(this.spec, this.defaults(), this.display).then(function () {
      if (!self.running) self.setState("static");
    }, function (err) {
      self.fail("the figure could not be drawn: " + err.message);
      self.setState("error");
    });
  };

  Figure.prototype.fail = function (text) {
    this.failed = true;
    this.message.textContent = text;
    this.message.hidden = false;
  };

  // One control's line: its note (the rule that moved a value) or its error
  // (a value not read, a form's refusal), shown with `text`, hidden without.
  Figure.prototype.line = function (kind, name, text) {
    var line = this.el.querySelector(".mlbook-live-" + kind + '[data-for="' + name + '"]');
    if (!line) return;
    line.textContent = text || "";
    line.hidden = !text;
    var input = this.inputs[name];
    if (kind === "field-error" && input) {
      if (text) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    }
  };

  // What a draw did to the values: each note and refusal on its control's
  // lines (data-notes, data-refused); the lines of the others cleared.
  Figure.prototype.said = function (out) {
    var notes = out.notes || {}, refused = out.refused || {};
    for (var name in this.inputs) {
      this.line("note", name, notes[name]);
      this.line("field-error", name, refused[name]);
    }
    this.el.setAttribute("data-notes", JSON.stringify(notes));
    this.el.setAttribute("data-refused", JSON.stringify(refused));
  };

  // A form's bad input (a FieldError): its message next to its control, and
  // the result on screen, which is for other values, hidden until a good draw.
  Figure.prototype.fieldError = function (out) {
    if (out.field && this.inputs[out.field]) {
      var refused = (out.refused || {})[out.field];
      this.line("field-error", out.field, refused ? refused + "\n" + out.message : out.message);
    }
    this.stale(true);
    this.errors += 1;
    this.el.setAttribute("data-errors", String(this.errors));
    this.el.setAttribute("data-error", JSON.stringify(
      { values: out.values, field: out.field, message: out.message }));
  };

  Figure.prototype.stale = function (on) {
    if (!this.el.querySelector(".mlbook-live-stale")) return;
    this.el.querySelector(".mlbook-live-stale").hidden = !on;
    [this.command, this.text, this.chart].forEach(function (part) {
      if (part) part.hidden = on;
    });
    if (on) this.el.setAttribute("data-stale", "true");
    else this.el.removeAttribute("data-stale");
  };

  Figure.prototype.clearFieldErrors = function () {
    this.stale(false);
    this.el.removeAttribute("data-error");
  };

  Figure.prototype.changed = function () {
    if (fromFile) return;
    this.wanted += 1;
    this.changedAt = performance.now();
    this.updating(true);
    if (!this.running) this.run();
  };

  // From a change until it is drawn, the figure says it is being redrawn
  // (data-updating on the element, its text over the dimmed chart, shown
  // after 150 ms so a quick redraw does not flicker): the controls and the
  // figure never disagree unsaid, however long Python takes to start.
  var UPDATING = "Redrawing for the new values ...";
  var UPDATING_BOOT = "Redrawing for the new values once Python has started " +
    "in your browser (once a page) ...";
  Figure.prototype.updating = function (on) {
    if (on) {
      var text = pythonReady && stats.boot_ms !== null ? UPDATING : UPDATING_BOOT;
      this.el.setAttribute("data-updating", text);
      this.chart.setAttribute("data-updating", text);
    } else {
      this.el.removeAttribute("data-updating");
      this.chart.removeAttribute("data-updating");
    }
  };

  // Apply a draw's clamped values and ranges to the inputs, and to the
  // payload's "controls" (so they say what the inputs hold; "spec" stays the default).
  Figure.prototype.apply = function (out) {
    var self = this;
    this.call.controls = out.controls;
    var payload = JSON.parse(this.el.getAttribute("data-mlbook-live"));
    payload.controls = out.controls;
    this.el.setAttribute("data-mlbook-live", JSON.stringify(payload));
    out.controls.forEach(function (c) {
      var input = self.inputs[c.name];
      var drag = self.drags[c.name];
      if (!input) return;
      if (c.kind === "checkbox") {
        input.checked = !!out.values[c.name];
      } else if (c.kind === "select-slider" || c.kind === "dropdown") {
        input.value = optionKey(out.values[c.name]);
      } else {
        input.setAttribute("min", String(c.min));
        input.setAttribute("max", String(c.max));
        input.setAttribute("step", String(c.step));
        // the reader's text stays as typed ("2,400,000", "15e12") while it is
        // the value drawn; a value that moved (or was refused) is shown as drawn
        var shown = out.values[c.name];
        var typed = Number(String(input.value).replace(/[\s,_]/g, ""));
        if (!(String(input.value).trim() && typed === shown && !(out.refused || {})[c.name])) {
          input.value = String(shown);
        }
      }
      if (drag) {
        drag.max = String(lastIndex(c));
        drag.value = String(gridIndex(c));
      }
    });
  };

  Figure.prototype.run = function () {
    var self = this;
    this.running = true;
    var first = stats.first_live_ms === null; // the page's first live draw: from this change
    var firstChange = this.changedAt;
    var target, started;
    function next() {
      if (self.done >= self.wanted) {
        self.running = false;
        self.updating(false);
        self.setState(self.failed ? "error" : "live");
        return Promise.resolve();
      }
      var booting = !pythonReady || stats.boot_ms === null;
      self.setState(booting ? "booting" : "busy");
      if (booting) self.say("Starting Python in your browser (once a page, a few seconds) ...");
      return python().then(function (draw) {
        self.say("");
        // the changes seen until now are all drawn by this draw: it reads the inputs now
        target = self.wanted;
        started = self.changedAt;
        return draw(JSON.stringify(self.call), JSON.stringify(self.values())).then(function (m) {
          var out = JSON.parse(m.text);
          var pythonMs = m.python_ms;
          if (out.error) {
            if ("field" in out) { // a form's bad input: show the values tried, and where
              self.apply(out);
              self.said(out);
              self.fieldError(out);
            }
            self.fail(out.error);
            return null;
          }
          self.apply(out);
          self.stale(false); // before drawing: vega measures the chart's box
          return self.render(out.result, out.values, out.display || null).then(function () {
            self.failed = false;
            self.message.hidden = true;
            self.message.textContent = "";
            self.clearFieldErrors();
            self.said(out);
            var ms = performance.now() - started;
            if (first) {
              stats.first_live_ms = performance.now() - firstChange;
              first = false;
            } else {
              stats.draws.push({ id: self.id, ms: ms, python_ms: pythonMs });
            }
          });
        }, function (err) {
          self.fail("the figure could not be drawn: " + err.message);
          return null;
        });
      }, function (err) {
        self.say("");
        self.fail("Python could not start in this browser: " + err.message);
        target = self.wanted;
        return null;
      }).then(function () {
        self.done = target;
        return next();
      });
    }
    return next();
  };

  // --- Python before the first touch ---------------------------------------------------

  // Python takes seconds to start (see the figures above). Started when a
  // reader stops at a figure, it is ready by the time they touch a control,
  // or nearly: a change before it is ready waits for it, and the figure says
  // so over its chart (data-updating) until it is drawn.
  var DWELL_MS = 500; // in view this long: a reader who stops at it, not one scrolling past
  var IN_VIEW = 0.2; // the share of a figure on screen that counts as in view
  var STARTING = "Starting Python in your browser for this figure's controls " +
    "(once a page, a few seconds) ...";
  var figures = [];

  function warmUp(cause) {
    if (pythonReady || fromFile) return;
    stats.warm_cause = cause;
    figures.forEach(function (f) { if (!f.running) f.say(STARTING); });
    var settle = function (text) {
      figures.forEach(function (f) { if (f.status.textContent === STARTING) f.say(text); });
    };
    python().then(function () { settle(""); }, function (err) {
      settle("Python could not start in this browser (" + err.message +
             "): the figure shows its default.");
    });
  }

  function watchView(elements) {
    if (fromFile || !("IntersectionObserver" in window)) return;
    var timers = new Map();
    var observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (entry.isIntersecting && entry.intersectionRatio >= IN_VIEW) {
          if (timers.has(entry.target)) return;
          timers.set(entry.target, setTimeout(function () {
            observer.disconnect();
            timers.forEach(function (t) { clearTimeout(t); });
            warmUp("view");
          }, DWELL_MS));
        } else if (timers.has(entry.target)) {
          clearTimeout(timers.get(entry.target));
          timers.delete(entry.target);
        }
      });
    }, { threshold: [0, IN_VIEW, 0.5, 1] });
    elements.forEach(function (el) { observer.observe(el); });
  }

  // --- the page ------------------------------------------------------------------------

  function start() {
    var elements = Array.prototype.slice.call(document.querySelectorAll("[data-mlbook-live]"));
    stats.figures = elements.length;
    elements.forEach(function (el, i) {
      var figure = new Figure(el, i);
      figures.push(figure);
      figure.start();
    });
    watchView(elements);
    // redraw at a new width (debounced) and in a new theme
    var pending = null;
    var refit = function () {
      clearTimeout(pending);
      pending = setTimeout(function () { figures.forEach(function (f) { f.refit(); }); }, 100);
    };
    if (window.ResizeObserver) {
      var sizes = new ResizeObserver(refit);
      figures.forEach(function (f) { sizes.observe(f.chart); });
    } else {
      window.addEventListener("resize", refit);
    }
    new MutationObserver(refit).observe(document.documentElement,
      { attributes: true, attributeFilter: ["data-theme"] });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
