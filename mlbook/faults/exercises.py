"""Exercises of the failures chapter (notebooks/faults.md)."""

from __future__ import annotations

from mlbook.cadence import formulas as cadence
from mlbook.common.units import DAY_S, HOUR_S
from mlbook.faults import formulas, incidents
from mlbook.judge import (
    Choice,
    Code,
    Integer,
    Mistake,
    Real,
    Reason,
    WrongFunction,
    exercise,
    register,
)


def _faults_1(n_ranks, sigma):
    return {
        "delta_no_noise": formulas.drain_threshold(n_ranks, 0.0),
        "delta": formulas.drain_threshold(n_ranks, sigma),
    }


def _drain_arguments(st):
    """(n_ranks, delta, sigma) away from the break-even: delta is a factor
    of the reference threshold outside [0.7, 1.4], where a Monte Carlo
    estimate of a few thousand steps tells the two sides apart."""
    sigmas = st.sampled_from([0.0, 0.01, 0.02, 0.05, 0.1])
    factors = st.floats(0.0, 0.7) | st.floats(1.4, 4.0)

    def build(args):
        n, sigma, factor = args
        return n, factor * formulas.drain_threshold(n, sigma), sigma

    return st.tuples(st.integers(2, 1024), sigmas, factors).map(build)


def _printed_answers(n_ranks, delta, sigma):
    """The statement's two answers at 1,024 ranks, hard-coded for every N."""
    return delta > (0.000978 if sigma == 0 else 0.076)


def _no_noise_rule(n_ranks, delta, sigma):
    return delta > 1 / (n_ranks - 1)


def _no_resharding(n_ranks, delta, sigma):
    healthy = formulas.expected_step_time(n_ranks - 1, 0.0, sigma)
    return healthy < formulas.expected_step_time(n_ranks, delta, sigma)


FAULTS_1 = exercise(
    "faults-1",
    level=3,
    kind="code",
    inputs={"n_ranks": 1024, "sigma": 0.05},
    answers={
        "delta_no_noise": Real("fraction", "the break-even delta without noise", 0.01),
        "delta": Real("fraction", "the break-even delta with sigma = 5 %", 0.03),
    },
    key=_faults_1,
    mistakes=(
        Mistake(
            "delta",
            "the break-even without noise",
            "with a spread of step times the slow rank hides among the others, "
            "and the barrier waits for the slowest of them anyway.",
            lambda n_ranks, **_: formulas.drain_threshold(n_ranks, 0.0),
        ),
        Mistake(
            "delta_no_noise",
            "the break-even with noise",
            "without noise every healthy rank takes exactly one step time.",
            lambda n_ranks, sigma: formulas.drain_threshold(n_ranks, sigma),
        ),
    ),
    code=Code(
        name="drop_beats_wait",
        params=("n_ranks", "delta", "sigma"),
        reference=formulas.drop_beats_wait,
        cases=(
            (1024, 0.05, 0.05),
            (1024, 0.10, 0.05),
            (1024, 0.002, 0.0),
            (1024, 0.0005, 0.0),
            (64, 0.01, 0.0),
            (64, 0.03, 0.0),
            (8, 0.5, 0.1),
        ),
        arguments=_drain_arguments,
        mistakes=(
            WrongFunction(
                "the no-noise rule delta > 1/(N - 1)",
                "with noise, compare the expected step times: E[max] of the N "
                "ranks with the slow one against N/(N - 1) E[max] of N - 1.",
                _no_noise_rule,
            ),
            WrongFunction(
                "draining without re-sharding",
                "the N - 1 ranks left take over the drained rank's share: each "
                "step's compute grows by N/(N - 1).",
                _no_resharding,
            ),
            WrongFunction(
                "the printed answers hard-coded",
                "the check tries other N and sigma: compare the expected step "
                "times of waiting and of draining for the N and sigma given.",
                _printed_answers,
            ),
        ),
        max_examples=30,
    ),
)

