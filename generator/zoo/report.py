"""The report directory: results.csv, table1.md, run.json, index.html (+ plots).

Every bound in table1.md is a mean over results.csv rows whose status is
"verified", i.e. over certificates check-cert accepted; each such row names
its certificate file and sha256.  A row of the paper's table that no strategy
of this project reproduces yet says so; nothing is filled in.
"""

from __future__ import annotations

import csv
import html
import io
import json
import statistics
from pathlib import Path

from . import jobs
from .catalog import paper_row
from .paper import PAPER, PAPER_MODELS, TABLE1
from .plots import FIGURES, write_figures  # matplotlib is imported when a figure is drawn

NOT_IMPLEMENTED = "not yet implemented"
COLUMNS = ("Proof (paper's row)", "our strategy", "complexity (paper)",
           f"paper b/s̄ ({PAPER_MODELS} models)", "ours b/s̄ (mean ± sd)",
           "ours certified accuracy (mean ± sd)", "verified / models", "paper est. FLOPs",
           "our checker work (median)", "paper unexplained dims", "our unexplained dims (median)")


def write_csv(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=jobs.RESULT_FIELDS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in jobs.RESULT_FIELDS})
    jobs._write_atomic(str(path), buf.getvalue().encode())


def mean_sd(values: list[float]) -> str:
    """'m ± s' (4 significant decimals; scientific below 1e-3); '' if empty."""
    if not values:
        return ""
    m = statistics.mean(values)
    s = statistics.stdev(values) if len(values) > 1 else 0.0
    if 0 < abs(m) < 1e-3:
        return f"({m:.3g} ± {s:.2g})"
    return f"{m:.4f} ± {s:.4f}"


def _median(values: list) -> str:
    values = [v for v in values if v is not None and v != ""]
    return f"{statistics.median(float(v) for v in values):.3g}" if values else ""


def strategy_cells(rows: list[dict], strategy: str) -> dict:
    """Our columns of the table for one strategy, from its verified rows."""
    mine = [r for r in rows if r["strategy"] == strategy]
    ok = [r for r in mine if r["status"] == jobs.VERIFIED]
    cells = {"our strategy": f"`{strategy}`",
             "ours b/s̄ (mean ± sd)": mean_sd([r["normalized_bound"] for r in ok
                                               if r.get("normalized_bound") is not None]),
             "ours certified accuracy (mean ± sd)": mean_sd([r["accuracy_bound"] for r in ok]),
             "verified / models": f"{len(ok)} / {len(mine)}",
             "our checker work (median)": _median([r.get("checker_work") for r in ok]),
             "our unexplained dims (median)": _median([r.get("unexplained_dims") for r in ok])}
    if len(ok) < len(mine):
        why = sorted({f"{r['status']}: {r.get('reason') or ''}".strip() for r in mine
                      if r["status"] != jobs.VERIFIED})
        cells["verified / models"] += " (" + "; ".join(why) + ")"
    return cells


def table1(rows: list[dict], strategies: list[str]) -> list[dict]:
    """The paper's rows with ours beside them, then our strategies it lacks."""
    by_row: dict[str, list[str]] = {}
    extra = []
    for name in strategies:
        label = paper_row(name)
        (by_row.setdefault(label, []) if label else extra).append(name)
    table = []
    for prow in TABLE1:
        paper_cells = {"Proof (paper's row)": prow.label, "complexity (paper)": prow.complexity,
                       f"paper b/s̄ ({PAPER_MODELS} models)": mean_sd_paper(prow),
                       "paper est. FLOPs": f"2^{prow.log2_flops}",
                       "paper unexplained dims": f"2^{prow.log2_unexplained}"}
        ours = by_row.get(prow.label) or [None]
        for name in ours:
            cells = (strategy_cells(rows, name) if name else
                     {"our strategy": NOT_IMPLEMENTED})
            table.append({c: "" for c in COLUMNS} | paper_cells | cells)
    for name in extra:
        table.append({c: "" for c in COLUMNS} | {"Proof (paper's row)": "(not in the paper)"}
                     | strategy_cells(rows, name))
    return table


