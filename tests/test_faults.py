"""Tests of mlbook.faults: the pure-number side of the faults chapter."""

import math

import numpy as np
import pytest

from mlbook.faults import formulas as faults

# --- the Llama 3 table -----------------------------------------------------------


def test_llama3_counts_sum_to_unexpected():
    log = faults.LLAMA3_405B_LOG
    assert sum(r.count for r in faults.LLAMA3_INTERRUPTIONS) == log.unexpected == 419
    assert log.planned + log.unexpected == log.interruptions == 466
    assert "2407.21783" in log.source


def test_llama3_known_rows_and_categories():
    rows = {r.component: r for r in faults.LLAMA3_INTERRUPTIONS}
    assert rows["Faulty GPU"].count == 148 and rows["GPU HBM3 memory"].count == 72
    assert (
        rows["Silent data corruption"].count == 6
        and rows["Silent data corruption"].category == "GPU"
    )
    by_cat = faults.interruptions_by_category()
    assert by_cat["GPU"] == 148 + 72 + 19 + 17 + 6 + 6
    assert list(by_cat)[0] == "GPU"  # largest first


def test_llama3_printed_shares_disagree_with_counts_as_the_paper_does():
    rows = {r.component: r for r in faults.LLAMA3_INTERRUPTIONS}
    # Table 5 prints 30.1, 17.2, 4.5, 4.1, 1.4 and 1.4 % for the GPU rows; their sum is
    # the text's "GPU issues ... 58.7 %" of unexpected interruptions.
    printed = [
        rows[c].printed_share
        for c in (
            "Faulty GPU",
            "GPU HBM3 memory",
            "GPU SRAM memory",
            "GPU system processor",
            "Silent data corruption",
            "GPU thermal interface + sensor",
        )
    ]
    assert printed == [0.301, 0.172, 0.045, 0.041, 0.014, 0.014]
    assert sum(printed) == pytest.approx(
        faults.LLAMA3_405B_LOG.stated_gpu_share, abs=1e-9
    )
    # The faulty-GPU row's printed 30.1 % is not its count's share: 148 / 419 = 0.3532
    # (BRIEF section 6: "the paper's printed percentage for faulty GPU does not match
    # 148/419, so show counts"); they differ by more than five points.
    fgpu = rows["Faulty GPU"]
    assert fgpu.count / faults.LLAMA3_405B_LOG.unexpected - fgpu.printed_share > 0.05


def test_mean_hours_between():
    # Llama 3: 54 days = 1,296 hours over 419 unexpected interruptions = 3.0931 h,
    # the paper's "one failure every ~3 hours".
    assert faults.mean_hours_between(419, 54) == pytest.approx(3.0931, abs=5e-5)
    with pytest.raises(ValueError, match="interruptions"):
        faults.mean_hours_between(0, 54)
    with pytest.raises(ValueError, match="days"):
        faults.mean_hours_between(10, -1)


# --- stragglers --------------------------------------------------------------------


def test_one_rank_at_80_percent_costs_25_percent():
    delta = faults.delta_from_speed(0.8)
    assert delta == pytest.approx(0.25)
    for n in (2, 8, 1024):
        assert faults.straggler_slowdown(n, delta, sigma=0.0) == pytest.approx(0.25)
        assert faults.throughput_lost(n, delta, sigma=0.0) == pytest.approx(0.20)


@pytest.mark.parametrize(
    "n,delta,sigma", [(1, 0.2, 0.05), (2, 0.0, 0.1), (64, 0.1, 0.05), (1024, 0.3, 0.02)]
)
def test_expected_step_time_matches_monte_carlo(n, delta, sigma):
    times = faults.simulate_step_times(
        n, delta, sigma, steps=20000 if n < 100 else 3000, seed=3
    )
    mc = times.max(axis=1)
    exact = faults.expected_step_time(n, delta, sigma)
    # four standard errors of the Monte Carlo mean (a 6e-5 chance for a true agreement
    # to fail; the seeds are fixed, so it either always passes or never), plus the
    # integral's own error, well under 1e-4
    assert abs(mc.mean() - exact) < 4 * mc.std() / math.sqrt(len(mc)) + 1e-4


def test_single_rank_is_lognormal_mean():
    # one rank, no straggler: E[X] = exp(sigma^2 / 2)
    assert faults.expected_step_time(1, 0.0, 0.3) == pytest.approx(
        math.exp(0.045), rel=1e-5
    )
    assert faults.barrier_tax(1, 0.3) == pytest.approx(0.0, abs=1e-5)


def test_step_time_grows_with_delta_n_and_sigma():
    assert faults.expected_step_time(64, 0.2, 0.05) > faults.expected_step_time(
        64, 0.1, 0.05
    )
    assert faults.expected_step_time(128, 0.0, 0.05) > faults.expected_step_time(
        64, 0.0, 0.05
    )
    assert (
        faults.barrier_tax(1024, 0.1)
        > faults.barrier_tax(1024, 0.05)
        > faults.barrier_tax(8, 0.05)
        > 0
    )


