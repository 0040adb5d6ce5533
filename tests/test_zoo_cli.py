"""certify-zoo's first-hour fixes (issue 19 item 3): a certificate check-cert refuses is
shown (report and summary), never "Failures: none"; --check-max-work reaches check-cert;
--strategies keeps the commas inside a variant's name."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("dask")
pytest.importorskip("matplotlib")

from generator.certify.strategies import STRATEGIES  # noqa: E402
from generator.zoo import jobs, report  # noqa: E402
from generator.zoo.cli import split_strategies  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_strategies_keep_the_commas_of_a_variant():
    text = "cubic,subcubic:direct=min,near=2,attn=rank1,err=mean+recursive,eu=lowrank1,exact"
    assert split_strategies(text, set(STRATEGIES)) == [
        "cubic", "subcubic:direct=min,near=2,attn=rank1,err=mean+recursive,eu=lowrank1",
        "exact"]


def test_check_max_work_reaches_check_cert():
    cert = ROOT / "certs" / "max3_v8_seed0.cubic.jsonl"
    model = ROOT / "generator" / "models" / "max3_v8_seed0.pt"
    row = jobs.check_certificate(str(cert), str(model), max_work=10)
    # a limit is not a verdict: FAILED, which the zoo does not cache (a rerun with a larger
    # --check-max-work checks it again)
    assert row["status"] == jobs.FAILED and "--check-max-work" in row["reason"], row
    assert jobs.check_certificate(str(cert), str(model))["status"] == jobs.VERIFIED


def test_a_refused_certificate_is_listed_in_the_report(tmp_path):
    rows = [{"strategy": "cubic", "model": "m.pt", "status": jobs.REJECTED,
             "reason": "subcubic_gap: the bound is not negative"}]
    run = {"strategies": ["cubic"], "failed": [], "retried": [], "project_version": "0",
           "seconds": 1.0, "peak_mib": 1.0, "computed": 1, "cached": 0}
    report.write_index(tmp_path / "index.html", rows, run)
    page = (tmp_path / "index.html").read_text()
    failures = page[page.index("<h2>Failures</h2>"):page.index("<h2>Retried jobs</h2>")]
    assert "the bound is not negative" in failures and "none" not in failures


def test_figures_give_every_strategy_its_own_style_and_are_linked(tmp_path):
    """Issue 19 item 7: no two series share a colour; a marker per strategy family; the
    report links each figure at full size (no 640 px cap)."""
    from generator.zoo import plots

    names = ["cubic", "exact", *[f"subcubic:direct=min,near={n}" for n in range(12)],
             "subcubic:direct=min,near=2,attn=rank4,err=cs,eu=lowrank1"]
    styles = plots._colors([{"strategy": n} for n in names])
    assert len({style[0] for style in styles.values()}) == len(names)
    assert styles["cubic"][1] != styles["exact"][1] != styles[names[-1]][1]
    rows = [{**{k: None for k in jobs.RESULT_FIELDS}, "strategy": "cubic", "model": "m.pt",
             "status": jobs.VERIFIED, "bound": 99, "exact": 100, "total": 100,
             "accuracy_bound": 0.99, "normalized_bound": 0.99, "checker_work": 1e6,
             "cert_bytes": 1e6, "eqke_sigma_ratio": 500.0, "unexplained_dims": 8000}]
    plots.write_figures(tmp_path, rows)
    run = {"strategies": ["cubic"], "failed": [], "retried": [], "project_version": "0",
           "seconds": 1.0, "peak_mib": 1.0, "computed": 1, "cached": 0}
    report.write_index(tmp_path / "index.html", rows, run)
    page = (tmp_path / "index.html").read_text()
    assert '<a href="fig3_length_vs_bound.png"><img' in page and "640px" not in page
