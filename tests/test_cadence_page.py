"""The cadence chapter's claims, read from the values it glued into its prose in
the test build (test sizes). Each number is checked against its source (the
brief, Kokolis et al. 2024), a hand computation written out here, a different
method (the page's own Monte Carlo), a physical bound, or the page's own
asserts; each tolerance says where it comes from."""

import math

import pytest

from conftest import page_values
from helpers.live import live_payloads

pytestmark = pytest.mark.book

# Where a value is an exact expression by hand, 1e-9 relative allows for the float
# arithmetic that made it; hand values written to 6 significant digits get 1e-5.
EXACT = 1e-9
SIX_DIGITS = 1e-5
HOUR = 3600.0


@pytest.fixture(scope="module")
def v(book):
    return page_values("cadence")


def test_every_glued_value_is_a_plain_number_or_a_short_label(v):
    labels = {k: x for k, x in v.items() if isinstance(x, str)}
    assert set(labels) == {"device_name", "stall_device", "res_naive_direction"}
    devices = [labels["device_name"], labels["stall_device"]]
    assert all(x.startswith(("CPU:", "GPU:")) and len(x) < 80 for x in devices)
    assert all(isinstance(x, (int, float)) for k, x in v.items() if k not in labels)


def test_young_interval_for_the_briefs_cases(v):
    # BRIEF section 5: C = 30 s and 1 min, T = 3 h. By hand:
    # sqrt(2 * 30 * 10,800) = sqrt(648,000) = 804.984 s; sqrt(1,296,000) = 1,138.42 s.
    # At Young's optimum the first-order waste is sqrt(2C/T):
    # sqrt(60 / 10,800) = 0.0745356, sqrt(120 / 10,800) = 0.105409.
    assert v["c30_young"] * 60 == pytest.approx(804.984, rel=SIX_DIGITS)
    assert v["c60_young"] * 60 == pytest.approx(1138.42, rel=SIX_DIGITS)
    assert v["c30_wy"] == pytest.approx(0.0745356, rel=SIX_DIGITS)
    assert v["c60_wy"] == pytest.approx(0.105409, rel=SIX_DIGITS)
    assert v["c_ratio"] == pytest.approx(math.sqrt(2), rel=EXACT)  # "which is sqrt 2"


def test_daly_interval_for_the_briefs_cases(v):
    # Daly 2006: sqrt(2CT) (1 + sqrt(x)/3 + x/9) - C, x = C / 2T. By hand:
    #   C = 30: x = 1/720, 804.984 * (1 + 0.0124226 + 0.000154321) - 30 = 785.109 s
    #   C = 60: x = 1/360, 1138.42 * (1 + 0.0175682 + 0.000308642) - 60 = 1098.77 s
    assert v["c30_daly"] * 60 == pytest.approx(785.109, rel=SIX_DIGITS)
    assert v["c60_daly"] * 60 == pytest.approx(1098.77, rel=SIX_DIGITS)
    # "the two optima differ by about 2C/3" (C << T): 804.984 - 785.109 = 19.875 s
    assert v["c30_gap"] == pytest.approx(804.984 - 785.109, abs=2e-3)
    assert v["c30_gap"] == pytest.approx(
        2 / 3 * 30, rel=0.01
    )  # the next term is C sqrt(x) / 9


def test_exact_waste_agrees_with_the_monte_carlo(v):
    # A different method: the page's simulation of 20,000 MTBFs at Daly's interval. Its
    # standard error by hand: n = 20,000 failures, each losing a uniform share of a
    # segment of 815.1 s (mean 407.6 s, sd 235.3 s): sqrt(20,000 (407.6^2 + 235.3^2)) /
    # (20,000 * 10,800 s) = 3.08e-4. Three of them: the page asserts fewer, and a normal
    # deviate beyond 3 has probability 0.3 %.
    assert v["mc_failures"] == 20_000
    assert v["c30_wd"] == v["mc_exact"]  # the same quantity, computed once each
    assert abs(v["mc_waste"] - v["c30_wd"]) < 3 * 3.08e-4
    assert v["mc_sigma"] < 3
    # The exact waste at the optimum is below the first order at
    # Young's (the page's figure)
    assert v["c30_wd"] < v["c30_wy"] and v["c60_wd"] < v["c60_wy"]


