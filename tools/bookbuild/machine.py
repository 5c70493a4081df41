"""The machine a build runs on and how its jobs share it: physical cores,
the NVIDIA GPUs the driver lists (without importing torch), the CPU model,
the default number of jobs, each job's CPUs and thread settings, and the
initializer that pins a job process to them."""

from __future__ import annotations

import os
from pathlib import Path

# the CPUs this process may use, and the CPU's model name, as the package reads them
from mlbook.common.accelerators import cpu_model as cpu_model
from mlbook.common.accelerators import usable_cpus

CORES_PER_JOB = (
    4  # the default --jobs gives each chapter at least this many physical cores
)

# The variables that cap the instruction sets torch's CPU kernels use (oneDNN for
# matmuls and convolutions, ATen's own vectorised kernels, MKL), and the caps
# tools/build.py --isa-cap sets: on an Intel CPU with AMX they make it compute as
# a CPU without AMX (avx512_bf16) or with AVX2 only (avx2) would. A cap only
# takes instructions away. Measured on such a CPU, one thread, a 1024^3 matmul:
# fp32 / bf16 GFLOP/s 139 / 988 uncapped, 138 / 81 at avx512_bf16, 91 / 1 at avx2.
ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
ISA_CAPS = {
    "avx512_bf16": {
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16",
        "ATEN_CPU_CAPABILITY": "avx512",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512",
    },
    "avx2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
}


def isa_settings() -> dict:
    """The ISA-cap variables as this process's environment sets them (None
    where unset): part of every page's cache key, since they change what the
    kernels measure."""
    return {name: os.environ.get(name) for name in ISA_VARIABLES}


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
    for cpu in sorted(usable_cpus()):
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
    if len(usable_cpus()) <= 2:
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
