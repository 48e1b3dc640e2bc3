"""Figures show the numbers of the result objects, are labelled, and reject bad input clearly."""

import numpy as np
import pytest
import torch
from types import SimpleNamespace

from workbench.report import plots, widgets
from workbench.stats import statistics
from workbench.stats.statistics import AcceptanceResult
from workbench.core.errors import WorkbenchError
from workbench.stats.tap_stats import tap_statistics


def _result(spec, p, n=120, K=3, seed=0):
    rng = np.random.default_rng(seed)
    A = np.minimum(rng.geometric(1 - p, n) - 1, K)
    sample = np.repeat(np.arange(n // 10), 10)
    return AcceptanceResult.from_arrays(spec, K=K, sample=sample, t=np.tile(np.arange(10), n // 10), accepted=A,
                                        source=np.where(sample % 2 == 0, "code", "prose"), on_path=rng.random(n) < 0.4)


@pytest.fixture(scope="module")
def results():
    return {"embed,L1,L3": _result("embed,L1,L3", 0.2), "L1,L3,L4": _result("L1,L3,L4", 0.8, seed=1)}


def _labelled(fig):
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), ax


def test_acceptance_curves_plot_the_results_numbers(results):
    fig = plots.acceptance_curves(results)
    _labelled(fig)
    ax_c, ax_m = fig.axes
    for ax, key in ((ax_c, "conditional"), (ax_m, "cumulative")):
        lines = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        assert len(lines) == 2
        for ln, r in zip(lines, results.values()):
            np.testing.assert_allclose(ln.get_ydata(), getattr(r, key))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]     # one legend, under both panels
    assert any(lbl.startswith("embed,L1,L3") and f"{results['embed,L1,L3'].accept_length:.3f}" in lbl for lbl in labels)


def test_histogram_bars_are_shares_of_chains(results):
    fig = plots.accept_length_histogram(results)
    _labelled(fig)
    bars = fig.axes[0].patches
    r = results["embed,L1,L3"]
    heights = [b.get_height() for b in bars[: r.steps + 1]]
    np.testing.assert_allclose(heights, r.histogram / r.histogram.sum())


def test_other_acceptance_figures(results, tmp_path):
    figs = [plots.decode_path_comparison(results), plots.by_source(results),
            plots.speedup_projection(results, ratio=0.1)]
    for fig in figs:
        _labelled(fig)
        assert fig.axes[0].get_legend() is not None or fig.legends
    heights = [b.get_height() for b in figs[0].axes[0].patches]
    assert heights[0] == pytest.approx(results["embed,L1,L3"].accept_length)
    assert heights[2] == pytest.approx(results["embed,L1,L3"].decode_path["accept_length"])
    sp = results["L1,L3,L4"].speedup(0.1)
    bars = [c for c in figs[2].axes[0].containers if c.get_label().startswith("L1,L3,L4")][0]
    np.testing.assert_allclose(bars.lines[0].get_ydata(), [d["speedup"] for d in sp])
    path = plots.save(figs[0], tmp_path / "dp.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_speedup_without_any_cost_ratio_is_a_clear_error(results):
    with pytest.raises(WorkbenchError, match="cost ratio"):
        plots.speedup_projection(results)


def test_tap_statistics_make_the_embedding_stand_out():
    torch.manual_seed(0)
    h = torch.randn(2, 6, 16)
    feats = {"embed": 0.02 * torch.randn(2, 6, 16)}
    for k in range(4):
        h = h + 0.3 * torch.randn(2, 6, 16)
        feats[f"L{k}"] = h.clone()
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    stats = tap_statistics([SimpleNamespace(features=feats, attention_mask=mask)])
    assert stats.taps == ["embed", "L0", "L1", "L2", "L3"] and stats.n_tokens == 9
    frame = stats.to_frame()
    assert frame.loc["embed", "norm_mean"] < 0.1 * frame.loc["L0", "norm_mean"]
    assert frame.loc["embed", "mean_cos_to_others"] < 0.3 < frame.loc["L2", "mean_cos_to_others"]
    np.testing.assert_allclose(np.diag(stats.cosine), 1.0, atol=1e-9)
    fig = plots.tap_stats_figure(stats, highlight={"trained on": ["embed", "L0", "L2"], "served": ["L0", "L2", "L3"]})
    _labelled(fig)
    # the title states what these numbers show, no conclusion written in advance
    ratio = np.median(stats.norms["embed"]) / np.median([np.median(stats.norms[f"L{k}"]) for k in range(4)])
    cos = np.mean([stats.cosine[0, i] for i in range(1, 5)])
    assert fig.texts[0].get_text().replace("\n", " ") == (f"Tap feature statistics: the embedding's median norm is {ratio:.2g}× the "
                                       f"layer outputs' (median over layers); its mean cosine with them is {cos:.2f}")
    same = tap_statistics([SimpleNamespace(features={"L0": feats["L0"], "L1": feats["L1"]},
                                                      attention_mask=mask)])
    assert "embedding" not in plots.tap_stats_figure(same).texts[0].get_text()
    with pytest.raises(WorkbenchError, match="tap 'L9' was not captured"):
        tap_statistics([SimpleNamespace(features=feats, attention_mask=mask)], ["L9"])


def test_tokens_html_escapes_and_colours_by_accepted_count():
    h = plots.tokens_html(["<script>alert(1)</script>", "a&b", "\n"], [None, 0, 3], K=3, n_prompt_tokens=1)
    assert "<script>" not in h and "&lt;script&gt;alert(1)&lt;/script&gt;" in h and "a&amp;b" in h
    assert h._repr_html_() == str(h)
    assert "no counted chain" in h and "3 of 3 draft tokens accepted" in h and "0 of 3" in h
    with pytest.raises(WorkbenchError, match="2 tokens but 1"):
        plots.tokens_html(["a", "b"], [1], K=2)


def test_sample_accepted_puts_each_chain_on_its_bonus_token():
    r = AcceptanceResult.from_arrays("L1", K=2, sample=[5, 5, 6], t=[0, 2, 0], accepted=[2, 1, 0])
    assert plots.sample_accepted(r, 5, 5) == [None, 2, None, 1, None]
    with pytest.raises(WorkbenchError, match="sample 9 has no counted chains"):
        plots.sample_accepted(r, 9, 5)


def test_bad_results_input_is_a_clear_error():
    with pytest.raises(WorkbenchError, match="no acceptance results"):
        plots.acceptance_curves({})
    with pytest.raises(WorkbenchError, match="expected an AcceptanceResult"):
        plots.acceptance_curves({"x": 1.0})


def test_lengths_by_source():
    rows = [{"source": s, "n_prompt_tokens": 4 + i, "n_response_tokens": 10 + i} for i, s in enumerate("aabb")]
    fig = plots.lengths_by_source(rows)
    _labelled(fig)
    assert sum(len(c.get_offsets()) for c in fig.axes[0].collections) == 4          # one dot a row
    with pytest.raises(WorkbenchError, match="no rows"):
        plots.lengths_by_source([])


class _Tok:
    def decode(self, ids):
        return f"<t{ids[0]}>"


def test_widget_updates_and_report_mode_shows_static_views(results, monkeypatch):
    import ipywidgets

    rows = [{"input_ids": list(range(12)), "_row": 0, "n_prompt_tokens": 2}]
    monkeypatch.delenv("WORKBENCH_REPORT", raising=False)
    w = widgets.acceptance_explorer(results, rows, _Tok(), K=2)
    assert isinstance(w, ipywidgets.VBox)
    dropdown, k_slider, _ = w.children[0].children
    image, html = w.children[1:]      # no Output widget (issue 34): the kernel sets an Image's and an HTML's value
    assert not any(isinstance(c, ipywidgets.Output) for c in w.children)
    assert dropdown.options == tuple(results) and k_slider.max == 3 and k_slider.value == 2
    dropdown.value = "L1,L3,L4"  # the view follows the selection
    shown, static = [], getattr(widgets, "_static")

    def spy(*args):
        views = static(*args)
        shown.extend(views)
        return views
    monkeypatch.setattr(widgets, "_static", spy)
    k_slider.value = 1           # the K slider acts: curves to depth 1, the title and the tokens follow
    fig, tokens = shown[-2:]
    assert "(K=1)" in fig.texts[0].get_text() and "chain K=1" in fig.texts[0].get_text()
    assert len(fig.axes[0].lines[0].get_xdata()) == 1
    assert "K=1" in tokens and "wiring L1,L3,L4" in tokens
    assert bytes(image.value).startswith(b"\x89PNG") and html.value == str(tokens)
    k_slider.value = 3
    assert "(K=3)" in shown[-2].texts[0].get_text() and len(shown[-2].axes[0].lines[0].get_xdata()) == 3
    shown.clear()
    monkeypatch.setattr(widgets, "_static", static)
    monkeypatch.setattr(widgets, "_display", lambda *objs: shown.extend(objs))
    monkeypatch.setenv("WORKBENCH_REPORT", "1")
    assert widgets.acceptance_explorer(results, rows, _Tok(), wiring="L1,L3,L4") is None
    assert len(shown) == 2 and "wiring L1,L3,L4" in shown[1] and "&lt;t1&gt;" in shown[1]
    with pytest.raises(WorkbenchError, match="K=7 is out of range"):
        widgets.acceptance_explorer(results, rows, _Tok(), K=7)
    with pytest.raises(WorkbenchError, match="wiring 'L9'"):
        widgets.acceptance_explorer(results, rows, _Tok(), wiring="L9")


def test_rewire_bars_show_before_after_reference_and_the_recovered_share():
    from workbench.analysis.rewire import RewireResult

    before, after, ref = _result("L1,L3,L4", 0.2), _result("L1,L3,L4", 0.6, seed=1), _result("embed,L1,L3", 0.8, seed=2)
    res = RewireResult(from_taps=("embed", "L1", "L3"), to_taps=("L1", "L3", "L4"), engine="sglang", resolution="",
                       out=None, ridge=None, refit_info={}, K=3, before=before, after=after, reference=ref)
    fig = plots.rewire_bars(res)
    _labelled(fig)
    (ax,) = fig.axes
    heights = [p.get_height() for p in ax.patches]
    dp = [r.decode_path["accept_length"] for r in (before, after, ref)]    # the decode path: what a server reports
    assert heights == pytest.approx(dp)
    assert "decode path" in ax.get_ylabel().replace("\n", " ")
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0].startswith("before") and "fed L1,L3,L4" in labels[0] and labels[2].startswith("reference")
    share = (dp[1] - dp[0]) / (dp[2] - dp[0])                          # the title's share: the same numbers
    assert f"recovered {share:.1%} of the accept-length gap" in ax.get_title().replace("\n", " ")   # the summary's rounding
    res.after_closed_form = _result("L1,L3,L4", 0.4, seed=3)           # fine-tuned: the closed form shows too
    assert [t.get_text().split("\n")[0] for t in plots.rewire_bars(res).axes[0].get_xticklabels()] == \
        ["before", "closed form", "after", "reference"]
    res.before = None                                                   # not evaluated: a clear error
    with pytest.raises(WorkbenchError, match="eval_data"):
        plots.rewire_bars(res)


def test_real_targets_figures_pass_the_layout_check():
    """Found on the real demo (SmolLM2, 30 layers): the tap statistics of 32 taps ran their labels into each other,
    and the rewire title of its tap names reached outside the figure."""
    from workbench.analysis.rewire import RewireResult
    from workbench.report.layout import assert_clean_layout
    from workbench.stats.tap_stats import tap_statistics

    torch.manual_seed(0)
    h, feats = torch.randn(2, 6, 16), {"embed": 0.02 * torch.randn(2, 6, 16)}
    for k in range(30):
        h = h + 0.3 * torch.randn(2, 6, 16)
        feats[f"L{k}"] = h.clone()
    feats["final"] = h + 0.1
    stats = tap_statistics([SimpleNamespace(features=feats, attention_mask=torch.ones(2, 6, dtype=torch.long))])
    assert len(stats.taps) == 32
    assert_clean_layout(plots.tap_stats_figure(stats, highlight={"trained on": ["embed", "L1", "L14"],
                                                                 "served": ["L1", "L14", "L26"]}))
    before, after, ref = _result("L1,L3,L4", 0.2), _result("L1,L3,L4", 0.6, seed=1), _result("embed,L1,L3", 0.8, seed=2)
    res = RewireResult(from_taps=("embed", "L1", "L14"), to_taps=("L1", "L14", "L26"), engine="sglang",
                       resolution="", out=None, ridge=None, refit_info={}, K=3, before=before, after=after,
                       reference=ref)
    assert_clean_layout(plots.rewire_bars(res))


def test_every_figure_passes_the_layout_check(results):
    """Issue 29: no clipped text, no legend over data or labels, no overlapping axes (workbench.report.layout);
    the notebooks run the same check inside their kernels on the real figures (test_notebooks.py)."""
    from workbench.core.setting import Setting
    from workbench.report.layout import assert_clean_layout, layout_problems
    from workbench.stats.cost import CostModel

    tree = _result("L1,L3,L4", 0.8, seed=2)
    tree.setting = Setting(steps=tree.steps, eagle_topk=4, num_draft_tokens=8)
    noisy = CostModel(device="cpu", draft_step={1: 1e-3}, verify={1: 3e-3, 8: 4e-3},
                      spread={"draft_step": {1: [1e-3, 1.1e-3]}, "verify": {1: [2.6e-3, 12.4e-3], 8: [4e-3, 5e-3]}})
    for fig in (plots.acceptance_curves(results), plots.accept_length_histogram(results),
                plots.decode_path_comparison(results), plots.by_source(results),
                plots.speedup_projection(results, ratio=0.1), plots.speedup_projection(results, cost_model=noisy),
                plots.acceptance_curves({"L1,L3,L4 · chain K=3": results["L1,L3,L4"], "L1,L3,L4 · tree 3×4 N=8": tree})):
        assert_clean_layout(fig)
    # the check sees a legend put over the data
    fig = plots.accept_length_histogram(results)
    fig.axes[0].legend(loc="center", fontsize=40)
    assert any(p.startswith("legend covers data") for p in layout_problems(fig))
