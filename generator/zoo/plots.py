"""Figures 3, 4 and 5 of the paper for our zoo (matplotlib, Agg, PNG).

Each of our points is one verified certificate (a results.csv row with status
"verified"); the paper's points are its Table 1 rows (FLOPs and unexplained
dimensions as the powers of two it reports, bounds as mean ± sd bars) and,
in Figure 4, its §3.1 range of EQKE σ1/σ2.  Axes the paper draws on a log
scale (FLOPs, unexplained dimensions) are log here.
"""

from __future__ import annotations

from pathlib import Path

from . import jobs
from .paper import EQKE_SIGMA_RATIO_MEAN, EQKE_SIGMA_RATIO_SD, PAPER_MODELS, TABLE1

DPI = 110
SIZE = (7.5, 5.0)  # inches
PAPER_STYLE = {"fmt": "s", "mfc": "none", "color": "0.35", "capsize": 3, "ms": 7}
FIGURES = (("fig3_length_vs_bound.png", "Figure 3: proof length vs. normalized bound"),
           ("fig4_bound_vs_sigma_ratio.png", "Figure 4: normalized bound vs. EQKE σ1/σ2"),
           ("fig5_length_vs_unexplained.png",
            "Figure 5: proof length vs. unexplained dimensionality"))


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _verified(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == jobs.VERIFIED]


def _family_marker(name: str) -> str:
    """One marker per strategy family, so that series stay apart without colour."""
    if name == "cubic":
        return "s"
    if name == "exact":
        return "D"
    if name.startswith("brute"):
        return "*"
    if "err=svd" in name:
        return "X"
    if "attn=" in name and "eu=" in name:
        return "P"
    if "attn=" in name:
        return "^"
    if "eu=" in name:
        return "v"
    return "o"


def _colors(rows: list[dict]) -> dict:
    """strategy -> (colour, marker): a distinct colour per strategy (tab20, then tab20b)
    and a marker per strategy family."""
    names = list(dict.fromkeys(r["strategy"] for r in rows))
    plt = _plt()
    palette = [plt.get_cmap("tab20")(i) for i in range(0, 20, 2)] + \
        [plt.get_cmap("tab20")(i) for i in range(1, 20, 2)] + \
        [plt.get_cmap("tab20b")(i) for i in range(20)]
    return {n: (palette[i % len(palette)], _family_marker(n)) for i, n in enumerate(names)}


def _scatter(ax, pts, style, label) -> None:
    color, marker = style
    ax.scatter(*zip(*pts), color=color, marker=marker, s=22, label=label, edgecolors="none")


def _legend_outside(ax, fontsize: int = 7) -> None:
    """The legend right of the axes: it never hides a data point or the paper's markers."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0, frameon=False)


def _note(ax, text: str, where: tuple[float, float] = (0.5, 0.5)) -> None:
    import textwrap

    ax.text(*where, textwrap.fill(text, 50), transform=ax.transAxes, fontsize=8, color="0.3",
            ha="center", va="center", bbox={"fc": "white", "ec": "0.8"})


def _spread(ys: list[float], gap: float, xs: list[float] | None = None) -> list[float]:
    """Label heights for points at heights ys (any order): each at least `gap`
    above the previous, as close to its point as that allows (of points at
    one height, the rightmost keeps it: the others' labels then pass above it)."""
    xs = xs or [0.0] * len(ys)
    order = sorted(range(len(ys)), key=lambda i: (ys[i], -xs[i]))
    out, last = [0.0] * len(ys), float("-inf")
    for i in order:
        out[i] = last = max(ys[i], last + gap)
    return out


def _label_points(ax, points: list[tuple[float, float, str]], gap: float, log_y: bool,
                  at_right_edge: bool = False) -> None:
    """One label per distinct point (labels of coinciding points joined),
    moved apart vertically so that none overlap, a thin line to the point;
    just right of the point (log x axes) or right of the axes."""
    import math

    merged: dict[tuple[float, float], list[str]] = {}
    for x, y, label in points:
        merged.setdefault((x, y), []).append(label)
    keys = list(merged)
    ys = [math.log2(y) if log_y else y for _, y in keys]
    for (x, y), ly in zip(keys, _spread(ys, gap, [k[0] for k in keys])):
        text_y = 2 ** ly if log_y else ly
        where, coords = (((1.03, text_y), ax.get_yaxis_transform()) if at_right_edge
                         else ((x * 1.6, text_y), "data"))
        ax.annotate("; ".join(merged[(x, y)]), (x, y), xytext=where, textcoords=coords,
                    fontsize=6, color="0.35", va="center", ha="left", annotation_clip=False,
                    # the leader starts at the label's left end and ends on its own point
                    arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5,
                                "relpos": (0.0, 0.5), "shrinkA": 0, "shrinkB": 3})