def test_kokolis_numbers_and_the_linear_model(v):
    # Kokolis et al. 2024 (arXiv:2410.21680): 7.9 h MTTF for 1,024-GPU jobs, 1.8 h
    # projected at 16,384 GPUs (BRIEF section 6). Read back through T = T_node / nodes
    # (8 GPUs a node):
    #   7.9 h * 128 nodes = 1,011.2 h = 42.1333 days;
    #   1.8 h * 2,048 nodes = 3,686.4 h = 153.6 days
    assert (v["kok_1024"], v["kok_16k"], v["gpus_per_node"]) == (7.9, 1.8, 8)
    assert v["node_mtbf_days"] == pytest.approx(1011.2 / 24, rel=EXACT)
    assert v["kok_node_days"] == pytest.approx(3686.4 / 24, rel=EXACT)
    assert v["rate_ratio"] == pytest.approx(3686.4 / 1011.2, rel=EXACT)
    # 16,384 GPUs at the 1,024-GPU rate: 7.9 h / 16 = 0.49375 h = 29.625 min
    assert v["lin_16k"] == pytest.approx(0.49375, rel=EXACT)
    assert v["lin_16k_min"] == pytest.approx(29.625, rel=EXACT)
    # Daly at C = 30 s, T = 1,777.5 s: sqrt(106,650) = 326.573, x = 30 / 3,555:
    #   326.573 * (1 + 0.0306211 + 0.000937647) - 30 = 306.879 s
    assert v["i_16k"] * 60 == pytest.approx(306.879, rel=SIX_DIGITS)
    # the exact loss lies below the first-order
    # sqrt(2C/T) = sqrt(60 / 1,777.5) = 0.183726
    assert 0 < v["w_16k"] < 0.183726


def test_measured_save_is_physical_and_consistent(v):
    assert v["stall_steps"] == 6 and v["stall_every"] == 3  # the test-size run
    assert v["ckpt_mb"] > 0 and v["sync_ms"] > 0 and v["async_ms"] > 0
    # an async save is published after its stall ends
    assert v["async_total_ms"] >= v["async_ms"]
    assert v["async_vs_sync"] == pytest.approx(v["async_ms"] / v["sync_ms"], rel=EXACT)
    assert v["write_mb_s"] == pytest.approx(
        v["ckpt_mb"] / (v["sync_ms"] / 1e3), rel=EXACT
    )
    assert v["step_none_ms"] > 0 and v["step_async_ms"] > 0 and v["step_spread"] >= 0
    assert v["step_async_change"] == pytest.approx(
        v["step_async_ms"] / v["step_none_ms"] - 1, rel=1e-9
    )
    # one large file at test size: 64 MiB = 67.108864 MB, written at some rate
    assert v["seq_mb"] == pytest.approx(64 * 2**20 / 1e6, rel=EXACT)
    assert v["seq_mb_s"] > 0


def test_measured_c_fed_into_the_interval(v):
    # A different formula: for C << T Daly's optimum is Young's sqrt(2CT)
    # minus C, to relative order C/T (here below 1e-5), and the waste there is
    # sqrt(2C/T) to the same order.
    t = 7.9 * HOUR
    for mode in ("sync", "async"):
        c = v[f"{mode}_ms"] / 1e3
        assert v[f"meas_i_{mode}"] == pytest.approx(math.sqrt(2 * c * t) - c, rel=1e-3)
        assert v[f"meas_w_{mode}"] == pytest.approx(math.sqrt(2 * c / t), rel=1e-2)


def test_resume_claims(v):
    # the test-size run: 12 steps of 4 samples, saves every 4, crash after step 6
    assert (v["res_steps"], v["res_every"], v["res_crash"], v["res_batch"]) == (
        12,
        4,
        6,
        4,
    )
    # the last save at or before the crash, and the steps lost after it
    assert v["res_from"] == 4 and v["res_lost"] == 2
    # exact: bitwise (the page asserts it), every sample seen as often as
    # in the uninterrupted run
    assert v["res_exact_diff"] == 0.0 and v["res_exact_gap"] == 0
    # naive: its stream restarts at sample 0 and trains steps 5..12 on the batches
    # of steps 1..8 (one epoch is 128 / 4 = 32 steps), so it repeats the 4 batches of
    # steps 1..4 and never sees those of steps 9..12: 16 samples each way.
    assert v["res_naive_steps"] == 4
    assert v["res_naive_extra"] == v["res_naive_missing"] == 4 * 4
    assert v["res_naive_loss"] > 0 and v["res_naive_end"] > 0 and v["res_ref_end"] > 0
    # the label the prose reads the naive resume's last loss by
    lower = v["res_naive_end"] < v["res_ref_end"]
    assert v["res_naive_direction"] == ("lower" if lower else "higher")


