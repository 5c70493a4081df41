"""What the faults chapter prints and glues, one function per section.

Each ``*_report`` function takes the results a cell computed and returns a
``Report``: the lines the cell prints (each at most 90 characters) and the
values it glues into the prose, as ``name -> (value, format)``
(``mlbook.page.Report``). The page calls ``report.show()``, so the
cells stay short and every sentence that could differ between runs is chosen
here from the measured result.
"""

from __future__ import annotations

import numpy as np

from mlbook.faults import formulas as faults
from mlbook.page import Report

WIDTH = 90


# ---------------------------------------------------------------------------
# Failures are the normal state
# ---------------------------------------------------------------------------

def llama3_report(log=faults.LLAMA3_405B_LOG, rows=faults.LLAMA3_INTERRUPTIONS) -> Report:
    """The Llama 3 405B fault log, by category, with counted and printed shares."""
    r = Report()
    by_cat = faults.interruptions_by_category(rows)
    count_sum = sum(x.count for x in rows)
    hw = (by_cat["GPU"] + by_cat["Host"] + by_cat["Network"]) / log.unexpected
    fgpu = rows[0]
    mtbi = faults.mean_hours_between(log.unexpected, log.days)
    r.say(f"{log.name}: {log.interruptions} interruptions in {log.days} days "
          f"on {log.gpus:,} GPUs")
    r.say(f"  {log.planned} planned, {log.unexpected} unexpected; "
          f"table rows sum to {count_sum}")
    for cat, n in by_cat.items():
        r.say(f"  {cat:<22} {n:>4}  {n / log.unexpected:6.1%}")
    r.say(f"mean time between unexpected interruptions: {mtbi:.2f} h")
    r.put("l3_days", log.days, "g")
    r.put("l3_gpus", log.gpus, ",")
    r.put("l3_total", log.interruptions, "d")
    r.put("l3_planned", log.planned, "d")
    r.put("l3_unexpected", log.unexpected, "d")
    r.put("l3_rowsum", count_sum, "d")
    r.put("l3_mtbi_h", mtbi, ".1f")
    r.put("l3_mtbi_all_h", faults.mean_hours_between(log.interruptions, log.days), ".1f")
    r.put("l3_gpu_counted", by_cat["GPU"] / log.unexpected, ".1%")
    r.put("l3_gpu_printed", sum(x.printed_share for x in rows if x.category == "GPU"), ".1%")
    r.put("l3_gpu_stated", log.stated_gpu_share, ".1%")
    r.put("l3_hw_counted", hw, ".1%")
    r.put("l3_hw_stated", log.stated_hardware_share, ".0%")
    r.put("l3_manual", log.manual_interventions, "d")
    r.put("l3_effective", log.stated_effective_training_time, ".0%")
    r.put("l3_fgpu_n", fgpu.count, "d")
    r.put("l3_fgpu_printed", fgpu.printed_share, ".1%")
    r.put("l3_fgpu_counted", fgpu.count / log.unexpected, ".1%")
    r.put("l3_sdc", next(x.count for x in rows if x.component == "Silent data corruption"), "d")
    return r


# ---------------------------------------------------------------------------
# Stragglers
# ---------------------------------------------------------------------------

def straggler_report(times: np.ndarray, n_big: int = 1024, speed: float = 0.8,
                     sigma: float = 0.05, delta: float = 0.10) -> Report:
    """Closed-form straggler costs at ``n_big`` ranks, and the Monte Carlo
    ``times`` (steps x ranks, simulated with ``delta`` and ``sigma``) against
    the integral."""
    r = Report()
    d80 = faults.delta_from_speed(speed)
    slow80 = faults.straggler_slowdown(n_big, d80, sigma=0.0)
    lost80 = faults.throughput_lost(n_big, d80, sigma=0.0)
    tax = faults.barrier_tax(n_big, sigma)
    hide = faults.straggler_slowdown(n_big, delta, sigma)
    steps, n_mc = times.shape
    mc, exact = times.max(axis=1).mean(), faults.expected_step_time(n_mc, delta, sigma)
    r.say(f"one rank at {speed:.0%} speed, no spread: step time +{slow80:.1%}, "
          f"throughput -{lost80:.1%}")
    r.say(f"N={n_big}, sigma={sigma:.0%}: the barrier alone costs +{tax:.1%} over the mean rank")
    r.say(f"N={n_big}, sigma={sigma:.0%}: a rank {delta:.0%} slow costs +{hide:.2%} per step")
    r.say(f"N={n_mc}, delta={delta:.0%}, sigma={sigma:.0%}, {steps} steps: "
          f"Monte Carlo {mc:.4f} vs integral {exact:.4f} (ratio {mc / exact:.4f})")
    r.put("st_speed", speed, ".0%")
    r.put("st_factor", 1 / speed, ".2f")
    r.put("st_n", n_big, ",")
    r.put("st_sigma", sigma, ".0%")
    r.put("st_delta", delta, ".0%")
    r.put("st_slow80", slow80, ".0%")
    r.put("st_lost80", lost80, ".0%")
    r.put("st_tax", tax, ".1%")
    r.put("st_hide", hide, ".2%")
    r.put("st_mc_ratio", mc / exact, ".4f")
    r.put("st_mc_steps", steps, ",")
    return r


