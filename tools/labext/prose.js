/*
 * mlbook-prose: JupyterLab shows the book's prose as the HTML book does.
 *
 * jupyterlab-myst renders a markdown cell one notebook at a time and knows
 * none of the roles the book's build resolves, so it shows a glued number
 * as its name and format ("mc_waste:.2%"), a citation as its BibTeX key and
 * a reference to another page as its label. This extension rewrites those
 * roles in each cell's parsed MyST tree, before jupyterlab-myst resolves and
 * draws it, with the texts the kernel gives for them
 * (mlbook.prose.texts, asked as a user expression, the way jupyterlab-myst
 * evaluates {eval}): the glued value formatted as the HTML formats it, the
 * citation as "[Young, 1974]", the reference as its target's title. Nothing
 * is written to the notebook.
 *
 * - A glued value is asked for once no code cell above its markdown cell is
 *   still running, and again each time that markdown cell is run (Run All
 *   runs it after the cells above it); until it is known the prose shows
 *   the value's name, in code type. Citations and references are asked for
 *   once the kernel is ready.
 * - A reference to a label the notebook defines itself is left to
 *   jupyterlab-myst; one to another page shows its label until answered.
 * - Until a glued value is known, a line above the notebook says that the
 *   names in code type are numbers the notebook computes when it runs.
 * - Equations are numbered as the HTML book numbers them: "(5.1)" for the
 *   first labelled equation of chapter 5 (the chapter's number asked of the
 *   kernel, from _toc.yml), "(1)" on a page outside the numbered chapters,
 *   and an equation with no label not at all.
 * - The notebook's node carries data-mlbook-prose="asking" while a request
 *   is due or out, "done" once its answer is drawn,
 *   data-mlbook-prose-texts (how many roles it has resolved) and
 *   data-mlbook-prose-unresolved (glued values not yet known), so a test can
 *   wait for it.
 *
 * A second plugin folds each exercise's solution as the HTML book does: the
 * cells between a markdown cell with {solution-start} and the one with
 * {solution-end} (the solution's code, its output and its closing prose)
 * are hidden while the solution's own dropdown, which jupyterlab-myst draws
 * in the first cell, is closed, and shown while it is open. Only the view
 * changes: nothing is written to the notebook's cells or metadata, so a
 * save leaves the page as it was. Each cell of a solution carries
 * data-mlbook-solution (the exercise's id) and the class
 * mlbook-solution-folded while it is hidden.
 *
 * Plain JavaScript with no build step: JupyterLab loads a prebuilt
 * extension as a module-federation container, an object with init(scope),
 * which receives JupyterLab's shared modules, and get(module), which
 * returns the module that lists the plugins. tools/lab_settings.py installs
 * this file as such a container (make install).
 */
