"""gen-cert --property overwhelm and check-cert on its certificates: single
claims, the scan mode (one certificate per proven prefix, a verdict line per
candidate), policies (--require), and the shipped task models' records."""

from __future__ import annotations

import json
from pathlib import Path

from overwhelm_fixtures import MODELS, SMALL_FLIPFLOP, SMALL_MAXANY

from checker.cli import main as check_cert
from generator.cli import main as gen_cert
from generator.modelfile import load_model


def test_single_claim_roundtrip(tmp_path, capsys):
    cert = tmp_path / "c.jsonl"
    assert gen_cert([str(SMALL_MAXANY), "--property", "overwhelm", "--prefix", "7", "--query",
                     "2", "--free", "3", "-o", str(cert)]) == 0
    assert "proved" in capsys.readouterr().out
    assert check_cert([str(cert), "--model", str(SMALL_MAXANY), "--json",
                       "--require", "property == overwhelm and free <= 2 and output == 7"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["verdict"] == "verified" and "free <= 3" in verdict["overwhelm"]
    # a policy asking for more than was proven is exit 1; an accuracy policy too
    for policy in ("free <= 4", "free_perm == [0, 0, 0, 0]", "accuracy >= 0.5", "output == 6"):
        assert check_cert([str(cert), "--require", policy]) == 1, policy
    assert check_cert([str(cert), "--require", "free_perm == [0, 6, 6]"]) == 0


def test_refuted_claim_writes_nothing(tmp_path, capsys):
    cert = tmp_path / "c.jsonl"
    code = gen_cert([str(SMALL_MAXANY), "--property", "overwhelm", "--prefix", "4", "--query",
                     "2", "--free", "2", "--target", "4", "-o", str(cert)])
    out = capsys.readouterr()
    assert code == 1 and not cert.exists()
    assert "refuted" in out.out and "counterexample" in out.out


def test_scan_writes_one_certificate_per_proven_prefix(tmp_path, capsys):
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("# flip-flop prefixes\n1\n0\n1,2,0\n0,3,1\n")
    out_dir = tmp_path / "certs"
    code = gen_cert([str(SMALL_FLIPFLOP), "--property", "overwhelm", "--scan", str(prefixes),
                     "--query", "4", "--free", "8", "--over", "2,3", "--out-dir", str(out_dir),
                     "-q"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and json.loads(lines[-1])["proved"] == 4
    assert sum(line.startswith("proved") for line in lines) == 4
    certs = sorted(out_dir.glob("*.jsonl"))
    assert len(certs) == 4
    for cert in certs:
        assert check_cert([str(cert), "--model", str(SMALL_FLIPFLOP)]) == 0
    capsys.readouterr()
    # scanning every one-token prefix with all tokens free: only writes can win, and
    # a free write can always override them
    code = gen_cert([str(SMALL_FLIPFLOP), "--property", "overwhelm", "--scan-all", "1",
                     "--query", "4", "--free", "2", "--out-dir", str(tmp_path / "none"), "-q"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and json.loads(lines[-1])["proved"] == 0 and len(lines) == 6


def test_bad_options_are_exit_2(capsys):
    assert gen_cert([str(SMALL_MAXANY), "--property", "overwhelm", "--prefix", "7"]) == 2
    assert gen_cert([str(SMALL_MAXANY), "--property", "overwhelm", "--prefix", "7",
                     "--query", "1", "--free", "9"]) == 2  # longer than n_ctx
    assert gen_cert([str(SMALL_MAXANY), "--property", "overwhelm", "--scan-all", "1",
                     "--query", "1", "--free", "1"]) == 2  # no --out-dir


def test_task_models_match_their_records():
    manifest = json.loads((MODELS / "models.json").read_text())["task_models"]["models"]
    assert {e["file"] for e in manifest} >= {Path(SMALL_MAXANY).name, Path(SMALL_FLIPFLOP).name}
    for entry in manifest:
        loaded = load_model(MODELS / entry["file"])
        assert loaded.file_sha256 == entry["sha256"]
        assert loaded.weights.dims.n_ctx == entry["dims"]["n_ctx"]


def test_audit_policy_on_an_overwhelm_certificate(tmp_path, capsys):
    """check-cert audit: an overwhelm certificate passes a policy its claim implies,
    and fails one it does not (free strings over all tokens)."""
    import shutil

    from checker.cli import main as check_main

    cert = tmp_path / "ff.jsonl"
    shutil.copy(SMALL_FLIPFLOP, tmp_path / SMALL_FLIPFLOP.name)
    assert gen_cert([str(SMALL_FLIPFLOP), "--property", "overwhelm", "--prefix", "1,2,0",
                     "--query", "4", "--free", "8", "--over", "2,3", "-o", str(cert)]) == 0
    policy = tmp_path / "POLICY"
    entry = f"ff.jsonl {SMALL_FLIPFLOP.name} property == overwhelm and "
    policy.write_text(entry + "free <= 5 over [3] and output == 0\n")
    assert check_main(["audit", str(policy)]) == 0
    policy.write_text(entry + "free <= 5 and output == 0\n")
    assert check_main(["audit", str(policy)]) == 1
    capsys.readouterr()


def test_family_model_scan_and_pin(tmp_path, capsys, monkeypatch):
    """On a LayerNorm + MLP + RoPE model: a scan writes one certificate per proven
    prefix (rule overwhelm_family) with a verdict per candidate; --pin records a
    single certificate in a policy whose audit passes."""
    small = MODELS / "maxany_v6_k6_ln_mlp_rope_seed0.pt"
    out = tmp_path / "certs"
    assert gen_cert([str(small), "--property", "overwhelm", "--scan-all", "1", "--query", "3",
                     "--free", "2", "--out-dir", str(out), "-q"]) == 1  # some prefixes refuted
    text = capsys.readouterr().out
    counts = json.loads(text.strip().splitlines()[-1])
    assert counts["proved"] >= 1 and counts["refuted"] >= 1, counts
    written = sorted(out.glob("*.jsonl"))
    assert len(written) == counts["proved"]
    for cert in written:
        assert check_cert([str(cert), "--model", str(small)]) == 0
    assert "overwhelm_family" in written[0].read_text()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.pt").write_bytes(small.read_bytes())
    assert gen_cert(["m.pt", "--property", "overwhelm", "--prefix", "5", "--query", "3",
                     "--free", "2", "-o", "certs/p.jsonl", "--pin", "certs/POLICY", "-q"]) == 0
    capsys.readouterr()
    assert check_cert(["audit", "certs/POLICY"]) == 1  # the scan's certificates are unaudited
    for cert in written:
        cert.unlink()
    assert check_cert(["audit", "certs/POLICY"]) == 0