def group_table(rows: list[dict], strategies: list[str], key: str) -> str:
    """Mean b/s̄ (and verified models) per strategy × value of `key` ("recipe": the
    training recipes of generator/recipes.py; "family": generator/zoo/families.py),
    pooled, and over the held-back split alone; '' when the rows have one value."""
    values = list(dict.fromkeys(r.get(key) or "other" for r in rows))
    if len(values) < 2:
        return ""
    groups = [(name, lambda r, n=name: (r.get(key) or "other") == n) for name in values]
    groups += [("pooled", lambda r: True),
               ("pooled, held-back split", lambda r: r.get("split") == "held-back")]
    lines = ["| strategy | " + " | ".join(g for g, _ in groups) + " |",
             "|---|" + "---|" * len(groups)]
    for name in strategies:
        cells = []
        for _, keep in groups:
            mine = [r for r in rows if r["strategy"] == name and keep(r)]
            ok = [r["normalized_bound"] for r in mine if r["status"] == jobs.VERIFIED
                  and r.get("normalized_bound") is not None]
            cells.append(f"{statistics.mean(ok):.4f} ({len(ok)}/{len(mine)})" if ok else
                         f"– (0/{len(mine)})")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def recipe_table(rows: list[dict], strategies: list[str]) -> str:
    """group_table by training recipe."""
    return group_table(rows, strategies, "recipe")


def _ratio(ratio: float | None) -> str:
    """'1/123' below 1 (the issue's scale), '1.03' at or above, '–' for none."""
    if not ratio:
        return "–"
    return f"1/{1 / ratio:,.0f}" if ratio < 1 else f"{ratio:.2f}"