# ---------------------------------------------------------------------------
# Elastic restart
# ---------------------------------------------------------------------------

def elastic_report(run, ref, same: bool, ckpt_every: int) -> Report:
    """The torchrun restart ``run`` against the uninterrupted ``ref``."""
    r = Report()
    s = run.summary
    r.say(f"  attempts: {s.attempts}, steps executed: {s.steps_done} "
          f"for {s.final_step} steps of progress")
    r.say(f"  died after step {s.failed_at_step}, resumed from the checkpoint "
          f"of step {s.resumed_from_step}: {s.redone_steps} steps redone")
    r.say(f"  from the failure to the first step of the new attempt: {s.downtime_s:.1f} s")
    r.say(f"  torchrun wall time {run.launch.wall_s:.1f} s "
          f"(uninterrupted run {ref.launch.wall_s:.1f} s)")
    r.say(f"  final weights bitwise equal to the uninterrupted run: {same}")
    r.put("el_fail", s.failed_at_step, "d")
    r.put("el_resume", s.resumed_from_step, "d")
    r.put("el_redone", s.redone_steps, "d")
    r.put("el_down", s.downtime_s, ".1f")
    r.put("el_steps", s.final_step, "d")
    r.put("el_ckpt", ckpt_every, "d")
    r.put("el_same", "bitwise equal to" if same else "different from")
    r.put("el_wall", run.launch.wall_s, ".1f")
    return r


# ---------------------------------------------------------------------------
# Silent data corruption
# ---------------------------------------------------------------------------

def corruption_report(sdc: dict, nproc: int) -> Report:
    """A table of alarms per scenario of ``faults_demos.run_corruption``."""
    r = Report()
    r.say(f"{'scenario':<26}{'norm alarms':>14}{'checksum alarms':>18}"
          f"{'suspects':>10}{'agree':>8}")
    for name, res in sdc.items():
        if name.startswith("_"):
            continue
        na = [x["step"] for x in res["steps"] if x["norm_alarm"]]
        ca = [x["step"] for x in res["steps"] if x["checksum_alarm"]]
        sus = sorted({k for x in res["steps"] for k in x["norm_suspects"] + x["checksum_suspects"]})
        r.say(f"{name:<26}{str(na):>14}{str(ca):>18}{str(sus):>10}"
              f"{str(res['replicas_agree']):>8}")
    clean = sdc["clean"]["steps"]
    r.put("sdc_steps", len(clean), "d")
    r.put("sdc_n", nproc, "d")
    r.put("sdc_false", sum(x["norm_alarm"] or x["checksum_alarm"] for x in clean), "d")
    r.put("sdc_gap", sdc["mantissa_after_unchecked"]["max_weight_gap"], ".1e")
    r.put("sdc_wall", sdc["_wall_s"], ".1f")
    return r


# ---------------------------------------------------------------------------
# Loss spikes
# ---------------------------------------------------------------------------

def spike_report(plain, rescued, never, bad: tuple, ckpt_every: int, last: int = 20) -> Report:
    """The three spike runs of ``faults_demos.spike_run`` compared."""
    r = Report()
    first = plain.spikes[0]
    plan = rescued.rewinds[0]

    def tail(run):
        return float(np.mean(run.losses[-last:]))

    before = float(np.mean(plain.losses[max(0, first - 20):first]))
    r.say(f"spike detected at step {first} (loss {plain.losses[first]:.1f}, "
          f"the 20 steps before averaged {before:.2f})")
    r.say(f"rewind: resume from the checkpoint of step {plan.resume_step}, skip batches "
          f"{plan.skip_start}..{plan.skip_end - 1} ({plan.skipped} batches)")
    r.say(f"  {plan.redone_steps} steps redone")
    r.say(f"mean loss over the last {last} steps: ploughing on {tail(plain):.3f}, "
          f"rewind and skip {tail(rescued):.3f},")
    r.say(f"  never saw the bad data {tail(never):.3f}")
    r.say(f"alarms: ploughing on {len(plain.spikes)}, rewind and skip {len(rescued.spikes)}, "
          f"clean {len(never.spikes)}")
    r.put("sp_step", first, "d")
    r.put("sp_loss", plain.losses[first], ".0f")
    r.put("sp_resume", plan.resume_step, "d")
    r.put("sp_skipped", plan.skipped, "d")
    r.put("sp_plain", tail(plain), ".2f")
    r.put("sp_rescued", tail(rescued), ".2f")
    r.put("sp_never", tail(never), ".2f")
    r.put("sp_clean_alarms", len(never.spikes), "d")
    r.put("sp_last", last, "d")
    r.put("sp_bad", f"{bad[0]} to {bad[1] - 1}")
    r.put("sp_ckpt", ckpt_every, "d")
    return r