def test_noise_hides_a_mild_straggler():
    # with spread, a rank 10 % slow costs far less than 10 % at N=1024
    assert faults.straggler_slowdown(1024, 0.10, 0.05) < 0.01
    assert faults.straggler_slowdown(1024, 0.10, 0.0) == pytest.approx(0.10)


def test_drain_threshold_closed_form_without_noise():
    for n in (2, 3, 16, 1024):
        assert faults.drain_threshold(n, 0.0) == pytest.approx(1 / (n - 1))


def test_drain_threshold_is_break_even():
    for n, sigma in ((16, 0.05), (1024, 0.05), (1024, 0.02)):
        d = faults.drain_threshold(n, sigma, tol=1e-7)
        assert d > 1 / (n - 1)  # noise raises it
        assert not faults.drop_beats_wait(n, 0.98 * d, sigma)
        assert faults.drop_beats_wait(n, 1.02 * d, sigma)


def test_drain_threshold_monte_carlo_check():
    n, sigma = 256, 0.05
    d = faults.drain_threshold(n, sigma)
    drop = faults.drop_step_time(n, sigma)
    below = (
        faults.simulate_step_times(n, 0.5 * d, sigma, steps=4000, seed=1)
        .max(axis=1)
        .mean()
    )
    above = (
        faults.simulate_step_times(n, 2.0 * d, sigma, steps=4000, seed=2)
        .max(axis=1)
        .mean()
    )
    assert below < drop < above


def test_find_straggler():
    times = faults.simulate_step_times(
        32, 0.15, 0.05, steps=300, seed=0, straggler_rank=9
    )
    rank, score = faults.find_straggler(times)
    assert rank == 9
    # The same simulation without the slow rank: whichever rank waits least is only
    # lucky, and stands out far less than the real straggler does.
    _, lucky = faults.find_straggler(
        faults.simulate_step_times(32, 0.0, 0.05, steps=300, seed=0)
    )
    assert (
        score > 2 * lucky
    )  # seed 0: 108 against 5; a factor 2 leaves room for any seed
    waits = faults.allreduce_wait(times)
    assert waits.shape == times.shape and (waits >= 0).all()
    assert np.allclose(waits.min(axis=1), 0)  # someone is always last


# --- silent corruption ------------------------------------------------------------


def test_flip_bit_and_checksum():
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    for bit in (0, 3, 21, 22, 30, 31):
        y = faults.flip_bit(x, 7, bit)
        assert (y != x).sum() == 1  # exactly one element changed
        assert abs(faults.checksum(y) - faults.checksum(x)) == 2**bit
        assert (
            faults.flip_bit(y, 7, bit).tobytes() == x.tobytes()
        )  # flipping twice restores it
    assert faults.checksum(x) == faults.checksum(x[::-1].copy()[::-1])
    assert faults.flip_bit(x, 7, 31)[7] == -x[7]  # the sign bit


def test_checksum_comparison():
    check = faults.CorruptionCheck()
    assert not check.compare_checksums([5, 5, 5]).alarm
    v = check.compare_checksums([5, 9, 5])
    assert v.alarm and v.suspects == (1,)
    v = check.compare_checksums([5, 9])  # two replicas: who is wrong?
    assert v.alarm and v.suspects == (0, 1)
    with pytest.raises(ValueError, match="at least 2"):
        check.compare_checksums([5])


def test_norm_comparison():
    check = faults.CorruptionCheck(norm_ratio=10)
    assert not check.compare_norms([0.6, 0.7, 0.65]).alarm
    v = check.compare_norms([0.6, math.inf, 0.65])
    assert v.alarm and v.suspects == (1,)
    v = check.compare_norms([0.6, 0.7, 12.0])
    assert v.alarm and v.suspects == (2,)
    assert check.compare_norms([0.6, math.nan]).suspects == (1,)
    with pytest.raises(ValueError, match="norm_ratio"):
        faults.CorruptionCheck(norm_ratio=0.5)


def test_no_false_alarm_on_clean_replicas():
    rng = np.random.default_rng(0)
    check = faults.CorruptionCheck()
    for _ in range(200):
        g = rng.standard_normal(1000).astype(np.float32)
        assert not check.compare_checksums(
            [faults.checksum(g.copy()) for _ in range(4)]
        ).alarm
        local = [
            float(np.linalg.norm(rng.standard_normal(1000) * (1 + 0.2 * rng.random())))
            for _ in range(4)
        ]
        assert not check.compare_norms(local).alarm


# --- loss spikes -----------------------------------------------------------------


def _noisy_loss(n, seed=0, spike_at=(), level=0.4):
    rng = np.random.default_rng(seed)
    loss = level + 0.05 * rng.standard_normal(n)
    for i in spike_at:
        loss[i] = 20.0
    return loss