# --- faults-2: Llama 3's failure rate, on a smaller job ----------------------------


def _faults_2(unexpected, days, logged_gpus, gpus, run_days):
    """Llama 3's rate per GPU, scaled to ``gpus``: failures of independent parts
    add their rates, so the job's MTBF is a GPU's MTBF over the GPU count."""
    gpu_mtbf_s = formulas.mean_hours_between(unexpected, days) * HOUR_S * logged_gpus
    job_mtbf_s = cadence.cluster_mtbf(gpu_mtbf_s, gpus)
    return {
        "mtbi_h": job_mtbf_s / HOUR_S,
        "interruptions": run_days * DAY_S / job_mtbf_s,
    }


def _scaled(factor):
    """The key's answers with the job's MTBF multiplied by ``factor``."""

    def wrong(answer):
        def value(**i):
            key = _faults_2(**i)
            return key[answer] * (
                factor(**i) if answer == "mtbi_h" else 1 / factor(**i)
            )

        return value

    return wrong


_UNSCALED = _scaled(lambda gpus, logged_gpus, **_: gpus / logged_gpus)
_UPSIDE_DOWN = _scaled(lambda gpus, logged_gpus, **_: (gpus / logged_gpus) ** 2)

FAULTS_2 = exercise(
    "faults-2",
    level=1,
    kind="compute",
    inputs={
        "unexpected": 419,
        "days": 54,
        "logged_gpus": 16_384,
        "gpus": 2048,
        "run_days": 30,
    },
    answers={
        "mtbi_h": Real(
            "h", "the job's mean time between unexpected interruptions", 0.01
        ),
        "interruptions": Real("count", "the unexpected interruptions expected", 0.01),
    },
    key=_faults_2,
    mistakes=(
        Mistake(
            "mtbi_h",
            "Llama 3's interval, not scaled",
            "that is the interval of the 16,384-GPU job; a job of fewer GPUs "
            "has fewer parts to fail.",
            _UNSCALED("mtbi_h"),
        ),
        Mistake(
            "mtbi_h",
            "scaled the wrong way",
            "fewer GPUs fail less often: the interval grows as the job shrinks.",
            _UPSIDE_DOWN("mtbi_h"),
        ),
        Mistake(
            "interruptions",
            "Llama 3's rate, not scaled",
            "the rate is per GPU: a job of 2,048 GPUs sees an eighth of it.",
            _UNSCALED("interruptions"),
        ),
        Mistake(
            "interruptions",
            "scaled the wrong way",
            "fewer GPUs fail less often: the count falls as the job shrinks.",
            _UPSIDE_DOWN("interruptions"),
        ),
    ),
)


# --- faults-3: a straggler on another cluster ---------------------------------------


def _faults_3(n_ranks, speed, sigma):
    delta = formulas.delta_from_speed(speed)
    return {
        "slowdown": formulas.straggler_slowdown(n_ranks, delta, sigma),
        "break_even": formulas.drain_threshold(n_ranks, sigma),
    }


FAULTS_3 = exercise(
    "faults-3",
    level=2,
    kind="compute",
    inputs={"n_ranks": 4096, "speed": 0.9, "sigma": 0.03},
    answers={
        "slowdown": Real("fraction", "how much longer each step takes", 0.03),
        "break_even": Real("fraction", "the break-even delta for draining", 0.03),
    },
    key=_faults_3,
    mistakes=(
        Mistake(
            "slowdown",
            "the slowdown without noise",
            "with a spread of step times the slow rank is not always the "
            "slowest: the barrier waits for the slowest of all of them.",
            lambda n_ranks, speed, **_: formulas.straggler_slowdown(
                n_ranks, formulas.delta_from_speed(speed), 0.0
            ),
        ),
        Mistake(
            "slowdown",
            "delta = 1 - speed",
            "a rank at speed v takes 1/v as long: delta = 1/v - 1.",
            lambda n_ranks, speed, sigma: formulas.straggler_slowdown(
                n_ranks, 1 - speed, sigma
            ),
        ),
        Mistake(
            "break_even",
            "the break-even without noise",
            "with a spread of step times a slightly slow rank hides among the "
            "others: the break-even is higher than 1/(N - 1).",
            lambda n_ranks, **_: formulas.drain_threshold(n_ranks, 0.0),
        ),
    ),
)


