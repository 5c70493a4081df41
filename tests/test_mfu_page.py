"""The MFU chapter's claims, read from the values it glued into its prose in
the test build (test sizes). Each number is checked against its source, a
hand computation written out here, a physical bound, or the page's own
asserts; each tolerance says where it comes from."""

import pytest

from conftest import page_values

pytestmark = pytest.mark.book

# Stored glue values are the page's floats; where a value is an exact product of
# integers by hand, 1e-9 relative allows for the float division that made it.
EXACT = 1e-9


@pytest.fixture(scope="module")
def v(book):
    return page_values("mfu")


def test_every_glued_value_is_a_plain_number_or_a_short_label(v):
    labels = {k: x for k, x in v.items() if isinstance(x, str)}
    assert set(labels) == {"device_name", "meas_dtype", "meas_peak_basis"}
    assert all(len(x) < 80 for x in labels.values())  # a label, not a sentence
    assert all(isinstance(x, (int, float)) for k, x in v.items() if k not in labels)


def test_the_device_is_named(v):
    assert v["device_name"].startswith(("CPU:", "GPU:"))
    assert v["meas_dtype"] == (
        "bf16" if v["device_name"].startswith("GPU:") else "fp32"
    )


def test_llama2_7b_reference_counts(v):
    # Touvron et al. 2023 report 6.74B; the released checkpoint has 6,738,415,616.
    # By hand (L=32, h=4096, d_ff=11008, V=32000):
    #   N_matmul = 32 (4 * 4096^2 + 3 * 4096 * 11008) + 32000 * 4096 = 6,607,077,376
    #   embedding and norms: 32000 * 4096 + 65 * 4096 = 131,338,240
    #   6 N_matmul = 39,642,464,256; 12Lhs = 12 * 32 * 4096 * 4096 = 6,442,450,944
    assert v["l7_n"] == pytest.approx(6.738415616, rel=EXACT)
    assert v["l7_nmm"] == pytest.approx(6.607077376, rel=EXACT)
    assert v["l7_emb"] == pytest.approx(131.33824, rel=EXACT)
    assert v["l7_six_n"] == pytest.approx(39.642464256, rel=EXACT)
    assert v["l7_attn"] == pytest.approx(6.442450944, rel=EXACT)
    assert v["l7_train"] == pytest.approx(46.0849152, rel=EXACT)
    assert v["l7_attn_over_6n"] == pytest.approx(
        6.442450944 / 39.642464256, rel=EXACT
    )  # 16.25 %
    # "roughly a seventh" (BRIEF section 1): 6,442,450,944 / 46,084,915,200 = 0.1398,
    # and "roughly" is taken as within half a point of 1/7 = 0.1429.
    assert v["l7_attn_share"] == pytest.approx(0.139795, abs=1e-6)
    assert v["l7_attn_share"] == pytest.approx(1 / 7, abs=0.005)


def test_counter_against_formula(v):
    # Written-out attention: FlopCounterMode and the formula agree
    # exactly (the page asserts it).
    assert v["count_math_ratio"] == 1.0
    # The test-size model (L=2, h=128, V=512, GELU d_ff=512, s=64), by hand:
    #   2 N_matmul = 2 (2 (4 * 128^2 + 2 * 128 * 512) + 512 * 128) = 917,504;
    #   4Lhs = 65,536, so the attention term is 65,536 / 983,040 = 1/15 of the FLOPs.
    assert v["count_attn_share_tiny"] == pytest.approx(1 / 15, rel=EXACT)
    if v["device_name"].startswith("CPU:"):
        # On a CPU the fused kernel is invisible to the counter: exactly the attention
        # term is missing (the page asserts it there).
        assert 1 - v["count_sdpa_ratio"] == pytest.approx(
            v["count_attn_share_tiny"], abs=1e-9
        )
    else:
        # On CUDA, torch.utils.flop_counter registers the fused kernels:
        # the forward as the formula's two matmuls (QK^T, PV), the backward
        # as five, the recomputed QK^T included, against the formula's four.
        # So the count is the formula plus at most one more 2Lhs-per-token matmul,
        # a sixth of the attention term.
        extra = v["count_attn_share_tiny"] / 6
        assert 1 - 1e-9 <= v["count_sdpa_ratio"] <= 1 + extra + 1e-9