def test_storage_claims(v):
    # 14 bytes a parameter: ZeRO's 16 (Rajbhandari et al. 2020, Sec. 3.1)
    # minus the bf16 gradients; BRIEF section 5: a 70B model is ~140 GB of
    # bf16 weights plus ~840 GB, ~1 TB.
    assert v["bytes_per_param"] == 14
    assert (v["s70_w"], v["s70_rest"]) == (140.0, 840.0)
    assert v["s70_total"] == pytest.approx(0.98, rel=EXACT)
    # Llama 3's Tectonic, 2 TB/s sustained (Grattafiori et al. 2024, Sec. 3.3.1)
    assert v["s_storage_bw"] == 2000.0
    assert v["s_c_floor"] == pytest.approx(980e9 / 2e12, rel=EXACT)  # 0.49 s
    bw = v["s_writer_mb_s"] * 1e6
    # one writer's rate is the large file's, not the small checkpoint's (whose
    # few megabytes time mostly the creation of its files)
    assert v["s_writer_mb_s"] == pytest.approx(v["seq_mb_s"], rel=EXACT)
    assert v["s_n_sat"] == pytest.approx(2e12 / bw, rel=EXACT)
    for n in (1, 64, 512):  # C = bytes / min(n * writer, storage)
        assert v[f"s_c_{n}"] == pytest.approx(980e9 / min(n * bw, 2e12), rel=EXACT)
    # With a fixed number of writers C grows linearly with the
    # model (the same formula, twice the bytes); it falls as writers are added,
    # down to the storage floor.
    assert v["s_c_64_twice"] == pytest.approx(2 * 980e9 / min(64 * bw, 2e12), rel=EXACT)
    assert v["s_c_64_twice"] == pytest.approx(2 * v["s_c_64"], rel=EXACT)
    assert v["s_c_1"] >= v["s_c_64"] >= v["s_c_512"] >= v["s_c_floor"] * (1 - EXACT)
    # 7.9 h * 128 nodes / 512 nodes = 1.975 h = 7,110 s
    assert v["s_t_cluster"] == pytest.approx(1.975, rel=EXACT)
    assert v["s_c_1_of_t"] == pytest.approx(v["s_c_1"] / 7110, rel=EXACT)
    assert 0 < v["s_w_512"] <= v["s_w_64"] <= 1
    assert v["least_useful"] == 0.01  # "less than 1 % of its time for training"


def test_exercise(v):
    # C = 40 s, T = 2.5 h = 9,000 s. By hand: Daly x = 40 / 18,000:
    # sqrt(720,000) = 848.528, 848.528 * (1 + 0.0157135 + 0.000246914) - 40
    # = 822.071 s = 13.7012 min; C = 20 s: 600 * (1 + 0.0111111 + 0.000123457) - 20
    # = 586.741 s = 9.77901 min
    assert v["ex_i"] == pytest.approx(822.071 / 60, rel=SIX_DIGITS)
    assert v["ex_i_half"] == pytest.approx(586.741 / 60, rel=SIX_DIGITS)
    # the exact waste is below the first order at Young's, sqrt(80 / 9,000) = 0.0942809
    assert 0 < v["ex_w"] < 0.0942809
    assert v["ex_gain_min"] > 0
    # "close to sqrt 2, not 2": within 2 % of sqrt 2 (1.401 / 1.414 = 0.991)
    assert v["ex_loss_ratio"] == pytest.approx(math.sqrt(2), rel=0.02)


def test_sharded_c_is_not_called_size_independent():
    from pathlib import Path

    text = " ".join(
        (Path(__file__).resolve().parent.parent / "notebooks" / "cadence.md")
        .read_text()
        .split()
    )
    assert "independent of the model's size" not in text
    assert "grows linearly with the model" in text