def family_work_table(rows: list[dict], strategies: list[str]) -> str:
    """Per strategy × model family other than attn-only: mean b/s̄, the median of checker
    work / forward brute force's work (issue 23: ≤ 1/100 required) and the median check
    time, over verified certificates; '' when no row is of such a family."""
    families = list(dict.fromkeys(r.get("family") for r in rows
                                  if r.get("family") not in (None, "", "attn-only")))
    if not families:
        return ""
    lines = ["| strategy | family | b/s̄ (mean) | work / forward brute force (median) | "
             "check seconds (median) | verified / models |", "|---|---|---|---|---|---|"]
    for name in strategies:
        for family in families:
            mine = [r for r in rows if r["strategy"] == name and r.get("family") == family]
            ok = [r for r in mine if r["status"] == jobs.VERIFIED]
            if not mine:
                continue
            bounds = [r["normalized_bound"] for r in ok if r.get("normalized_bound") is not None]
            ratios = [float(r["checker_work"]) / float(r["forward_work"]) for r in ok
                      if r.get("checker_work") not in (None, "")
                      and r.get("forward_work") not in (None, "", 0)]
            ratio = statistics.median(ratios) if ratios else None
            cells = [f"{statistics.mean(bounds):.4f}" if bounds else "–",
                     _ratio(ratio),
                     _median([r.get("check_seconds") for r in ok]) or "–",
                     f"{len(ok)} / {len(mine)}"]
            lines.append(f"| `{name}` | {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mean_sd_paper(prow) -> str:
    if prow.bound_mean < 1e-3:
        return f"({prow.bound_mean:.3g} ± {prow.bound_sd:.2g})"
    return f"{prow.bound_mean} ± {prow.bound_sd}"


def unsound_rows(rows: list[dict]) -> list[dict]:
    """Verified bounds above the exact count: must never happen (a checker bug
    or an exact-count bug); the report lists them loudly."""
    return [r for r in rows if r["status"] == jobs.VERIFIED and r.get("exact") is not None
            and r["bound"] > r["exact"]]


def markdown_table(table: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in table:
        lines.append("| " + " | ".join(str(row[c]).replace("|", "\\|") for c in COLUMNS) + " |")
    return "\n".join(lines)


def describe_zoo(rows: list[dict], run: dict) -> str:
    models = {r["model"]: r for r in rows}
    dims = sorted({(r.get("d_vocab"), r.get("n_ctx"), r.get("d_model")) for r in models.values()},
                  key=str)
    dims_text = ", ".join(f"d_vocab {v}, n_ctx {k}, d_model {d}" for v, k, d in dims)
    return (f"{len(models)} models ({dims_text}); strategies: "
            + ", ".join(f"`{s}`" for s in run["strategies"])
            + f"; maxk-certify {run['project_version']}.")


def write_table1(path: Path, rows: list[dict], run: dict) -> None:
    table = table1(rows, run["strategies"])
    bad = unsound_rows(rows)
    text = [
        "# Table 1, reproduced", "",
        f"Ours: {describe_zoo(rows, run)}  Paper: {PAPER}, Table 1, {PAPER_MODELS} Max-of-4 "
        "models (d_vocab 64, d_model 32); its FLOPs and unexplained dimensions are rounded to "
        "powers of two.", "",
        "b/s̄ is the normalized accuracy bound: the correct count certified by a certificate "
        "that `check-cert` verified, divided by the exact count (float64 enumeration of every "
        "input, `generator.ground_truth`). \"Certified accuracy\" is the certified count over "
        "all d_vocab^n_ctx inputs: sound over the reals, no float64 in it. Every mean is over "
        "the `verified` rows of `results.csv`; each names its certificate (`cert_path`, "
        "`cert_sha256`). The paper's bounds were computed in float32 and trusted as is. "
        "Checker work (scalar interval operations) and unexplained dimensions are blank where "
        "this `check-cert` does not report them.", "",
        markdown_table(table), ""]
    by_recipe = recipe_table(rows, run["strategies"])
    if by_recipe:
        text += ["## Per training recipe", "",
                 "Mean b/s̄ over the verified certificates of each recipe's models (verified / "
                 "models in brackets); recipes in `generator/recipes.py`. The held-back split "
                 "(seed ≡ 4 mod 5) is never used to choose options or defaults.", "",
                 by_recipe, ""]
    by_family = group_table(rows, run["strategies"], "family")
    if by_family:
        text += ["## Per model family", "",
                 "Mean b/s̄ over the verified certificates of each family's models; families "
                 "in `generator/zoo/families.py` (a strategy that does not apply to a family "
                 "counts its models as unverified).", "", by_family, ""]
    work = family_work_table(rows, run["strategies"])
    if work:
        text += ["## LayerNorm / MLP families: proof length against forward brute force", "",
                 "Checker work (the certificate's proof length) over the work forward brute "
                 "force would be charged on the same model (`forward_work`: the checker's "
                 "per-sequence charge times d_vocab^n_ctx).", "", work, ""]
    if bad:
        text += ["## ALERT: verified bound above the exact count", "",
                 *(f"- {r['strategy']} on {r['model']}: bound {r['bound']} > exact "
                   f"{r['exact']}" for r in bad), ""]
    jobs._write_atomic(str(path), "\n".join(text).encode())


def write_index(path: Path, rows: list[dict], run: dict) -> None:
    table = table1(rows, run["strategies"])
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{esc(str(r[c]).strip('`'))}</td>" for c in COLUMNS)
                   + "</tr>" for r in table)
    figs = "".join(f'<figure><a href="{f}"><img src="{f}" alt="{esc(t)}"></a>'
                   f"<figcaption>{esc(t)} (click for full size)</figcaption></figure>"
                   for f, t in FIGURES if (path.parent / f).exists())
    failures = "".join(f"<li>{esc(f['job'])}: {esc('; '.join(f['failures']))}</li>"
                       for f in run["failed"])
    failures += "".join(  # certificates check-cert refused: a generator bug, never "none"
        f"<li>check-cert {esc(r['status'])}: {esc(r['strategy'])} on "
        f"{esc(str(r.get('model', '?')))}: {esc(str(r.get('reason', '')))}</li>"
        for r in rows if r.get("status") in (jobs.REJECTED, jobs.MALFORMED, jobs.FAILED))
    retried = "".join(f"<li>{esc(f['job'])}: {esc('; '.join(f['failures']))} "
                      f"({'recovered on retry' if f['recovered'] else 'failed again'})</li>"
                      for f in run["retried"])
    alerts = "".join(f"<li>{esc(r['strategy'])} on {esc(r['model'])}: bound {r['bound']} &gt; "
                     f"exact {r['exact']}</li>" for r in unsound_rows(rows))
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>certify-zoo report</title>
<style>body{{font-family:sans-serif;max-width:1400px;margin:1em auto}}
table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 6px}}
figure{{display:block;margin:8px 0}}img{{max-width:100%;height:auto}}.alert{{color:#b00}}</style>
</head><body>
<h1>certify-zoo report</h1>
<p>{esc(describe_zoo(rows, run).replace('`', ''))} Run: {run['seconds']:.0f} s wall,
peak memory {run['peak_mib']:.0f} MiB (all processes), {run['computed']} jobs computed,
{run['cached']} taken from the cache. Data: <a href="results.csv">results.csv</a>,
<a href="table1.md">table1.md</a>, <a href="run.json">run.json</a>.</p>
{'<h2 class="alert">ALERT: verified bound above exact count</h2><ul>' + alerts + '</ul>'
 if alerts else ''}
<h2>Table 1: paper vs. ours</h2>
<p>b/s̄ = certified count (check-cert verified) / exact count. Paper: {esc(PAPER)},
{PAPER_MODELS} models, float32, trusted.</p>
<table><tr>{head}</tr>{body}</table>
<h2>Figures</h2>{figs}
<h2>Failures</h2><ul>{failures or '<li>none</li>'}</ul>
<h2>Retried jobs</h2><ul>{retried or '<li>none</li>'}</ul>
</body></html>
"""
    jobs._write_atomic(str(path), page.encode())


def write_report(out: Path, rows: list[dict], run: dict) -> None:
    """Everything in the report directory `out` (figures first, index last)."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "results.csv", rows)
    jobs._write_atomic(str(out / "run.json"), (json.dumps(run, indent=1) + "\n").encode())
    write_table1(out / "table1.md", rows, run)
    write_figures(out, rows)
    write_index(out / "index.html", rows, run)