def test_palm_worked_example_and_table(v):
    # PaLM (arXiv:2204.02311) App. B: MT-NLG at 65.43K tokens/s on 2240 A100s
    # (312 TFLOP/s) is 29.7 % MFU without attention; Table 3 prints 30.2 % with it,
    # and PaLM's own 46.2 % MFU and 57.8 % HFU. The page prints them to 0.1 %,
    # so round to three places.
    assert v["palm_mt_tokens"] == 65.43 and v["palm_a100_peak"] == 312
    assert round(v["palm_mt_6n"], 3) == 0.297
    assert round(v["palm_mt_full"], 3) == 0.302
    assert v["palm_mfu"] == 0.462 and v["palm_hfu"] == 0.578
    # Full recompute adds one forward to three passes: HFU = 4/3 MFU (PaLM App. B).
    assert v["palm_mt_hfu"] == pytest.approx(4 / 3 * v["palm_mt_full"], rel=1e-12)
    # Smith et al. 2022 call it 530B; its matmul weights alone
    # are 529.5B (within 0.2 %).
    assert v["palm_mt_n"] == pytest.approx(530, rel=0.002)


def test_mt_nlg_reported_throughput_is_an_hfu(v):
    """MT-NLG trained with activation checkpointing, so its
    40.3 % is its actual HFU, and its reported 126 TFLOP/s per GPU counts the
    recompute. Independent check: Narayanan et al. 2021 (arXiv:2104.04473,
    App.) count F = 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs an iteration, the
    recomputed forward included (4 passes of 24 B s l h^2). For MT-NLG (l = 105,
    h = 20480, s = 2048, V = 50272) at PaLM's 65.43K tokens/s on 2240 GPUs, by
    hand: 96 x 105 x 20480^2 = 4.2278e12 FLOPs a token, x (1 + 0.016667 +
    0.001461) = 4.3044e12; x 65,430 / 2240 = 125.7 TFLOP/s, the 126 Smith et
    al. 2022 report. Without the recompute (72 instead of 96) it would be 94."""
    per_token = (
        96 * 105 * 20480**2 * (1 + 2048 / (6 * 20480) + 50272 / (16 * 105 * 20480))
    )
    narayanan_tflops = per_token * 65.43e3 / 2240 / 1e12
    assert narayanan_tflops == pytest.approx(126, abs=0.5)
    assert 72 / 96 * narayanan_tflops == pytest.approx(94.3, abs=0.1)
    assert v["palm_mt_reported"] == pytest.approx(126 / 312, rel=EXACT)  # 40.4 %
    # PaLM's 30.2 % x 4/3 = 40.3 %: the reported figure is the HFU, to within
    # the LM head, which Narayanan's formula does not recompute (6Vh, not 8Vh)
    assert v["palm_mt_hfu"] == pytest.approx(v["palm_mt_reported"], abs=0.002)
    assert round(v["palm_mt_hfu"], 3) == 0.403


