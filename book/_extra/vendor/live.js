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
// 3. boots Pyodide (once a page, shared by every figure; from the memory
//    snapshot an earlier page kept, see startPyodide) in the background as
//    soon as a live figure has been in view for half a second, or a reader
//    reaches for a control, saying so in the figures' status lines while it
//    starts, so that the first change redraws at once (see warmUp); a page
//    nobody scrolls to a figure loads no Python. Then it unpacks
//    mlbook-py.zip, and on each change of a control calls
//    mlbook.common.live.draw_json with the payload and the inputs' values: it
//    clamps and snaps them, applies "ranges", calls the function, and returns
//    the values drawn, the controls' ranges and the spec, which is drawn.
//
// After each live draw the payload's "controls" hold the values and ranges
// drawn ("spec" stays the default). After each draw the element carries data-values (the values drawn, JSON),
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
// show the values tried (clamped), the last good result stays, and the element
// carries data-error (JSON: values, field, message) and data-errors (failed
// draws), until a good draw clears them.
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

  // Starting Pyodide takes about 4 s here, nearly all of it Python's own
  // start-up. The first page a reader opens keeps a copy of the interpreter's
  // memory as it stands then (Pyodide's memory snapshot, before any of the
  // book's code is loaded) in the browser's IndexedDB, under Pyodide's version;
  // every later page starts from that copy, in about 0.4 s. A copy that does
  // not restore (another Pyodide build, storage refused) is dropped and Python
  // starts as on the first page.
  var SNAPSHOTS = { db: "mlbook-live", store: "pyodide-snapshots" };

  function snapshotStore(mode) {
    return new Promise(function (resolve, reject) {
      if (!window.indexedDB) { reject(new Error("no IndexedDB")); return; }
      var open = window.indexedDB.open(SNAPSHOTS.db, 1);
      open.onupgradeneeded = function () { open.result.createObjectStore(SNAPSHOTS.store); };
      open.onerror = function () { reject(open.error); };
      open.onsuccess = function () {
        var db = open.result;
        var tx = db.transaction(SNAPSHOTS.store, mode);
        tx.oncomplete = tx.onabort = function () { db.close(); };
        resolve(tx.objectStore(SNAPSHOTS.store));
      };
    });
  }

  function request(make) {
    return function (store) {
      return new Promise(function (resolve, reject) {
        var r = make(store);
        r.onsuccess = function () { resolve(r.result); };
        r.onerror = function () { reject(r.error); };
      });
    };
  }

  function storedSnapshot(key) {
    return snapshotStore("readonly")
      .then(request(function (s) { return s.get(key); }))
      .catch(function () { return undefined; });
  }

  function keepSnapshot(key, bytes) {
    return snapshotStore("readwrite")
      .then(request(function (s) { s.clear(); return s.put(bytes, key); }))
      .then(function () { stats.snapshot_kept = bytes.length; })
      .catch(function () {});
  }

  function dropSnapshot(key) {
    return snapshotStore("readwrite")
      .then(request(function (s) { return s.delete(key); }))
      .catch(function () {});
  }

  function startPyodide(mod, options) {
    var key = "pyodide " + mod.version;
    var fresh = function () {
      stats.python_start = "fresh";
      return mod.loadPyodide(Object.assign({ _makeSnapshot: true }, options))
        .then(function (py) {
          var bytes = null;
          try { bytes = py.makeMemorySnapshot(); } catch (e) { /* started; no copy kept */ }
          if (bytes) setTimeout(function () { keepSnapshot(key, bytes); }, 0);
          return py;
        });
    };
    return storedSnapshot(key).then(function (bytes) {
      if (!bytes) return fresh();
      return mod.loadPyodide(Object.assign({ _loadSnapshot: bytes }, options))
        .then(function (py) { stats.python_start = "snapshot"; return py; })
        .catch(function (e) {
          stats.snapshot_refused = String(e && e.message || e).slice(0, 200);
          return dropSnapshot(key).then(fresh);
        });
    });
  }

  var pythonReady = null;
  var pythonStarted = null;
  function python() {
    if (pythonReady) return pythonReady;
    pythonStarted = stats.python_started_ms = performance.now();
    if (!stats.warm_cause) stats.warm_cause = "change";
    var indexURL = here + "pyodide/";
    pythonReady = import(indexURL + "pyodide.mjs")
      .then(function (mod) {
        // packageBaseUrl: packages (none is loaded) would come from the book too,
        // never from the CDN that pyodide.mjs names as its default
        return startPyodide(mod, {
          indexURL: indexURL, packageBaseUrl: indexURL,
          stdout: function () {}, stderr: function () {}
        });
      })
      .then(function (py) {
        return fetch(here + "mlbook-py.zip").then(function (r) {
          if (!r.ok) throw new Error("could not load mlbook-py.zip (HTTP " + r.status + ")");
          return r.arrayBuffer();
        }).then(function (archive) {
          py.unpackArchive(archive, "zip", { extractDir: "/mlbook-live" });
          py.runPython("import sys\nsys.path.insert(0, '/mlbook-live')\nimport mlbook.common.live");
          var draw = py.pyimport("mlbook.common.live").draw_json;
          stats.python_ready_ms = performance.now();
          stats.boot_ms = stats.python_ready_ms - pythonStarted;
          return draw;
        });
      });
    return pythonReady;
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

  function lastIndex(c) {
    if (c.kind === "select-slider") return c.options.length - 1;
    if (c.scale === "log") return Math.round(Math.log(c.max / c.min) / Math.log(c.step));
    return Math.floor((c.max - c.min) / c.step + 1e-6);
  }

  function fromIndex(c, k) {
    if (c.kind === "select-slider") return optionKey(c.options[k]);
    if (k >= lastIndex(c)) return String(c.max);
    if (c.scale === "log") return String(c.min * Math.pow(c.step, k));
    return String(c.min + k * c.step);
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
    return vega().then(function (embed) {
      if (!spec) return { view: self.view };
      if (self.view) self.view.finalize();
      return embed(self.chart, spec, { actions: false, renderer: "canvas" });
    }).then(function (drawn) {
      self.view = drawn.view;
      if (display && self.command) self.command.textContent = display.command ? "$ " + display.command : "";
      if (display && self.text) self.text.textContent = display.text || "";
      self.el.setAttribute("data-values", JSON.stringify(values));
      self.el.setAttribute("data-result", JSON.stringify(result));
      self.draws += 1;
      self.el.setAttribute("data-draws", String(self.draws));
    });
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

  // A form's bad input (a FieldError): its message next to its control.
  Figure.prototype.fieldError = function (out) {
    this.clearFieldErrors();
    var line = out.field && this.el.querySelector(
      '.mlbook-live-field-error[data-for="' + out.field + '"]');
    if (line) {
      line.textContent = out.message;
      line.hidden = false;
    }
    var input = out.field && this.inputs[out.field];
    if (input) input.setAttribute("aria-invalid", "true");
    this.errors += 1;
    this.el.setAttribute("data-errors", String(this.errors));
    this.el.setAttribute("data-error", JSON.stringify(
      { values: out.values, field: out.field, message: out.message }));
  };

  Figure.prototype.clearFieldErrors = function () {
    Array.prototype.forEach.call(this.el.querySelectorAll(".mlbook-live-field-error"), function (line) {
      line.hidden = true;
      line.textContent = "";
    });
    for (var name in this.inputs) {
      if (this.inputs[name]) this.inputs[name].removeAttribute("aria-invalid");
    }
    this.el.removeAttribute("data-error");
  };

  Figure.prototype.changed = function () {
    if (fromFile) return;
    this.wanted += 1;
    this.changedAt = performance.now();
    if (!this.running) this.run();
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
        input.value = String(out.values[c.name]);
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
        var t0 = performance.now();
        var out = JSON.parse(draw(JSON.stringify(self.call), JSON.stringify(self.values())));
        var pythonMs = performance.now() - t0;
        if (out.error) {
          if ("field" in out) { // a form's bad input: show the values tried, and where
            self.apply(out);
            self.fieldError(out);
          }
          self.fail(out.error);
          return null;
        }
        self.apply(out);
        return self.render(out.result, out.values, out.display || null).then(function () {
          self.failed = false;
          self.message.hidden = true;
          self.message.textContent = "";
          self.clearFieldErrors();
          var ms = performance.now() - started;
          if (first) {
            stats.first_live_ms = performance.now() - firstChange;
            first = false;
          } else {
            stats.draws.push({ id: self.id, ms: ms, python_ms: pythonMs });
          }
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

  // Python takes a few seconds to start (about 1 s from the snapshot an earlier
  // page kept). Started when a reader stops at a figure, it is ready by the time
  // they touch a control, and the first change redraws as fast as the later ones.
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
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