# --- faults-4: the break-even without noise, derived --------------------------------


def _faults_4(n_ranks, speed):
    delta = formulas.delta_from_speed(speed)
    wait = formulas.expected_step_time(n_ranks, delta, 0.0)
    return {
        "inverse_delta_star": 1 / formulas.drain_threshold(n_ranks, 0.0),
        "saved": 1 - formulas.drop_step_time(n_ranks, 0.0) / wait,
    }


FAULTS_4 = exercise(
    "faults-4",
    level=2,
    kind="derive",
    inputs={"n_ranks": 512, "speed": 0.5},
    # 1/delta* is asked, not delta*: delta* = 1/511 = 0.0019569 and the named
    # mistake 1/512 = 0.0019531 differ by 0.2 %, so a right answer rounded to
    # three figures (0.00196) would sit closer to the mistake than a tolerance
    # that tells them apart; 511 and 512 are told apart at any rounding.
    answers={
        "inverse_delta_star": Real("count", "1/delta*, the inverse break-even", 0.0005),
        "saved": Real("fraction", "the share of the step time draining saves", 0.0005),
    },
    key=_faults_4,
    mistakes=(
        Mistake(
            "inverse_delta_star",
            "1/N instead of 1/(N - 1)",
            "after the drain N - 1 ranks share the work: each does N/(N - 1) "
            "of a share.",
            lambda n_ranks, **_: n_ranks,
        ),
        Mistake(
            "saved",
            "draining without re-sharding",
            "the N - 1 ranks left take over the drained rank's share: the "
            "drained step lasts N/(N - 1), not 1.",
            lambda speed, **_: 1 - speed,
        ),
        Mistake(
            "saved",
            "delta = 1 - speed",
            "a rank at speed v takes 1/v as long: delta = 1/v - 1.",
            lambda n_ranks, speed: 1 - n_ranks / (n_ranks - 1) / (2 - speed),
        ),
    ),
)

# --- faults-5: what a restart spends its time on, measured --------------------------

# The reader's own machine: no key, the solution explains the number.
FAULTS_5 = exercise("faults-5", level=2, kind="measure")

# --- faults-6: the restart's downtime, predicted ------------------------------------

FAULTS_6 = exercise(
    "faults-6",
    level=1,
    kind="predict",
    answers={
        "downtime_s": Real(
            "s", "your prediction: the failure to the new attempt's first step", 0.1
        ),
    },
    # why: starting the processes again against resuming the training
    reasons=(
        Reason(
            "Most of the time went to starting again, before any checkpoint was "
            "read: torchrun noticed the dead worker, stopped the other, and started "
            "two fresh Python processes that import torch and meet at the "
            "rendezvous. At scale, health checks to fence the bad node come on top.",
            when=(("restart_s", ">", "resume_s"),),
        ),
        Reason(
            "Most of the time went after the new processes had met: building the "
            "model, loading the checkpoint and running the first step again, costs "
            "that grow with the model; at scale, reading the checkpoint back from "
            "shared storage dominates.",
        ),
    ),
)

# --- diagnoses: a hidden straggler, a loss spike and its replay --------------------


def _rank_choice(n_ranks):
    return Choice(
        "the slow rank",
        {f"rank_{r}": f"rank {r}" for r in range(n_ranks)},
    )


def _faults_7(seed, n_ranks):
    t = incidents.rank_timings(seed, n_ranks)
    slow = min(t.ranks, key=lambda r: r.allreduce_ms)
    return {
        "rank": f"rank_{slow.rank}",
        "measurement": "allreduce",
        "delta": t.measured_delta,
    }