def test_the_live_figure_draws_the_pages_monte_carlo_at_its_start(v):
    # The page simulates at the figure's start (the 1,024-GPU rate as it is,
    # 7.9 h x 128 = 1,011.2 h a node, on 128 nodes: T = 7.9 h = 28,440 s, C = 30 s,
    # R = 0) and passes the run as fixed data; the default spec, what the
    # book shows opened from disk and the executed notebook shows, draws the dots.
    payload = live_payloads("cadence")["mlbook.cadence.live:waste_explorer"]
    sim = payload["fixed"]["simulated"]
    assert (sim["checkpoint_s"], sim["restart_s"]) == (30, 0)
    assert sim["mtbf_s"] == pytest.approx(28_440, rel=EXACT)
    assert (v["sim_nodes"], v["sim_t_h"]) == (128, pytest.approx(7.9, rel=EXACT))
    points = sim["points"]
    assert len(points) == 17
    # Young's sqrt(2 x 30 x 28,440) = 1,306.292 s = 21.7715 min; the run spans /6 to x6
    i_min = [p["I_min"] for p in points]
    assert i_min[0] == pytest.approx(21.771541 / 6, rel=SIX_DIGITS)
    assert i_min[-1] == pytest.approx(21.771541 * 6, rel=SIX_DIGITS)
    # each simulated waste lies within 1 percentage point of the exact one (20,000
    # MTBFs: a standard error near 3e-4 at the optimum, as above)
    for p in points:
        i_s, t = p["I_min"] * 60, 28_440.0
        exact = 1 - i_s / (t * (math.exp((i_s + 30) / t) - 1))
        assert abs(p["W"] - exact) < 0.01
    dots = [
        row
        for lay in payload["spec"]["layer"]
        if lay["mark"]["type"] == "point" and "color" in lay["encoding"]
        for row in lay["data"]["values"]
    ]
    drawn = [(d["I_min"], d["W"]) for d in dots]
    assert drawn == [(p["I_min"], p["W"]) for p in points]


def test_the_two_line_example(v):
    # C = 30 s, T = 3 h = 10,800 s. Every 5 min: writes 30 / 300 = 10 %, failures
    # lose half an interval, 150 / 10,800 = 1.389 %. Every hour: 30 / 3,600 =
    # 0.833 %, and 1,800 / 10,800 = 16.67 %.
    assert v["ex5_write"] == pytest.approx(0.1, rel=EXACT)
    assert v["ex5_lost"] == pytest.approx(150 / 10_800, rel=EXACT)
    assert v["ex60_write"] == pytest.approx(30 / 3600, rel=EXACT)
    assert v["ex60_lost"] == pytest.approx(1 / 6, rel=EXACT)


def test_the_cluster_rows_beside_the_measured_write(v):
    # Pasqualin et al. 2024 (PyTorch blog): a 7B model's checkpoint down time on
    # GPUs, 148.8 s synchronous, 6.3 s with async_save (6.3 / 148.8 = 4.23 %).
    assert (v["gpu_sync_s"], v["gpu_async_s"]) == (148.8, 6.3)
    assert v["gpu_async_ratio"] == pytest.approx(6.3 / 148.8, rel=EXACT)
    # Grattafiori et al. 2024, Sec. 3.3.1: Tectonic, 2 TB/s sustained, 7 TB/s peak.
    # A 405B checkpoint, 14 bytes a parameter: 5.67 TB; 5.67 / 2 = 2.835 s and
    # 5.67 / 7 = 0.81 s.
    assert (v["l3_sustained_gb_s"], v["l3_peak_gb_s"]) == (2000.0, 7000.0)
    assert v["l3_tb"] == pytest.approx(5.67, rel=EXACT)
    assert v["l3_c_sustained"] == pytest.approx(2.835, rel=EXACT)
    assert v["l3_c_peak"] == pytest.approx(0.81, rel=EXACT)
    # one writer at the large file's rate, measured on this machine
    rate = v["seq_mb_s"] * 1e6
    assert v["l3_c_here_h"] == pytest.approx(5.67e12 / rate / 3600, rel=EXACT)


def test_the_diagnoses_artifacts(v):
    # cadence-8's log was drawn with a cluster MTBF of 2.78484 h (seed 2); the log
    # reads 3 h with the restarts in (tests/test_keys_cadence.py works it by hand)
    assert v["cad8_true_h"] == pytest.approx(2.784836, rel=1e-6)
    # cadence-9's sweep (seed 1): 208 GB/s of storage over 1.268 GB/s a writer
    assert v["cad9_writers"] == pytest.approx(164.01, abs=0.01)
    assert v["cad9_c"] == pytest.approx(5.67e12 / 207.92e9, rel=1e-3)
