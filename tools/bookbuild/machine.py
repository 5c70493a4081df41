"""The machine a build runs on and how its jobs share it: physical cores,
the NVIDIA GPUs the driver lists (without importing torch), the CPU model,
the default number of jobs, each job's CPUs and thread settings, and the
initializer that pins a job process to them."""

from __future__ import annotations

import os
from pathlib import Path

CORES_PER_JOB = (
    4  # the default --jobs gives each chapter at least this many physical cores
)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def gpu_models() -> list[str]:
    """The NVIDIA GPUs the driver lists, by model, without importing torch."""
    models = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            model = next(
                (
                    line.split(":", 1)[1].strip()
                    for line in info.read_text().splitlines()
                    if line.startswith("Model:")
                ),
                "unknown",
            )
        except OSError:
            model = "unknown"
        models.append(model)
    if (
        not models
    ):  # a container may show the device nodes without the driver's /proc entries
        models = ["nvidia (model unknown)" for dev in Path("/dev").glob("nvidia[0-9]*")]
    return models


def physical_cores() -> list[list[int]]:
    """The CPUs this process may use, grouped by physical core (hyperthreads
    of one core together); each CPU alone when the topology is unknown."""
    groups: dict[tuple, list[int]] = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            core = (
                (topo / "physical_package_id").read_text().strip(),
                (topo / "core_id").read_text().strip(),
            )
        except OSError:
            core = ("cpu", str(cpu))
        groups.setdefault(core, []).append(cpu)
    return sorted(groups.values())


def default_jobs() -> int:
    """1 on two CPUs or fewer; else one job per CORES_PER_JOB physical cores,
    and no more jobs than GPUs on a machine that has any."""
    if len(os.sched_getaffinity(0)) <= 2:
        return 1
    jobs = max(1, len(physical_cores()) // CORES_PER_JOB)
    gpus = len(gpu_models())
    return min(jobs, gpus) if gpus else jobs


def plan_jobs(jobs: int) -> list[dict]:
    """Each job's CPUs (None: unpinned) and environment."""
    if jobs <= 1:
        return [{"cpus": None, "env": {}}]
    cores = physical_cores()
    per = len(cores) // jobs
    if per < 1:
        raise SystemExit(
            f"--jobs {jobs}: this machine has {len(cores)} physical cores to give; "
            "each job needs at least one to itself"
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = (
        [g for g in visible.split(",") if g.strip()]
        if visible is not None
        else [str(i) for i in range(len(gpu_models()))]
    )
    if gpus and jobs > len(gpus):
        print(
            f"warning: {jobs} jobs share {len(gpus)} GPU(s): "
            "GPU timings are not isolated",
            flush=True,
        )
    plan = []
    for i in range(jobs):
        cpus = sorted(c for core in cores[i * per : (i + 1) * per] for c in core)
        threads = str(per)
        env = {
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
        }
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
        plan.append({"cpus": cpus, "env": env})
    return plan


def pin(cpus: list[int], env: dict) -> None:
    """A job process's initializer: its CPUs and environment, which its
    kernels and their children inherit."""
    os.sched_setaffinity(0, cpus)
    os.environ.update(env)
