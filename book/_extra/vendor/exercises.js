/* The book's answer boxes: checked in the page, from the data the build wrote
 * into it (tools/bookext/exercises.py), so they work opened from file://.
 *
 * judge() is mlbook.judge.judge step for step, on the same data (the
 * key, the tolerance, each named mistake's value and hint, the sentences of
 * a verdict): tests/test_exercises_js.py feeds both the same answers and
 * compares the verdicts. A "predict" exercise folds the cells tagged
 * after-prediction that follow it until a prediction is entered or the
 * reader opens them; a prediction entered is shown next to what the build's
 * run measured (spec.run) with the reason the record gives for it
 * (compare() and reason(), as mlbook.judge._core's).
 */
(function () {
  "use strict";

  function format(template, values) {
    return template.replace(/\{(\w+)\}/g, function (_, k) { return String(values[k]); });
  }

  function size(ratio, sizes) {
    for (var i = 0; i < sizes.length; i++) {
      if (sizes[i][0] === null || ratio <= sizes[i][0]) return sizes[i][1];
    }
    return sizes[sizes.length - 1][1];
  }

  function judgeChoice(answer, value, messages) {
    var order = answer.options.map(function (o) { return o.name; });
    var picked = order.filter(function (o) { return value.indexOf(o) >= 0; });
    var key = answer.key;
    var same = function (a, b) { return a.length === b.length && a.every(function (x, i) { return x === b[i]; }); };
    if (same(picked, key)) return {name: answer.name, correct: true, hint: messages.correct, mistake: null};
    for (var i = 0; i < answer.mistakes.length; i++) {
      var m = answer.mistakes[i];
      if (same(picked, m.value)) {
        return {name: answer.name, correct: false, mistake: m.name,
                hint: format(messages.mistake, {name: m.name, hint: m.hint})};
      }
    }
    var parts = [];
    if (picked.length !== key.length) parts.push(format(messages.choice_count, {n: key.length, m: picked.length}));
    var wrong = answer.options.filter(function (o) { return picked.indexOf(o.name) >= 0 && key.indexOf(o.name) < 0; });
    wrong.forEach(function (o) { parts.push(o.hint || format(messages.choice_wrong, {label: o.label})); });
    var missing = key.filter(function (k) { return picked.indexOf(k) < 0; }).length;
    if (!wrong.length && missing) parts.push(format(messages.choice_missing, {n: missing}));
    return {name: answer.name, correct: false, hint: parts.join(" "), mistake: null};
  }

  /* The number of significant figures (1 or 2) to which value is key
   * rounded, or null: mlbook.judge._core.rounded_to. value has that many
   * figures and lies within half a unit of its last figure of the key. */
  function roundedTo(value, key) {
    var roundings = [1, 2];  // _core.ROUNDINGS
    for (var i = 0; i < roundings.length; i++) {
      var n = roundings[i];
      var text = value.toExponential(n - 1);
      if (Number(text) !== value || value === 0) continue;
      var unit = Math.pow(10, parseInt(text.split("e")[1], 10) - n + 1);
      if (Math.abs(value - key) <= 0.5 * unit * (1 + 1e-9)) return n;
    }
    return null;
  }

  /* The verdict on one answer: value is a number (or, for a choice, a list
   * of option names). Mirrors mlbook.judge._core.judge. */
  function judge(answer, value, messages, sizes) {
    var key = answer.key, type = answer.type, tol, right;
    if (type === "choice") return judgeChoice(answer, value, messages);
    if (type === "real") {
      tol = answer.rel_tol;
      right = Math.abs(value - key) <= tol * Math.abs(key);
    } else {
      tol = 0;
      right = value === key;
    }
    if (right) return {name: answer.name, correct: true, hint: messages.correct, mistake: null};
    for (var i = 0; i < answer.mistakes.length; i++) {
      var m = answer.mistakes[i], v = m.value;
      var hit = type === "real" ? Math.abs(value - v) <= tol * Math.abs(v) : value === v;
      if (hit) {
        return {name: answer.name, correct: false, mistake: m.name,
                hint: format(messages.mistake, {name: m.name, hint: m.hint})};
      }
    }
    if (type === "real") {
      var n = roundedTo(value, key);
      if (n !== null) {
        return {name: answer.name, correct: false, mistake: null,
                hint: format(messages.rounding, {n: n, figures: n === 1 ? "figure" : "figures"})};
      }
    }
    if ((key > 0 && value <= 0) || (key < 0 && value >= 0)) {
      return {name: answer.name, correct: false, hint: messages.sign, mistake: null};
    }
    var high = value > key, phrase;
    if (key === 0) {
      phrase = "";
    } else {
      var q = value / key;  // positive: the same sign as the key
      phrase = size(q >= 1 ? q : 1 / q, sizes);
    }
    return {name: answer.name, correct: false, mistake: null,
            hint: format(high ? messages.high : messages.low, {size: phrase})};
  }

  /* A number as a prediction's verdict shows it: mlbook.judge._core.shown
   * (three significant figures, ties away from zero as toFixed rounds,
   * thousands separated, a fraction as a percentage). */
  function shown(value, unit) {
    if (unit === "fraction") { value = value * 100; unit = "%"; }
    var digits = value ? Math.max(0, 2 - parseInt(value.toExponential(2).split("e")[1], 10)) : 0;
    var text = value.toFixed(digits);
    if (text.indexOf(".") >= 0) text = text.replace(/0+$/, "").replace(/\.$/, "");
    var parts = text.split(".");
    parts[0] = parts[0].replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return (parts.join(".") + " " + unit).trim();
  }

  /* A prediction next to what the run measured: mlbook.judge._core.compare. */
  function compare(answer, said, run, messages, sizes) {
    var measured = run[answer.name], how;
    var close = Math.abs(said - measured) <= answer.rel_tol * Math.abs(measured);
    if (close) {
      how = messages.close;
    } else if ((measured > 0 && said <= 0) || (measured < 0 && said >= 0)) {
      how = messages.sign;
    } else {
      var q = measured ? said / measured : 1;
      var phrase = measured ? size(Math.max(q, 1 / q), sizes) : "";
      how = format(said > measured ? messages.high : messages.low, {size: phrase});
    }
    return {name: answer.name, correct: close, mistake: null,
            hint: format(messages.predicted, {said: shown(said, answer.unit),
                                              measured: shown(measured, answer.unit), how: how})};
  }

  /* The sentence of the first reason whose conditions hold on the run:
   * mlbook.judge._core.reason. */
  var OPERATORS = {"<": function (a, b) { return a < b; }, "<=": function (a, b) { return a <= b; },
                   ">": function (a, b) { return a > b; }, ">=": function (a, b) { return a >= b; }};
  function reason(reasons, run) {
    for (var i = 0; i < reasons.length; i++) {
      var holds = reasons[i].when.every(function (c) {
        return OPERATORS[c[1]](run[c[0]], typeof c[2] === "string" ? run[c[2]] : c[2]);
      });
      if (holds) return reasons[i].sentence;
    }
    return null;
  }

  /* A typed answer as {value} or {error}: mlbook.judge._core.read_number
   * rule for rule (and message for message): digits with an optional sign,
   * decimals and exponent; thousands separators (commas, spaces,
   * underscores) are dropped. A trailing "%" divides by 100
   * where a fraction is asked ("55.9%" is 0.559, the point moved in the
   * text, so exactly) and is the unit itself where a percentage is. */
  // A typed number's text without its digit grouping (mlbook.common.validate's
  // number_text, rule for rule): spaces and underscores dropped, commas where
  // they group thousands (16,384); a decimal comma (0,49) is refused with the
  // message every place a number is typed gives.
  var GROUPED = /^[+-]?[1-9][0-9]{0,2}(?:,[0-9]{3})+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?%?$/;
  var DECIMAL = /^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?%?$/;

  function numberText(text, messages) {
    var t = String(text).replace(/[\s\u00a0\u202f_]/g, "");
    if (t.indexOf(",") < 0 || GROUPED.test(t)) return {text: t.replace(/,/g, "")};
    var cut = t.lastIndexOf(",");
    var point = t.slice(0, cut).replace(/,/g, "") + "." + t.slice(cut + 1);
    if (DECIMAL.test(point)) {
      return {error: format(messages.comma, {point: point, typed: String(text).trim()})};
    }
    return {text: t};
  }

  function readNumber(text, unit, whole, messages) {
    var grouped = numberText(text, messages);
    if (grouped.error) return {error: grouped.error};
    var t = grouped.text;
    if (!t) return {error: format(messages.empty, {unit: unit})};
    var percent = t.charAt(t.length - 1) === "%";
    if (percent) {
      if (unit !== "fraction" && unit !== "%") return {error: format(messages.percent_here, {unit: unit})};
      t = t.slice(0, -1);
    }
    var m = /^([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?$/.exec(t);
    if (m && percent && unit === "fraction") t = m[1] + m[2] + "e" + (parseInt(m[3] || "0", 10) - 2);
    if (!m || !isFinite(Number(t))) return {error: messages.not_a_number};
    var value = Number(t);
    if (whole && !Number.isInteger(value)) return {error: format(messages.whole, {unit: unit})};
    return {value: value};
  }

  function readAnswer(form, answer, messages) {
    var box = form.querySelector('[data-answer="' + answer.name + '"]');
    if (answer.type === "choice") {
      var picked = [];
      box.querySelectorAll("input[type=checkbox]").forEach(function (c) { if (c.checked) picked.push(c.value); });
      return {box: box, value: picked};
    }
    var read = readNumber(box.querySelector("input").value, answer.unit,
                          answer.type === "integer", messages);
    read.box = box;
    return read;
  }

  function show(box, cls, text) {
    var out = box.querySelector(".mlbook-verdict");
    box.classList.remove("mlbook-correct", "mlbook-wrong", "mlbook-invalid", "mlbook-recorded", "mlbook-compared");
    if (cls) box.classList.add(cls);
    out.textContent = text;
  }

  var folds = {};  // exercise id -> the folded cells that wait for its prediction

  function reveal(id) {
    (folds[id] || []).forEach(function (f) {
      f.cell.classList.remove("mlbook-folded");
      if (f.note.parentNode) f.note.parentNode.removeChild(f.note);
    });
    folds[id] = [];
  }

  function stopsFold(el) {
    return !el || /^(H[1-6]|SECTION)$/.test(el.tagName) || el.classList.contains("cell") ||
      el.classList.contains("exercise") || el.classList.contains("mlbook-answers");
  }

  function fold(block, id) {
    /* The cells tagged after-prediction between this block and the next
     * exercise block belong to this prediction: each is folded with the
     * prose that follows it, up to the next cell, heading or exercise (the
     * paragraph that quotes the measured numbers); a run of such cells, one
     * right after another, gets one note. */
    var all = document.querySelectorAll(".mlbook-answers, .tag_after-prediction");
    var mine = false, note = null, last = null;
    folds[id] = [];
    all.forEach(function (el) {
      if (el === block) { mine = true; return; }
      if (el.classList.contains("mlbook-answers")) { mine = false; return; }
      if (!mine) return;
      /* cells that follow one another share one note and one button */
      if (!note || el.previousElementSibling !== last) {
        note = document.createElement("div");
        note.className = "mlbook-fold-note";
        var p = document.createElement("p");
        p.textContent = "The measured result is folded until you have written down a prediction (exercise " + id + " above).";
        var button = document.createElement("button");
        button.type = "button";
        button.className = "mlbook-reveal";
        button.textContent = "Show the result";
        button.addEventListener("click", function () { reveal(id); });
        note.appendChild(p);
        note.appendChild(button);
        el.parentNode.insertBefore(note, el);
      }
      var folded = [el];
      for (var next = el.nextElementSibling; !stopsFold(next); next = next.nextElementSibling) folded.push(next);
      var shared = note;
      folded.forEach(function (f) {
        f.classList.add("mlbook-folded");
        folds[id].push({cell: f, note: shared});
      });
      last = folded[folded.length - 1];
    });
  }

  function setUp(block) {
    var script = block.querySelector("script.mlbook-exercise-spec");
    if (!script) return;
    var spec = JSON.parse(script.textContent);
    var form = block.querySelector("form.mlbook-answer-form");
    if (spec.kind === "predict") fold(block, spec.id);
    if (!form) return;
    block.querySelectorAll("button.mlbook-reveal").forEach(function (b) {
      b.addEventListener("click", function () { reveal(spec.id); });
    });
    var because = block.querySelector(".mlbook-because");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var allGood = true;
      if (because) because.textContent = "";
      spec.answers.forEach(function (answer) {
        var read = readAnswer(form, answer, spec.messages);
        if (read.error) { show(read.box, "mlbook-invalid", read.error); allGood = false; return; }
        if (spec.kind === "predict" && spec.run) {
          show(read.box, "mlbook-compared", compare(answer, read.value, spec.run, spec.messages, spec.sizes).hint);
          return;
        }
        if (spec.kind === "predict" || !spec.checked) {
          show(read.box, "mlbook-recorded", "Recorded: " + (Array.isArray(read.value) ? read.value.join(", ") : read.value) + ".");
          return;
        }
        var v = judge(answer, read.value, spec.messages, spec.sizes);
        show(read.box, v.correct ? "mlbook-correct" : "mlbook-wrong", (v.correct ? "✓ " : "✗ ") + v.hint);
        allGood = allGood && v.correct;
      });
      if (spec.kind === "predict" && allGood) {
        if (spec.run && because) because.textContent = format(spec.messages.because, {why: reason(spec.reasons, spec.run)});
        reveal(spec.id);
      }
      block.classList.toggle("mlbook-solved", spec.kind !== "predict" && allGood);
    });
  }

  function init() {
    document.querySelectorAll(".mlbook-answers").forEach(setUp);
  }

  window.mlbookExercises = {judge: judge, readNumber: readNumber, compare: compare, reason: reason, shown: shown};
  if (typeof document !== "undefined") {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
    else init();
  }
})();