def test_the_flop_convention_is_credited_only_where_stated():
    """PaLM's App. B states 6N + 12Lhs (as 6N + 12LHQT);
    Llama 3's Table 4 gives MFU without a formula; Megatron-LM's published
    throughputs (Narayanan et al. 2021) count the recomputed forward. No page
    may credit the convention to Llama 3 or Megatron-LM."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for page in ("notebooks/mfu.md", "book/plan.md"):
        text = " ".join((root / page).read_text().split())
        for sentence in re.split(r"(?<=\.)\s", text):
            names_them = re.search(r"Llama 3|Megatron", sentence)
            if names_them and re.search(r"12Lhs|attention term", sentence):
                # only a sentence that says what they do count may name them
                assert re.search(r"without a formula|recompute", sentence), (
                    page,
                    sentence,
                )
        assert "without a formula" in text, page
        assert "narayanan2021efficient" in text, page


def test_measured_mfu_is_physical_and_consistent(v):
    # No step runs faster than the nominal peak (mlbook.mfu.formulas.mfu would
    # have refused it), and none faster than the best matmul of its dtype on its
    # device (the page asserts it too).
    assert 0 < v["meas_mfu_nominal"] <= 1
    # a physical bound, with the margin the run measured (its steps' spread)
    assert 0 < v["mfu_step_vs_ceiling"] <= 1 + v["mfu_step_spread"]
    assert 0 < v["meas_ceiling_frac"] < 1  # a sweep never beats the datasheet
    assert v["meas_tokens_per_s"] > 0 and v["meas_square"] > 0 and v["meas_shapes"] >= 1
    # The numbers it prints describe one step: tokens/s x FLOPs = MFU x peak
    # = (step / ceiling) x ceiling = (step / square) x square.
    achieved = v["meas_mfu_nominal"] * v["meas_peak"]
    assert v["mfu_step_vs_ceiling"] * v["meas_ceiling"] == pytest.approx(
        achieved, rel=EXACT
    )
    assert v["meas_step_vs_square"] * v["meas_square"] == pytest.approx(
        achieved, rel=EXACT
    )
    assert v["meas_ceiling_frac"] == pytest.approx(
        v["meas_ceiling"] / v["meas_peak"], rel=EXACT
    )
    # the single square shape is one of the shapes a sweep may find,
    # never above the ceiling by more than the drift between their measurements;
    # both are multiples of 64 or the model's
    assert v["meas_gemm_n"] == 256  # the test-size probe
    # The best shape is a grid shape (multiples of 256 from 256) or one of the
    # step's own GEMMs; at test sizes (h=128, d_ff=512, V=512, 4 x 64 tokens)
    # all are multiples of 64.
    assert all(
        v[f"meas_ceiling_{d}"] % 64 == 0 and v[f"meas_ceiling_{d}"] >= 64 for d in "mnk"
    )


def test_the_rule_of_thumb_counts_every_parameter(v):
    """Errata item 15: one N for 6ND on the page. The box's rule of thumb
    takes N = all parameters of the shape, as the live planner and mfu-1 do,
    so the 70B case is 45.4 days everywhere (the old table's "N as named",
    70e9, gave 45.0). By hand, at 40 % MFU on H100s (989 TFLOP/s), 86,400 s:
      8B:   N = 8,030,261,248: 6 N 15e12 / (1024 x 989e12 x 0.4 x 86400) = 20.649
      70B:  N = 70,553,706,496: 6 N 15e12 / (4096 x ...) = 45.355
      405B: N = 405,853,388,800: 6 N 15.6e12 / (16384 x ...) = 67.835
    (the presets' counts, tests/test_live_units.py and test_plan.py write
    them out: embedding, matmul weights and 2L + 1 norm gains)."""
    assert v["plan_mfu"] == 0.4 and v["plan_peak"] == 989 and v["plan_s"] == 8192
    n = {"8B": 8_030_261_248, "70B": 70_553_706_496, "405B": 405_853_388_800}
    cases = {"8B": (15e12, 1024), "70B": (15e12, 4096), "405B": (15.6e12, 16384)}
    for k, (d, g) in cases.items():
        days = 6 * n[k] * d / (g * 989e12 * 0.4 * 86_400)
        assert v[f"plan_{k}"] == pytest.approx(days, rel=EXACT), k
        assert v[f"plan_{k}_n"] == pytest.approx(n[k] / 1e9, rel=EXACT), k
    assert round(v["plan_70B"], 1) == 45.4
    # the BRIEF's rounded 21, 45 and 68 days stand with every parameter counted
    assert [round(v[f"plan_{k}"]) for k in cases] == [21, 45, 68]


def test_the_planner_shows_the_pages_two_conventions(v):
    """The live planner's default marks the page's default (6 N_matmul +
    12Lhs) and names the box's 6ND beside it: 51.6 and 45.4 days for 70B."""
    from mlbook.mfu import live

    title = live.training_days_planner(**live.training_days_planner.live.values())
    title = title["title"]["text"]
    assert f"{v['plan_70B_attn']:.1f} days on 4,096" in title
    assert f"({v['plan_70B']:.1f} by 6ND)" in title