def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (shorter and tighter),
    sorted by length: the frontier Figure 3 draws."""
    best, frontier = float("-inf"), []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if y > best:
            frontier.append((x, y))
            best = y
    return frontier


def _paper_length_bound(ax) -> None:
    for i, prow in enumerate(TABLE1):
        ax.errorbar([2.0 ** prow.log2_flops], [prow.bound_mean], yerr=[prow.bound_sd],
                    label=f"paper ({PAPER_MODELS} models, est. FLOPs)" if i == 0 else None,
                    **PAPER_STYLE)
    _label_points(ax, [(2.0 ** p.log2_flops, p.bound_mean, p.label) for p in TABLE1],
                  gap=0.045, log_y=False)


def figure3(rows: list[dict], path: Path) -> None:
    """Normalized bound vs. proof length: (a) checker work with the paper's
    FLOPs beside it, (b) certificate bytes; Pareto frontiers dashed."""
    plt = _plt()
    ok = [r for r in _verified(rows) if r.get("normalized_bound") is not None]
    colors = _colors(rows)
    fig, axes = plt.subplots(1, 2, figsize=(SIZE[0] * 1.7, SIZE[1]))
    for ax, key, xlabel in ((axes[0], "checker_work",
                             "proof length: checker work (scalar interval ops) / paper: "
                             "est. FLOPs"),
                            (axes[1], "cert_bytes", "proof length: certificate size (bytes)")):
        have = [r for r in ok if r.get(key) not in (None, "")]
        for name in colors:
            pts = [(float(r[key]), r["normalized_bound"]) for r in have if r["strategy"] == name]
            if pts:
                _scatter(ax, pts, colors[name], f"ours: {name}")
        front = pareto([(float(r[key]), r["normalized_bound"]) for r in have])
        if len(front) > 1:
            ax.plot(*zip(*front), "k--", lw=1, label="ours: Pareto frontier")
        if key == "checker_work":
            _paper_length_bound(ax)
            if not have:
                _note(ax, "this check-cert reports no checker work: only the paper's points",
                      (0.6, 0.3))
        xs = [float(r[key]) for r in have] or [1.0]
        if key == "checker_work" or max(xs) > 10 * min(xs):
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("normalized accuracy bound b / s̄")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()  # one legend for both panels
    seen = dict(zip(labels, handles))
    for h, lab in zip(*axes[1].get_legend_handles_labels()):
        seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen), fontsize=7, loc="upper center",
               bbox_to_anchor=(0.5, 0.0), ncol=3, frameon=False)
    fig.suptitle(f"Fig. 3: proof length vs. bound ({len({r['model'] for r in rows})} models; "
                 "ours: every point a check-cert-verified certificate)", fontsize=10)
    _save(fig, path)


def figure4(rows: list[dict], path: Path) -> None:
    """Normalized bound vs. EQKE σ1/σ2 per strategy; the paper's σ-ratio range
    (§3.1) × each rank-1-EQKE (sub-cubic) row's bound range as boxes."""
    plt = _plt()
    ok = [r for r in _verified(rows) if r.get("normalized_bound") is not None
          and r.get("eqke_sigma_ratio") not in (None, "")]
    colors = _colors(rows)
    fig, ax = plt.subplots(figsize=SIZE)
    lo, hi = (EQKE_SIGMA_RATIO_MEAN - EQKE_SIGMA_RATIO_SD,
              EQKE_SIGMA_RATIO_MEAN + EQKE_SIGMA_RATIO_SD)
    for i, prow in enumerate(r for r in TABLE1 if r.subcubic):
        ax.add_patch(plt.Rectangle((lo, prow.bound_mean - prow.bound_sd), hi - lo,
                                   2 * prow.bound_sd, fill=False, ec="0.45", lw=1,
                                   label="paper: σ1/σ2 620 ± 130 × sub-cubic row's bound"
                                   if i == 0 else None))
    _label_points(ax, [(hi, p.bound_mean, p.label) for p in TABLE1 if p.subcubic], gap=0.045,
                  log_y=False, at_right_edge=True)
    for name in colors:
        pts = [(float(r["eqke_sigma_ratio"]), r["normalized_bound"]) for r in ok
               if r["strategy"] == name]
        if pts:
            _scatter(ax, pts, colors[name], f"ours: {name}")
    ax.set_xscale("log")
    ax.set_xlabel("EQKE σ1 / σ2 (first / second singular value)")
    ax.set_ylabel("normalized accuracy bound b / s̄")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
              frameon=False)  # below: the paper's labels sit at the right edge
    ax.set_title("Fig. 4: bound vs. how close EQKE is to rank 1\n(the paper plots its rank-1-EQKE "
                 "sub-cubic proofs; ours: every strategy that exists)", fontsize=9)
    _save(fig, path)