(function () {
  "use strict";
  const NAME = "mlbook-prose";
  const GLUE = "glue:text";
  const DEBOUNCE_MS = 100;
  const EXPRESSION = "texts";

  let shared = null; // JupyterLab's share scope, given to init()

  // One of JupyterLab's own modules, as every prebuilt extension gets it
  async function sharedModule(name) {
    const versions = (shared && shared[name]) || {};
    const keys = Object.keys(versions);
    if (keys.length === 0) throw new Error(`${NAME}: JupyterLab shares no ${name}`);
    const key = keys.find(k => versions[k].from === "CORE_FEDERATION")
      || keys.find(k => versions[k].loaded) || keys[0];
    return (await versions[key].get())();
  }

  const states = new WeakMap(); // notebook widget -> its state
  const originals = new WeakMap(); // markdown cell -> its tree as parsed

  function stateOf(notebook) {
    let state = states.get(notebook);
    if (!state) {
      state = {
        texts: new Map(), // "role`body" -> text
        asked: new Set(), // "role`body" asked for, or being asked
        stale: new Set(), // glued values whose cell ran again: ask again
        roles: new Map(), // cell -> Set of the "role`body" it shows
        timer: null,
        out: 0, // requests in flight
      };
      states.set(notebook, state);
    }
    return state;
  }

  const keyOf = (role, body) => `${role}\`${body}`;
  const clone = tree => JSON.parse(JSON.stringify(tree));
  const text = value => ({ type: "text", value });

  // The labels a notebook defines itself: (label)= targets, :label: options
  // and \label{} in math, which jupyterlab-myst resolves on its own.
  function localLabels(notebook) {
    const labels = new Set();
    for (const cell of notebook.widgets) {
      if (cell.model.type !== "markdown") continue;
      const source = cell.model.sharedModel.getSource();
      for (const m of source.matchAll(/^\(([^()\s]+)\)=\s*$/gm)) labels.add(m[1]);
      for (const m of source.matchAll(/^:label:\s*(\S+)\s*$/gm)) labels.add(m[1]);
      for (const m of source.matchAll(/\\label\{([^}]+)\}/g)) labels.add(m[1]);
    }
    return labels;
  }

  // The page's stem, as the book names its pages ("cadence")
  function stemOf(notebook) {
    const panel = notebook.parent;
    const path = (panel && panel.context && panel.context.path) || "";
    return path.split("/").pop().replace(/\.[^.]*$/, "");
  }

  // label -> its number among the notebook's labelled display equations, in
  // page order: a {math} directive's :label: or a $$ block's "(label)"
  function equationNumbers(notebook) {
    const numbers = new Map();
    const pattern = /^[ \t]*(?:`{3,}|:{3,})\{math\}[^\n]*\n[ \t]*:label:[ \t]*(\S+)|\$\$[ \t]*\(([^()\s]+)\)/gm;
    for (const cell of notebook.widgets) {
      if (cell.model.type !== "markdown") continue;
      for (const m of cell.model.sharedModel.getSource().matchAll(pattern)) {
        const label = m[1] || m[2];
        if (!numbers.has(label)) numbers.set(label, numbers.size + 1);
      }
    }
    return numbers;
  }

  // The cell's tree with the book's roles rewritten from the texts known so
  // far; state.roles keeps which roles the cell shows.
  function rewrite(cell, tree, notebook) {
    const state = stateOf(notebook);
    const seen = new Set();
    let labels = null;
    let equations = null;
    const known = (role, body) => {
      const key = keyOf(role, body);
      seen.add(key);
      return state.texts.get(key);
    };
    const replace = node => {
      if (node.type === "mystRole" && node.name === GLUE) {
        const found = known(GLUE, node.value);
        const name = String(node.value).replace(/:[^:]*$/, "");
        return [found === undefined ? { type: "inlineCode", value: name } : text(found)];
      }
      if (node.type === "citeGroup" || (node.type === "cite" && node.label)) {
        const keys = node.type === "cite" ? [node.label]
          : (node.children || []).map(c => c.label);
        const found = known("cite", keys.join(","));
        return [found === undefined ? node : text(found)];
      }
      if (node.type === "crossReference" && node.kind !== "eq") {
        labels = labels || localLabels(notebook);
        const label = node.label || node.identifier;
        if (labels.has(label)) return [node];
        if (node.children && node.children.length) return node.children;
        const found = known("ref", label);
        return [text(found === undefined ? label : found)];
      }
      if (node.type === "mystRole" && node.name === "doc") {
        const found = known("doc", node.value);
        return [text(found === undefined ? node.value : found)];
      }
      if (node.type === "math") {
        const label = node.label || node.identifier;
        const chapter = known("chapter", stemOf(notebook));
        equations = equations || equationNumbers(notebook);
        if (!label || !equations.has(label)) {
          node.enumerated = false; // the HTML numbers labelled equations only
        } else if (chapter !== undefined) {
          const n = equations.get(label);
          node.enumerator = chapter ? `${chapter}.${n}` : String(n);
        }
      }
      visit(node);
      return [node];
    };
    const visit = node => {
      if (node && Array.isArray(node.children)) node.children = node.children.flatMap(replace);
    };
    visit(tree);
    state.roles.set(cell, seen);
    return tree;
  }

  // Rewrite every cell once more from what is now known, and have
  // jupyterlab-myst draw the notebook again (one render redraws them all).
  async function redraw(notebook) {
    let drawn = null;
    for (const cell of notebook.widgets) {
      const original = originals.get(cell);
      if (!original || !cell.fragmentMDAST) continue;
      cell.fragmentMDAST.children = rewrite(cell, clone(original), notebook).children;
      if (!drawn && cell.rendered && cell.isAttached) drawn = cell;
    }
    if (drawn) await drawn.render();
  }

  const NOTE = "Numbers in the text show as their names, in code type, until "
    + "the notebook runs: Run \u203a Run All Cells computes them.";
  const notes = new WeakMap(); // notebook panel -> its note widget
  let Widget = null; // @lumino/widgets' Widget, given in activate

  // The glued values the notebook's prose shows by name, not yet known
  function unresolved(notebook) {
    const state = stateOf(notebook);
    const missing = new Set();
    for (const cell of notebook.widgets) {
      for (const key of state.roles.get(cell) || []) {
        if (key.startsWith(GLUE + "`") && !state.texts.has(key)) missing.add(key);
      }
    }
    return missing.size;
  }

  // A line above the notebook while glued values show as names
  function note(notebook, missing) {
    const panel = notebook.parent;
    if (!panel || !panel.contentHeader || !Widget) return;
    let widget = notes.get(panel);
    if (!widget && missing) {
      const node = document.createElement("div");
      node.className = "mlbook-prose-note";
      node.setAttribute("role", "note");
      node.textContent = NOTE;
      node.title = NOTE;
      widget = new Widget({ node });
      notes.set(panel, widget);
      panel.contentHeader.addWidget(widget);
    }
    if (widget) widget.setHidden(!missing);
  }

  // "asking" while a request is due or out, "done" once its answer is drawn
  function mark(notebook) {
    const state = stateOf(notebook);
    const missing = unresolved(notebook);
    notebook.node.dataset.mlbookProse = state.timer || state.out ? "asking" : "done";
    notebook.node.dataset.mlbookProseTexts = String(state.texts.size);
    notebook.node.dataset.mlbookProseUnresolved = String(missing);
    note(notebook, missing);
  }

  function schedule(notebook) {
    const state = stateOf(notebook);
    if (state.timer) clearTimeout(state.timer);
    state.timer = setTimeout(() => {
      state.timer = null;
      ask(notebook)
        .catch(err => console.warn(`${NAME}: could not show the prose's texts`, err))
        .finally(() => mark(notebook));
    }, DEBOUNCE_MS);
    mark(notebook);
  }

  // Ask the kernel for what the cells show unresolved, in cell order: a glued
  // value only once no code cell above its cell is still running.
  async function ask(notebook) {
    const state = stateOf(notebook);
    const panel = notebook.parent;
    const kernel = panel && panel.sessionContext && panel.sessionContext.session
      && panel.sessionContext.session.kernel;
    if (!kernel) return;
    const roles = [];
    let running = false;
    for (const cell of notebook.widgets) {
      if (cell.model.type === "code" && cell.model.executionState === "running") {
        running = true;
      }
      for (const key of state.roles.get(cell) || []) {
        const glued = key.startsWith(GLUE + "`");
        const due = state.stale.has(key) || !(state.texts.has(key) || state.asked.has(key));
        if (!due || (glued && running)) continue;
        state.asked.add(key);
        state.stale.delete(key);
        const cut = key.indexOf("`");
        roles.push([key.slice(0, cut), key.slice(cut + 1)]);
      }
    }
    if (roles.length === 0) return;
    const page = stemOf(notebook);
    const request = JSON.stringify({ page, roles });
    const expression = "__import__('mlbook.prose', fromlist=['texts'])"
      + `.texts(${JSON.stringify(request)})`;
    state.out += 1;
    try {
      let answer = {};
      try {
        const reply = await kernel.requestExecute({
          code: "", silent: true, store_history: false,
          user_expressions: { [EXPRESSION]: expression },
        }).done;
        const result = reply.content.user_expressions
          && reply.content.user_expressions[EXPRESSION];
        if (result && result.status === "ok") {
          answer = result.data["application/json"] || {};
        }
      } catch (err) {
        // a kernel that restarted or is not Python with mlbook: names stay shown
      }
      let changed = false;
      for (const [key, value] of Object.entries(answer)) {
        if (state.texts.get(key) !== value) {
          state.texts.set(key, value);
          changed = true;
        }
      }
      if (changed) await redraw(notebook);
    } finally {
      state.out -= 1;
    }
  }

  // jupyterlab-myst's markdown cell parses its source in updateFragmentMDAST;
  // rewrite the tree it made, before the notebook's references are resolved.
  function patch(cell) {
    const proto = Object.getPrototypeOf(cell);
    if (typeof proto.updateFragmentMDAST !== "function" || proto.__mlbookProse) return;
    const parse = proto.updateFragmentMDAST;
    proto.updateFragmentMDAST = async function () {
      await parse.call(this);
      const notebook = this.parent;
      if (!this.fragmentMDAST || !notebook || !notebook.widgets) return;
      originals.set(this, clone(this.fragmentMDAST));
      rewrite(this, this.fragmentMDAST, notebook);
      schedule(notebook);
    };
    proto.__mlbookProse = true;
  }

  // Solutions, folded -------------------------------------------------------

  const START = /^[ \t]*(?:`{3,}|:{3,})\{solution-start\}[ \t]*(\S*)/gm;
  const END = /^[ \t]*(?:`{3,}|:{3,})\{solution-end\}/gm;
  const FOLDED = "mlbook-solution-folded";
  const opened = new WeakMap(); // a solution's first cell -> open or not
  const STYLE = `
.jp-Notebook .jp-Cell.${FOLDED} { display: none; }
/* {solution-end} draws as an empty exercise box in jupyterlab-myst */
.jp-Notebook .myst aside.myst-exercise:has(> .myst-exercise-body:empty) { display: none; }
/* the BoxPanel above the notebook sizes its widgets by their min-height */
.mlbook-prose-note { box-sizing: border-box; min-height: 26px; padding: 4px 12px;
  line-height: 18px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis;
  font-size: var(--jp-ui-font-size1); color: var(--jp-ui-font-color1);
  background: var(--jp-info-color3);
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2); }
`;

  // cell -> [the solution's first cell, the exercise's id] for every cell
  // after a {solution-start} up to and including its {solution-end}; and
  // the first cells, each with its id
  function solutions(notebook) {
    const members = new Map();
    const starts = new Map();
    let open = null;
    for (const cell of notebook.widgets) {
      const source = cell.model.type === "markdown"
        ? cell.model.sharedModel.getSource() : "";
      const ends = [...source.matchAll(END)].map(m => m.index);
      const begins = [...source.matchAll(START)];
      if (open) {
        members.set(cell, open);
        if (ends.length) open = null;
      }
      const last = begins[begins.length - 1];
      if (last && !ends.some(i => i > last.index)) {
        open = [cell, last[1] || ""];
        starts.set(cell, last[1] || "");
      }
    }
    return { members, starts };
  }

  // The dropdown jupyterlab-myst draws for a first cell's {solution-start}
  function dropdownOf(cell) {
    const found = [...cell.node.querySelectorAll(".myst details")]
      .filter(d => /solution/i.test((d.querySelector("summary") || d).textContent));
    return found[found.length - 1] || null;
  }

  function fold(notebook) {
    const { members, starts } = solutions(notebook);
    for (const cell of notebook.widgets) {
      const member = members.get(cell);
      const id = member ? member[1] : starts.get(cell);
      const folded = !!member && !opened.get(member[0]);
      cell.node.classList.toggle(FOLDED, folded);
      if (id !== undefined) cell.node.dataset.mlbookSolution = id;
      else delete cell.node.dataset.mlbookSolution;
      if (starts.has(cell)) {
        // a redraw closes the dropdown: keep it as the reader left it
        const dropdown = dropdownOf(cell);
        const open = !!opened.get(cell);
        if (dropdown && dropdown.open !== open) dropdown.open = open;
      }
    }
  }

  function folding(notebook) {
    let timer = null;
    const later = () => {
      if (timer) return;
      timer = setTimeout(() => { timer = null; fold(notebook); }, 30);
    };
    // toggle does not bubble: listen while it goes down to the <details>
    notebook.node.addEventListener("toggle", event => {
      const details = event.target;
      if (!(details instanceof HTMLDetailsElement)) return;
      const cell = notebook.widgets.find(c => c.node.contains(details));
      if (!cell || dropdownOf(cell) !== details) return;
      if (!!opened.get(cell) === details.open) return;
      opened.set(cell, details.open);
      fold(notebook);
    }, true);
    new MutationObserver(later).observe(notebook.node, { childList: true, subtree: true });
    notebook.model && notebook.model.contentChanged.connect(later);
    notebook.modelChanged.connect(() => {
      if (notebook.model) notebook.model.contentChanged.connect(later);
      later();
    });
    fold(notebook);
  }

  function plugins(notebookModule, widgets) {
    const { NotebookActions, NotebookPanel, INotebookTracker } = notebookModule;
    Widget = widgets.Widget;
    return [{
      id: `${NAME}:plugin`,
      description: "Shows the book's glued numbers, citations and references as text",
      autoStart: true,
      requires: [NotebookPanel.IContentFactory, INotebookTracker],
      activate: (app, factory, tracker) => {
        const create = factory.createMarkdownCell.bind(factory);
        factory.createMarkdownCell = options => {
          const cell = create(options);
          patch(cell);
          return cell;
        };
        tracker.widgetAdded.connect((_, panel) => {
          panel.sessionContext.ready.then(() => schedule(panel.content));
        });
        NotebookActions.executed.connect((_, { notebook, cell }) => {
          if (cell.model.type === "markdown") {
            // run again: the values it quotes may have changed
            const state = stateOf(notebook);
            for (const key of state.roles.get(cell) || []) {
              if (key.startsWith(GLUE + "`")) state.stale.add(key);
            }
          }
          schedule(notebook);
        });
      },
    }, {
      id: `${NAME}:solutions`,
      description: "Folds each exercise's solution, its code and output included",
      autoStart: true,
      requires: [INotebookTracker],
      activate: (app, tracker) => {
        const style = document.createElement("style");
        style.dataset.mlbook = "solutions";
        style.textContent = STYLE;
        document.head.appendChild(style);
        tracker.widgetAdded.connect((_, panel) => folding(panel.content));
      },
    }];
  }

  window._JUPYTERLAB = window._JUPYTERLAB || {};
  window._JUPYTERLAB[NAME] = {
    init: scope => { shared = scope; },
    get: async module => {
      if (module !== "./extension") throw new Error(`${NAME} has no module ${module}`);
      const list = plugins(
        await sharedModule("@jupyterlab/notebook"),
        await sharedModule("@lumino/widgets"),
      );
      return () => ({ __esModule: true, default: list });
    },
  };
})();
