"""bench.png (roles/bench/files/plot_bench.py) for a profile without bands and for a run whose every level failed."""

from __future__ import annotations

import importlib.util

from conftest import ROOT

spec = importlib.util.spec_from_file_location("plot_bench", ROOT / "roles/bench/files/plot_bench.py")
plot_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_bench)

MEASURED = {
    "checks": [{"name": "requests", "measured": 54, "status": "fail"}],
    "scenarios": {
        "concurrency": [
            {"max_concurrency": 1, "decode_throughput": 370.4},
            {"max_concurrency": 4, "decode_throughput": 1681.8},
        ],
        "ttft": [{"prompt_tokens": 80, "mean_ttft_ms": 12.8}, {"prompt_tokens": 960, "mean_ttft_ms": 22.4}],
    },
}


def test_without_bands_the_measured_figures_are_plotted(tmp_path):
    assert plot_bench.decode_points(MEASURED) == ([1, 4], [370.4, 1681.8])
    assert plot_bench.ttft_points(MEASURED) == ([80, 960], [0.0128, 0.0224])
    plot_bench.plot(MEASURED, {}, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").stat().st_size > 1000


def test_judged_figures_come_first():
    judged = {
        **MEASURED,
        "checks": [{"name": "decode_tok_s@16", "measured": 390.0}, {"name": "ttft_s@80", "measured": 0.3}],
    }
    assert plot_bench.decode_points(judged) == ([16], [390.0])
    assert plot_bench.ttft_points(judged) == ([80], [0.3])


def test_a_run_with_no_figure_still_plots(tmp_path):
    """Every level failed: no point at all, and no log axis to refuse the empty data."""
    plot_bench.plot({"checks": [], "scenarios": {"concurrency": [], "ttft": []}}, {}, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").exists()