def figure5(rows: list[dict], path: Path) -> None:
    """Proof length (checker work; paper: est. FLOPs) vs. unexplained dimensions."""
    plt = _plt()
    have = [r for r in _verified(rows) if r.get("checker_work") not in (None, "")
            and r.get("unexplained_dims") not in (None, "")]
    colors = _colors(rows)
    fig, ax = plt.subplots(figsize=(SIZE[0] * 1.5, SIZE[1] * 1.2))  # room for the legend
    for i, prow in enumerate(TABLE1):
        ax.plot([2.0 ** prow.log2_unexplained], [2.0 ** prow.log2_flops], "s", mfc="none",
                color="0.35", ms=7, label=f"paper ({PAPER_MODELS} models)" if i == 0 else None)
    _label_points(ax, [(2.0 ** p.log2_unexplained, 2.0 ** p.log2_flops, p.label)
                       for p in TABLE1], gap=1.0, log_y=True)
    for name in colors:
        pts = [(float(r["unexplained_dims"]), float(r["checker_work"])) for r in have
               if r["strategy"] == name]
        if pts:
            _scatter(ax, pts, colors[name], f"ours: {name}")
    if not have:
        _note(ax, "this check-cert reports no checker work / unexplained dimensionality: "
                  "only the paper's points")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("unexplained dimensionality")
    ax.set_ylabel("proof length: checker work (scalar interval ops) / paper: est. FLOPs")
    ax.grid(True, which="both", alpha=0.3)
    _legend_outside(ax)
    ax.set_title("Fig. 5: proof length vs. unexplained dimensionality", fontsize=10)
    _save(fig, path)


def _save(fig, path: Path) -> None:
    """PNG via a temporary name and rename (a reader never sees half a file)."""
    tmp = path.with_name(".tmp-" + path.name)
    fig.tight_layout()
    fig.savefig(tmp, dpi=DPI, format="png", bbox_inches="tight")
    _plt().close(fig)
    tmp.replace(path)


def write_figures(out: Path, rows: list[dict]) -> None:
    for (name, _title), draw in zip(FIGURES, (figure3, figure4, figure5)):
        draw(rows, out / name)


def rows_from_csv(path: Path) -> list[dict]:
    """results.csv back into rows (numbers as numbers, blanks as None) for redrawing."""
    import csv

    def value(text: str):
        if text == "":
            return None
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
        return text

    with open(path, newline="") as f:
        return [{k: value(v) for k, v in row.items()} for row in csv.DictReader(f)]


def main(argv: list[str] | None = None) -> int:
    """python -m generator.zoo.plots REPORT_DIR: redraw the figures from its results.csv."""
    import sys

    out = Path((argv if argv is not None else sys.argv[1:])[0])
    write_figures(out, rows_from_csv(out / "results.csv"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
