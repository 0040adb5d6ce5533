"""Deliberate breaks of benchmarks/family_growth.py: each break is applied to the file,
tests/test_family_growth.py is run, and the file is restored (run from the repository root:
`python benchmarks/family_growth_breaks.py`; prints CAUGHT / NOT CAUGHT per break)."""
import os
import subprocess
import sys

P = "benchmarks/family_growth.py"
BREAKS = [
    ("brute force work without the tables",
     "    return forward_model.total_work(dims)",
     "    return forward_model.total_work(dims) - forward_model.table_cost(dims)"),
    ("exponent = log2 of the ratio (v ratio ignored)",
     "    return math.log(work_b / work_a) / math.log(v_b / v_a)",
     "    return math.log2(work_b / work_a)"),
    ("work ratio inverted",
     '        b["work_ratio"] = b["work"] / a["work"]',
     '        b["work_ratio"] = a["work"] / b["work"]'),
    ("row's work off by one",
     '"inputs": report["domain_inputs"], "work": report["work"],',
     '"inputs": report["domain_inputs"], "work": report["work"] + 1,'),
    ("accuracy against the first token instead of the max",
     "== tokens.max(axis=1)",
     "== tokens[:, 0]"),
    ("report of another model accepted",
     '        if report.get("domain_inputs") != d.d_vocab ** d.n_ctx:',
     '        if False:'),
    ("rotary / gelu models not refused",
     '    if f.n_layers != 1 or f.positional != "standard" or (f.d_mlp and f.act_fn != "relu"):',
     '    if f.n_layers != 1:'),
]
orig = open(P).read()
try:
    for name, old, new in BREAKS:
        assert orig.count(old) == 1, name
        open(P, "w").write(orig.replace(old, new))
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "tests/test_family_growth.py"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": os.getcwd()})
        last = r.stdout.strip().splitlines()[-1]
        print(f"{'CAUGHT' if r.returncode else 'NOT CAUGHT'}: {name}: {last}", flush=True)
finally:
    open(P, "w").write(orig)
