// Python for the HTML book's live figures, in a worker of its own (a module
// worker that live.js starts, served beside it as <book>/vendor/live-worker.js).
//
// Starting Pyodide is seconds of work: compiling its WebAssembly and starting
// Python. On the page's own thread that froze the page for all of it (a
// control moved in the meantime did nothing, and the figure could not say it
// was redrawing); here the page stays live while Python starts, and each draw
// runs here too.
//
// Messages from live.js:
//   {type: "start", indexURL, archiveURL, modules}: start Pyodide (from the
//     memory snapshot an earlier page kept, see startPyodide), unpack the
//     book's torch-free modules (mlbook-py.zip), import mlbook.common.live
//     and the page's figures' modules; answers {type: "ready", python_start,
//     snapshot_refused, import_ms} or {type: "failed", message}, and later
//     {type: "snapshot", bytes} once a fresh start has kept its copy;
//   {type: "draw", id, call, values}: mlbook.common.live.draw_json(call,
//     values), answered {type: "drawn", id, text, python_ms} or {type:
//     "drawn", id, error}.

// The first page a reader opens keeps a copy of the interpreter's memory as
// it stands after Python's own start (Pyodide's memory snapshot, before any of
// the book's code is loaded) in IndexedDB, under Pyodide's version; every later
// page starts from that copy. A copy that does not restore (another Pyodide
// build, storage refused) is dropped and Python starts as on the first page.
const SNAPSHOTS = { db: "mlbook-live", store: "pyodide-snapshots" };

function snapshotStore(mode) {
  return new Promise((resolve, reject) => {
    if (!self.indexedDB) { reject(new Error("no IndexedDB")); return; }
    const open = self.indexedDB.open(SNAPSHOTS.db, 1);
    open.onupgradeneeded = () => { open.result.createObjectStore(SNAPSHOTS.store); };
    open.onerror = () => { reject(open.error); };
    open.onsuccess = () => {
      const db = open.result;
      const tx = db.transaction(SNAPSHOTS.store, mode);
      tx.oncomplete = tx.onabort = () => { db.close(); };
      resolve(tx.objectStore(SNAPSHOTS.store));
    };
  });
}

function request(make) {
  return store => new Promise((resolve, reject) => {
    const r = make(store);
    r.onsuccess = () => { resolve(r.result); };
    r.onerror = () => { reject(r.error); };
  });
}

function storedSnapshot(key) {
  return snapshotStore("readonly")
    .then(request(s => s.get(key)))
    .catch(() => undefined);
}

function keepSnapshot(key, bytes) {
  return snapshotStore("readwrite")
    .then(request(s => { s.clear(); return s.put(bytes, key); }))
    .then(() => { postMessage({ type: "snapshot", bytes: bytes.length }); })
    .catch(() => {});
}

function dropSnapshot(key) {
  return snapshotStore("readwrite")
    .then(request(s => s.delete(key)))
    .catch(() => {});
}

const started = { python_start: null, snapshot_refused: null };

async function startPyodide(mod, options) {
  const key = "pyodide " + mod.version;
  const fresh = async () => {
    started.python_start = "fresh";
    const py = await mod.loadPyodide({ _makeSnapshot: true, ...options });
    let bytes = null;
    try { bytes = py.makeMemorySnapshot(); } catch (e) { /* started; no copy kept */ }
    if (bytes) setTimeout(() => { keepSnapshot(key, bytes); }, 0);
    return py;
  };
  const bytes = await storedSnapshot(key);
  if (!bytes) return fresh();
  try {
    const py = await mod.loadPyodide({ _loadSnapshot: bytes, ...options });
    started.python_start = "snapshot";
    return py;
  } catch (e) {
    started.snapshot_refused = String((e && e.message) || e).slice(0, 200);
    await dropSnapshot(key);
    return fresh();
  }
}

let draw = null;

async function start(message) {
  const mod = await import(message.indexURL + "pyodide.mjs");
  // packageBaseUrl: packages (none is loaded) would come from the book too,
  // never from the CDN that pyodide.mjs names as its default
  const py = await startPyodide(mod, {
    indexURL: message.indexURL, packageBaseUrl: message.indexURL,
    stdout: () => {}, stderr: () => {},
  });
  const response = await fetch(message.archiveURL);
  if (!response.ok) {
    throw new Error(`could not load mlbook-py.zip (HTTP ${response.status})`);
  }
  py.unpackArchive(await response.arrayBuffer(), "zip", { extractDir: "/mlbook-live" });
  py.runPython("import sys\nsys.path.insert(0, '/mlbook-live')\nimport mlbook.common.live");
  draw = py.pyimport("mlbook.common.live").draw_json;
  // the page's figures' modules now, not at the first change: Python compiles
  // each from source (the plan page's planner imports five chapters' formulas)
  const t0 = performance.now();
  for (const name of message.modules || []) py.pyimport(name);
  return { ...started, import_ms: performance.now() - t0 };
}

self.onmessage = event => {
  const message = event.data;
  if (message.type === "start") {
    start(message).then(
      info => { postMessage({ type: "ready", ...info }); },
      err => { postMessage({ type: "failed", message: String((err && err.message) || err) }); },
    );
  } else if (message.type === "draw") {
    try {
      const t0 = performance.now();
      const text = draw(message.call, message.values);
      postMessage({ type: "drawn", id: message.id, text, python_ms: performance.now() - t0 });
    } catch (err) {
      postMessage({ type: "drawn", id: message.id, error: String((err && err.message) || err) });
    }
  }
};