def test_days_with_the_attention_term(v):
    # Equation eq-mfu's count: 6 N_matmul + 12Lhs, N_matmul from the shapes (GQA:
    # K and V are h x 1024 with 8 KV heads of 128; V = 128,256; the embedding is
    # a gather), by hand:
    #   8B:   32 (2 * 4096^2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096
    #         = 7,504,658,432
    #   70B:  80 (2 * 8192^2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 128256 * 8192
    #         = 69,501,714,432
    #   405B: 126 (2 * 16384^2 + 2 * 16384 * 1024 + 3 * 16384 * 53248)
    #         + 128256 * 16384 = 403,747,897,344
    n_mm = {"8B": 7_504_658_432, "70B": 69_501_714_432, "405B": 403_747_897_344}
    for k, n in n_mm.items():
        assert v[f"plan_{k}_nmm"] == pytest.approx(n / 1e9, rel=EXACT)
    # at s = 8192 the attention term 12Lhs against 6 N_matmul:
    #   8B:   12 * 32 * 4096 * 8192 = 12,884,901,888 / 45,027,950,592 = 0.286153
    #   70B:  12 * 80 * 8192 * 8192 = 64,424,509,440 / 417,010,286,592 = 0.154491
    #   405B: 12 * 126 * 16384 * 8192 = 202,937,204,736 / 2,422,487,384,064
    #         = 0.083772
    assert v["plan_8B_extra"] == pytest.approx(0.286153, abs=1e-6)
    assert v["plan_70B_extra"] == pytest.approx(0.154491, abs=1e-6)
    assert v["plan_405B_extra"] == pytest.approx(0.083772, abs=1e-6)
    # the same 40 % counted as eq-mfu counts: (6 N_matmul + 12Lhs) D / (G x 989e12
    # x 0.4 x 86400): 57,912,852,480 x 15e12 / 3.50002e22 = 24.8197;
    # 481,434,796,032 x 15e12 / 1.40001e23 = 51.5821;
    # 2,625,424,588,800 x 15.6e12 / 5.60002e23 = 73.1365
    assert v["plan_8B_attn"] == pytest.approx(24.8197, abs=1e-4)
    assert v["plan_70B_attn"] == pytest.approx(51.5821, abs=1e-4)
    assert v["plan_405B_attn"] == pytest.approx(73.1365, abs=1e-4)
    # "the smaller the model, the larger the attention's share"
    assert v["plan_8B_extra"] > v["plan_70B_extra"] > v["plan_405B_extra"]


def test_the_matmul_ceiling_table_sets_gpus_beside_this_machine(v):
    """Issue 46: Bekman's BF16 MAMF rows in the same table as the measured
    ceiling (ML Engineering, compute/accelerator, "Maximum Achievable Matmul
    FLOPS comparison table": H100 SXM 794.5 of 989, A100 SXM 271.2 of 312)."""
    import nbformat
    from test_page_pattern import visible_text

    from conftest import BOOK_DEST

    assert v["mamf_h100_frac"] == pytest.approx(794.5 / 989, rel=EXACT)  # 80.3 %
    assert v["mamf_a100_frac"] == pytest.approx(271.2 / 312, rel=EXACT)  # 86.9 %
    nb = nbformat.read(BOOK_DEST / "src" / "notebooks" / "mfu.ipynb", as_version=4)
    tables = [
        visible_text(c.get("outputs", []))
        for c in nb.cells
        if c.cell_type == "code" and "MAMF ceiling (GFLOP/s)" in str(c.outputs)
    ]
    (shown,) = tables
    for want in ("measured here", "NVIDIA H100 SXM", "80.3%", "794,500"):
        assert want in shown, want
    for want in ("NVIDIA A100 SXM", "86.9%", "271,200", "Bekman"):
        assert want in shown, want


def _math_block(text: str, label: str) -> str:
    import re

    m = re.search(r"```\{math\}\n:label: " + label + r"\n(.*?)```", text, re.S)
    assert m, label
    return m[1]


def test_the_equations_write_n_matmul_where_they_mean_it(v):
    """Errata item 8: every computation behind equations eq-train-flops,
    eq-mfu and eq-days counts N_matmul (the LM head in, the embedding gather
    out), and the equations say so: no bare 6N in them. The glued FLOPs a
    token of Llama-2-7B at s = 4096 are 6 N_matmul + 12Lhs by hand, not
    6N + 12Lhs with all parameters (N = 6,738,415,616)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "notebooks/mfu.md").read_text()
    for label in ("eq-train-flops", "eq-mfu", "eq-days"):
        block = _math_block(text, label)
        assert r"6N_\text{matmul}" in block, label
        assert "6N +" not in block and "6N\\," not in block, label
    by_hand = 6 * 6_607_077_376 + 12 * 32 * 4096 * 4096  # 46,084,915,200
    assert v["l7_train"] * 1e9 == pytest.approx(by_hand, rel=EXACT)
    assert v["l7_train"] * 1e9 != pytest.approx(
        6 * 6_738_415_616 + 12 * 32 * 4096 * 4096, rel=1e-3
    )


def test_the_ceiling_is_called_a_measured_bound():
    """Errata item 11: the MAMF ceiling is the best of a finite sweep, and the
    step is credited with the whole attention square a fused causal kernel
    halves: a measured bound, not a physical one."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "notebooks/mfu.md").read_text()
    prose = " ".join(text.split())
    assert "measured bound, not a physical one" in prose
    assert re.search(r"best of the shapes a finite sweep tried", prose)
    assert re.search(r"fused causal kernel computes about half", prose)
    assert not re.search(r"(?<!not )a physical bound", prose)