def _gap_over(seed, n_ranks, of):
    """The slow rank's all-reduce gap to the others' median, over ``of``: the
    step ("step") or the slow rank's own compute ("slow")."""
    import statistics

    t = incidents.rank_timings(seed, n_ranks)
    slow = min(t.ranks, key=lambda r: r.allreduce_ms)
    others = statistics.median(r.allreduce_ms for r in t.ranks if r is not slow)
    gap = others - slow.allreduce_ms
    return gap / (slow.step_ms if of == "step" else slow.compute_ms)


FAULTS_7 = exercise(
    "faults-7",
    level=2,
    kind="diagnose",
    inputs={"seed": 4, "n_ranks": 8},
    answers={
        "rank": _rank_choice(8),
        "measurement": Choice(
            "the measurement that shows it",
            {
                "step": "the step time",
                "allreduce": "the time in the all-reduce",
            },
            {"step": "the barrier makes every rank's step as long as the slowest."},
        ),
        "delta": Real(
            "fraction", "how much longer its compute takes than a healthy rank's", 0.03
        ),
    },
    key=_faults_7,
    mistakes=(
        Mistake(
            "rank",
            "the rank that waits longest",
            "a rank that waits in the all-reduce is waiting for someone else.",
            lambda seed, n_ranks: (
                "rank_"
                + str(
                    max(
                        incidents.rank_timings(seed, n_ranks).ranks,
                        key=lambda r: r.allreduce_ms,
                    ).rank
                )
            ),
        ),
        Mistake(
            "delta",
            "the all-reduce gap over the step",
            "compare compute with compute: a rank's compute is its step less its "
            "all-reduce.",
            lambda **i: _gap_over(**i, of="step"),
        ),
        Mistake(
            "delta",
            "the gap over the slow rank's own compute",
            "delta is measured against a healthy rank's compute.",
            lambda **i: _gap_over(**i, of="slow"),
        ),
    ),
)


def _faults_8(seed, steps, checkpoint_every):
    r = incidents.spike_replay(seed, steps, checkpoint_every)
    data = r.replay_spike_step is not None
    return {
        "batch": r.batches[r.spike_step - 1],
        "cause": "data" if data else "state",
        "remedy": "skip_batch" if data else "rewind_window",
    }


FAULTS_8 = exercise(
    "faults-8",
    level=2,
    kind="diagnose",
    inputs={"seed": 3, "steps": 60, "checkpoint_every": 10},
    answers={
        "batch": Integer("count", "the batch that set the spike off"),
        "cause": Choice(
            "what the replay says",
            {
                "data": "the data: the spike follows the batch",
                "state": "the state: the model met the data at a bad moment",
            },
            {"state": "a spike that comes back with the same batch is the batch's."},
        ),
        "remedy": Choice(
            "what to do",
            {
                "skip_batch": "resume from the checkpoint before it, skip that batch",
                "rewind_window": "rewind further and skip a window of batches",
                "lower_lr": "lower the learning rate for a while",
            },
            {
                "rewind_window": "the replay pinned the spike on one batch.",
                "lower_lr": "the spike follows one batch, whatever the state.",
            },
        ),
    },
    key=_faults_8,
    mistakes=(
        Mistake(
            "batch",
            "the batch of the spike's own step",
            "a step's loss is measured before that step's update: the spike "
            "shows the update before it.",
            lambda **i: (lambda r: r.batches[r.spike_step])(
                incidents.spike_replay(**i)
            ),
        ),
        Mistake(
            "batch",
            "the batch of the replay's spike step",
            "in the replay too, look one step earlier.",
            lambda **i: (
                lambda r: r.replay_batches[r.replay_spike_step - r.replay_from]
            )(incidents.spike_replay(**i)),
        ),
    ),
)

EXERCISES = register(
    FAULTS_1, FAULTS_2, FAULTS_3, FAULTS_4, FAULTS_5, FAULTS_6, FAULTS_7, FAULTS_8
)
