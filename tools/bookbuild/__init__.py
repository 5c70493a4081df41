"""Execute every chapter with papermill, then build the HTML book from the
executed copies with warnings as errors.

    python tools/build.py               # reader sizes -> _build/book/_build/html
    python tools/build.py --small       # test sizes   -> _build/test/_build/html
    python tools/build.py --only mfu    # one chapter (the others appear as titles)
    python tools/build.py --no-cache    # execute every page, even unchanged ones
    python tools/build.py --jobs 4      # four chapters at a time, on their own cores
    python tools/build.py --repeat 10 --only capstone  # 10 runs: passes, spreads

Pages. Chapters are MyST text notebooks in notebooks/; book/ holds the other
pages, of which those whose front matter names a kernel execute too. Each
executable page is converted to .ipynb (jupytext), executed by papermill with
its `parameters` cell overridden (SMALL=True for --small), and written into a
staging copy of the book (<dest>/src) that holds only the executed .ipynb, so
Sphinx never sees two sources for one page. The book is then built there with
`jupyter-book build --all -W -n --keep-going`.

Glued values. Every executed page's glued values go to
<dest>/values/<page>.json (page = file stem), name -> value: numbers as
numbers, labels as strings (`read_values(dest, page)`). A value whose stored
text is not a plain Python literal number or string (a numpy scalar, a dict,
a figure) fails its page, naming the page and the glue: the book glues plain
numbers and short labels only.

Cache. The command line keeps every successfully executed page under
<dest>/cache/ with the key it was executed under: a hash of everything the
execution depends on, listed by name in <dest>/cache/<page>.json:

  - the page's source (prose included: the executed notebook carries it);
  - the `mlbook` files the page imports, found with `ast` from its code cells
    and followed through the package's own imports (absolute, relative,
    `from mlbook.x import y` with y a submodule, string module names such as
    torchrun's "mlbook.faults.elastic_script", and "name.py" strings); the
    whole package when an import cannot be resolved or is computed at run
    time; the package's non-Python files always;
  - requirements.txt, the Python version and the installed torch build
    (its version from importlib.metadata, "+cpu" or "+cu126");
  - the parameters (SMALL), the visible GPUs and CPU model (DEVICE="auto"
    resolves on them), and the cores and threads each job gets.

A page whose key is unchanged is not executed: its cached notebook goes into
the build. A failed execution is never cached. --no-cache executes every page
(and refreshes the cache with the successes); `build()` called from Python
(the test build, `make test`) does not read the cache unless asked. Deleting
_build/ gives a full build. When every page came from the cache and the
staged sources are byte-identical to those of the last HTML build that had no
warnings, the HTML is not built again; any change rebuilds all of it (a fresh
Sphinx environment, so every page's warnings are seen again).

Pages stand alone. No page reads another page's glued values: each
computes what it quotes from the package (or the kept measurements under
book/measured/), so pages execute in any order, and --only executes exactly
the pages named.

Timings. <dest>/timings.json records, per page: "seconds" (the execution time
of the notebook in this build, measured when it was executed), "cached"
(true: taken from the cache), "this_run_s" (the time this run spent on it),
"error", "key", "retry" (the first attempt of a page run twice), and
"stacks" (the watchdogs' logs of a page that failed or was retried); and for
the run: the jobs, each job's CPUs and threads.

Watchdogs. Every kernel the build starts logs each cell's start and end and,
when a cell runs past execution.KERNEL_WATCHDOG_S, its threads' stacks and
its descendant processes; the client dumps its own stacks shortly before a
cell times out (execution.py, kernel_watchdog.py). The logs go to the folder
MLBOOK_STACKS_DIR names, which the page's own processes read too
(mlbook.common.stacks); `--repeat` keeps them for every run that failed.

Jobs. With --jobs N > 1, N pages execute at once, each in its own process
pinned (sched_setaffinity, inherited by its kernel and any workers it starts)
to its own set of whole physical cores, with OMP_NUM_THREADS (and MKL/OpenBLAS)
set to that many threads, and, on a machine with GPUs, its own GPU through
CUDA_VISIBLE_DEVICES. So a chapter's timing cells never share a core (or a
GPU, unless there are more jobs than GPUs: then a warning) with another
chapter. The default is 1 on a machine with 2 or fewer CPUs, else one job per
4 physical cores (so each chapter still measures on at least 4), and no more
jobs than GPUs. With one job, pages execute in this process's kernel
children with the machine as it is (no pinning, no thread settings).

Modules, each owning one role:

    paths       the repository root, what is staged, an atomic write
    pages       the executable pages, their front matter, order, staging, stubs
    archive     the zip of mlbook's torch-free modules the live figures import
    values      glued values: read from executed notebooks, written, read back
    machine     cores, GPUs, the CPU model, the jobs' CPUs and threads
    caching     what an execution depends on, its key, the cache of notebooks
    execution   one page under papermill, its retry, the hidden parameters cell,
                the live figures' widget state taken out
    htmlbook    jupyter-book with warnings as errors, reused when unchanged
    run         build(): the pages executed in order, then the HTML
    repeat      --repeat N: pages executed N times, pass counts and spreads of
                the asserted quantities (its docstring: how pages name them)
    kernel_watchdog  run in each kernel: cell log, stacks of a cell that hangs
    cli         the command line
"""

from .run import build
from .values import read_values

__all__ = ["build", "read_values"]