def test_spike_detector_flags_spikes_only():
    cfg = faults.SpikeConfig(window=30, z_threshold=6)
    assert faults.detect_spikes(_noisy_loss(500), cfg) == []
    assert faults.detect_spikes(_noisy_loss(300, spike_at=(100, 200)), cfg) == [
        100,
        200,
    ]
    assert faults.detect_spikes([1.0] * 20 + [math.nan] + [1.0] * 5, cfg) == [20]


def test_spike_detector_keeps_spikes_out_of_history():
    det = faults.SpikeDetector(faults.SpikeConfig(window=20, min_history=10))
    for v in _noisy_loss(50):
        det.update(float(v))
    flags = [det.update(30.0)[1] for _ in range(10)]
    assert all(flags)  # a long spike stays a spike


def test_spike_detector_falling_loss_is_fine():
    assert faults.detect_spikes(np.linspace(5, 1, 300)) == []


def test_spike_config_bad_input():
    with pytest.raises(ValueError, match="window"):
        faults.SpikeConfig(window=0)
    with pytest.raises(ValueError, match="z_threshold"):
        faults.SpikeConfig(z_threshold=-1)
    with pytest.raises(ValueError, match="min_history"):
        faults.SpikeConfig(window=5, min_history=10)
    with pytest.raises(ValueError, match="value"):
        faults.SpikeDetector().update("high")


def test_rewind_policy_palm_defaults():
    policy = faults.RewindPolicy()  # PaLM: ~100 steps back, 200-500 batches skipped
    lo, hi = faults.PALM_SPIKES["skip_batches"]
    assert (
        policy.rewind_steps == faults.PALM_SPIKES["rewind_steps"]
        and lo <= policy.skip_batches <= hi
    )
    plan = policy.plan(84_000, range(0, 90_000, 100))
    assert plan.resume_step == 83_900
    assert plan.skip_start == 83_900 and plan.skip_end == 84_100 and plan.skipped == 200
    assert plan.redone_steps == 100
    # sparse checkpoints: the window is stretched to reach past the spike's batch
    sparse = policy.plan(84_000, range(0, 90_000, 500))
    assert sparse.resume_step == 83_500 and sparse.skip_end == 84_001


def test_rewind_window_always_covers_the_spike():
    plan = faults.RewindPolicy(rewind_steps=5, skip_batches=3).plan(60, [0, 10, 20, 50])
    assert plan.resume_step == 50
    assert plan.skip_start <= 60 < plan.skip_end


def test_rewind_policy_respects_earlier_skips():
    policy = faults.RewindPolicy(rewind_steps=5, skip_batches=15)
    first = policy.plan(60, [0, 50])
    skips = [(first.resume_step, first.skipped)]
    assert (
        faults.batch_for_step(49, skips) == 49
        and faults.batch_for_step(50, skips) == 65
    )
    second = policy.plan(90, [0, 50, 80], batch_offset=first.skipped)
    assert second.resume_step == 80 and second.skip_start == 80 + 15


def test_rewind_policy_bad_input():
    with pytest.raises(ValueError, match="rewind_steps"):
        faults.RewindPolicy(rewind_steps=0)
    with pytest.raises(ValueError, match="skip_batches"):
        faults.RewindPolicy(skip_batches=-5)
    with pytest.raises(ValueError, match="no checkpoint"):
        faults.RewindPolicy(rewind_steps=100).plan(50, [0 + 60])


# --- elastic timeline ---------------------------------------------------------------


def test_summarize_timeline():
    ev = [{"kind": "start", "attempt": 0, "t": 0.0}]
    ev += [{"kind": "step", "attempt": 0, "t": 1.0 + s, "step": s} for s in range(1, 8)]
    ev += [{"kind": "checkpoint", "attempt": 0, "t": 5.1, "step": 4}]
    ev += [{"kind": "fail", "attempt": 0, "t": 8.5, "step": 7}]
    ev += [
        {"kind": "start", "attempt": 1, "t": 10.0},
        {"kind": "resume", "attempt": 1, "t": 10.5, "step": 4},
    ]
    ev += [
        {"kind": "step", "attempt": 1, "t": 11.0 + s, "step": s} for s in range(5, 11)
    ]
    s = faults.summarize_timeline(ev)
    assert s.attempts == 2 and s.failed_at_step == 7 and s.resumed_from_step == 4
    assert s.redone_steps == 3 and s.final_step == 10 and s.steps_done == 13
    assert s.downtime_s == pytest.approx(16.0 - 8.5)
    one = faults.summarize_timeline(ev[:8])
    assert one.attempts == 1 and one.redone_steps == 0 and one.failed_at_step is None
    with pytest.raises(ValueError, match="empty"):
        faults.summarize_timeline([])
    with pytest.raises(ValueError, match="no steps"):
        faults.summarize_timeline(ev[:1])