# ---------------------------------------------------------------------------
# Determinism
# ---------------------------------------------------------------------------

# Within this band a measured time ratio is read as "no measurable difference".
SAME_BAND = (0.85, 1.15)


def determinism_report(d: dict, device_name: str) -> Report:
    """Sentences on determinism chosen from ``faults_demos.determinism_demo``'s
    result ``d``: every clause follows what was measured.

    ``device_name`` describes where the accumulating operation ran."""
    r = Report()
    cpu_name = d["step_device"]
    fast, safe = d["fast"], d["safe"]
    r.say(f"same seed twice: bitwise equal = {d['same_seed']}; "
          f"another seed: equal = {d['other_seed']}")
    r.say(f"{d['op']} of {d['n']:,} float32 values into {d['buckets']} slots,")
    r.say(f"  {device_name}:")
    for name, x in (("default", fast), ("deterministic", safe)):
        r.say(f"  {name:<14} {x['distinct']:>2} distinct results in {x['repeats']} calls, "
              f"max difference {x['max_diff']:.1e}, {x['median_s'] * 1e3:.1f} ms a call")
    r.say(f"MLP training step, median of {d['steps']} steps in each mode, interleaved,")
    r.say(f"  {cpu_name}:")
    r.say(f"  {d['step_s'][False] * 1e3:.2f} ms default, {d['step_s'][True] * 1e3:.2f} ms "
          f"deterministic (ratio {d['step_ratio']:.2f})")

    r.put("det_equal", "bitwise equal" if d["same_seed"] else "not equal")
    r.put("det_op", d["op"])
    r.put("det_device", device_name)
    r.put("det_cpu", cpu_name)
    r.put("det_repeats", fast["repeats"], "d")
    r.put("det_safe_clause", f"gave the same result in all {safe['repeats']} calls"
          if safe["distinct"] == 1 else
          f"still gave {safe['distinct']} different results in {safe['repeats']} calls")
    if fast["distinct"] > 1:
        r.put("det_fast_clause",
              f"gave {fast['distinct']} different results in {fast['repeats']} calls "
              f"(differences up to {fast['max_diff']:.1e}): its threads add in whatever "
              "order they arrive, and float addition is not associative")
    else:
        r.put("det_fast_clause",
              f"gave the same result in all {fast['repeats']} calls this time. Its threads "
              "still add in whatever order they arrive, and float addition is not "
              "associative, but here they did not overlap in a way that changed the order "
              "(a busy or single-threaded CPU often runs them one after the other), so "
              "nothing guarantees the next run will match")
    ratio = safe["median_s"] / fast["median_s"]
    if ratio < SAME_BAND[0]:
        cost = (f"took {ratio:.2f} times as long as the default, faster here: the "
                "deterministic path is a plain serial loop, while the default's threads "
                "contend for the same few slots")
    elif ratio > SAME_BAND[1]:
        cost = (f"took {ratio:.2f} times as long as the default: the order is fixed by "
                "giving up the parallel additions")
    else:
        cost = f"took {ratio:.2f} times as long as the default, no measurable difference"
    r.put("det_cost_clause", cost)
    step = d["step_ratio"]
    if step > SAME_BAND[1]:
        step_clause = f"took {step:.2f} times as long in deterministic mode ({cpu_name})"
        r.put("det_takeaway", "at a throughput cost, which this page measured on the CPU too")
    else:
        step_clause = (f"took {step:.2f} times as long in deterministic mode ({cpu_name}): "
                       "no measurable cost, since none of its CPU kernels has a slow "
                       "deterministic twin")
        r.put("det_takeaway", "at no measurable cost on this page's CPU, and at a "
                              "throughput cost on GPUs, whose fast kernels rely on atomics")
    r.put("det_step_clause", step_clause)
    r.put("det_step_ratio", step, ".2f")
    return r
