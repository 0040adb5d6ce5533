"""The statement language of theorems and CI policies (checker/statement.py).

parse/holds in-process, exact at the boundary (fractions and decimals are
compared as rationals, never as floats), and `--require` through the CLI:
a satisfied policy exits 0, an unsatisfied one 1, an unparsable one 2.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction

import pytest
from checker_fixtures import (
    artifacts,
    dump,
    header_claim,
    parse,
    run_checker_subprocess,
    write_lines,
)

from checker import statement
from checker.cli import main
from checker.errors import Malformed
from checker.statement import Facts, holds, theorem_text

DIGEST = "0123456789abcdef" * 4
OTHER = "f" * 64


def facts(correct, v=10, k=3, model_file=None, digest=DIGEST):
    return Facts(dims={"d_vocab": v, "n_ctx": k, "d_model": 8, "d_head": 4},
                 weights_sha256=digest, correct=correct, model_file_sha256=model_file)


def holds_all(text, f):
    return all(holds(atom, f) for atom in statement.parse(text))


# -- parse ----------------------------------------------------------------------------

def test_parse_full_theorem():
    text = (f"task == max_of_k and d_vocab == 64 and n_ctx == 4 and d_model == 32 "
            f"and d_head == 32 and weights == sha256:{DIGEST} and correct >= 16560000")
    atoms = statement.parse(text)
    assert [a.field for a in atoms] == ["task", "d_vocab", "n_ctx", "d_model", "d_head",
                                        "weights", "correct"]
    assert atoms[5].kind == "hash" and atoms[5].value == DIGEST
    assert atoms[6].value == 16560000 and atoms[6].cmp == ">="
    assert " and ".join(map(str, atoms)) == text


@pytest.mark.parametrize("text, kind, value", [
    ("accuracy >= 0.95", "decimal", Fraction(19, 20)),
    ("accuracy >= 19/20", "fraction", Fraction(19, 20)),
    ("accuracy >= 950/1000", "fraction", Fraction(19, 20)),
    ("accuracy >= 1", "integer", 1),
    ("accuracy >= 0", "integer", 0),
    ("accuracy >= 00.50", "decimal", Fraction(1, 2)),
    ("accuracy>=1/3", "fraction", Fraction(1, 3)),
    ("  accuracy \n>=\t 0.1  ", "decimal", Fraction(1, 10)),
])
def test_parse_accuracy_values_exactly(text, kind, value):
    (atom,) = statement.parse(text)
    assert (atom.field, atom.cmp, atom.kind, atom.value) == ("accuracy", ">=", kind, value)
    assert type(atom.value) is (int if kind == "integer" else Fraction)


def test_statement_text_roundtrip():
    f = facts(950)
    text = theorem_text(f)
    assert holds_all(text, f)
    assert [str(a) for a in statement.parse(text)] == text.split(" and ")


MALFORMED = [
    ("", "cannot parse"),
    ("and", "cannot parse"),
    ("correct >=", "cannot parse"),
    ("correct >= 5 and", "cannot parse"),
    ("correct >= 5 or d_vocab == 3", "cannot parse"),
    ("correct >= 5 and and d_vocab == 3", "cannot parse"),
    ("correct >= -5", "cannot parse"),
    ("correct >= 5.", "cannot parse"),
    ("accuracy >= .5", "cannot parse"),
    ("accuracy >= 1e-3", "cannot parse"),
    ("accuracy >= 0.5%", "cannot parse"),
    ("accuracy >= 1/0", "zero denominator"),
    ("accuracy >= 0/0", "zero denominator"),
    ("accuracy > 0.5", "cannot parse"),
    ("accuracy <= 0.5", "not allowed"),  # <= exists (free <= n), not for accuracy
    ("accuracy = 0.5", "cannot parse"),
    ("accuracy == 0.5", "not allowed"),
    ("correct == 5", "not allowed"),
    ("d_vocab >= 3", "not allowed"),
    ("d_vocab == 0.5", "not allowed"),
    ("d_vocab == 1/2", "not allowed"),
    ("n_ctx == max_of_k", "not allowed"),
    ("correct >= 1/2", "not allowed"),
    ("correct >= 0.5", "not allowed"),
    ("weights >= sha256:" + DIGEST, "not allowed"),
    ("weights == " + DIGEST, ""),
    ("weights == 5", "not allowed"),
    ("model_file == max_of_k", "not allowed"),
    ("task == 5", "not allowed"),
    ("task >= max_of_k", "not allowed"),
    ("task == max_of_3", "unknown task"),
    ("task == median_of_k", "unknown task"),
    ("weights == sha256:" + DIGEST.upper(), "cannot parse"),
    ("weights == sha256:" + DIGEST[:-1], "cannot parse"),
    ("weights == sha256:" + DIGEST + "0", "cannot parse"),
    ("weights == sha1:" + DIGEST[:40], "cannot parse"),
    ("loss >= 0.5", "cannot parse"),
    ("Accuracy >= 0.5", "cannot parse"),
    ("accuracy >= 0.5 and accuracy >= 0.6", "appears twice"),
    ("correct >= 5 and d_vocab == 3 and correct >= 5", "appears twice"),
    ("correct >= ５", "cannot parse"),
    ("correct >= 5; rm -rf /", "cannot parse"),
    ("correct >= 5 # comment", "cannot parse"),
    ("(correct >= 5)", "cannot parse"),
    ("correct >= " + "9" * 5000, ""),  # beyond int()'s digit limit: still Malformed
    ("accuracy >= 0." + "9" * 5000, ""),
    ("correct >= 1 and " * 2000 + "correct >= 1", "at most 10000"),
]


@pytest.mark.parametrize("text, needle", MALFORMED)
def test_parse_refuses(text, needle):
    with pytest.raises(Malformed, match=needle or None) as info:
        statement.parse(text, "policy")
    assert str(info.value).startswith("policy: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", [None, 5, 0.95, b"correct >= 1", ["correct >= 1"]])
def test_parse_refuses_non_strings(value):
    with pytest.raises(Malformed, match="expected a statement string"):
        statement.parse(value)


# -- holds, exactly at the boundary ---------------------------------------------------

@pytest.mark.parametrize("policy", ["accuracy >= 0.95", "accuracy >= 19/20",
                                    "accuracy >= 950/1000", "accuracy >= 0.950000",
                                    "accuracy >= 1900/2000", "correct >= 950"])
def test_accuracy_boundary_exact(policy):
    """N/T exactly equal to the bound passes; one sequence fewer fails."""
    assert holds_all(policy, facts(950))  # 950 / 1000 == 0.95
    assert not holds_all(policy, facts(949))
    assert holds_all(policy, facts(951))


@pytest.mark.parametrize("policy, correct, ok", [
    ("accuracy >= 0.9500000000000000000001", 950, False),  # float would round to 0.95
    ("accuracy >= 0.9499999999999999999999", 950, True),
    ("accuracy >= 9500000000000000000001/10000000000000000000000", 950, False),
    ("accuracy >= 1", 1000, True),
    ("accuracy >= 1", 999, False),
    ("accuracy >= 1.0", 1000, True),
    ("accuracy >= 1.0000000000000000000001", 1000, False),
    ("accuracy >= 0", 0, True),
    ("accuracy >= 0.0", 0, True),
    ("accuracy >= 1/1000", 1, True),
    ("accuracy >= 1/1000", 0, False),
    ("accuracy >= 0.001", 1, True),
    ("accuracy >= 0.0010000000000000001", 1, False),
    ("accuracy >= 3/2", 1000, False),
    ("correct >= 0", 0, True),
    ("correct >= 1001", 1000, False),
])
def test_accuracy_exact_comparisons(policy, correct, ok):
    assert holds_all(policy, facts(correct)) is ok


def test_accuracy_thirds_beyond_float_precision():
    """correct/total = 1/3 exactly: the float 1/3 printed in full is below it, a
    decimal just above it is not, although both are the same float."""
    f = facts(3, v=3, k=2)  # 3 / 9
    assert float("0.3333333333333333") == float("0.33333333333333334") == 1 / 3
    assert holds_all("accuracy >= 0.3333333333333333", f)
    assert not holds_all("accuracy >= 0.33333333333333334", f)
    assert holds_all("accuracy >= 1/3", f) and holds_all("accuracy >= 3/9", f)
    assert not holds_all("accuracy >= 1/3", facts(2, v=3, k=2))


def test_dims_task_and_hashes():
    f = facts(5, model_file=OTHER)
    assert holds_all(f"d_vocab == 10 and n_ctx == 3 and d_model == 8 and d_head == 4 "
                     f"and task == max_of_k and weights == sha256:{DIGEST} "
                     f"and model_file == sha256:{OTHER}", f)
    for wrong in ("d_vocab == 11", "n_ctx == 4", "d_model == 9", "d_head == 8",
                  f"weights == sha256:{OTHER}", f"model_file == sha256:{DIGEST}"):
        assert not holds_all(wrong, f), wrong


def test_model_file_holds_only_with_a_model_file():
    atom = statement.parse(f"model_file == sha256:{OTHER}")[0]
    assert not holds(atom, facts(5, model_file=None))
    assert holds(atom, facts(5, model_file=OTHER))
    # the weights digest is not a model file digest
    assert not holds(statement.parse(f"model_file == sha256:{DIGEST}")[0], facts(5))


def test_certificate_holds_only_with_the_digest_read():
    """`certificate == sha256:D` needs the digest of the bytes the checker read; before the
    file is read to its end (a header theorem's facts) there is none, so it never holds."""
    atom = statement.parse(f"certificate == sha256:{OTHER}")[0]
    assert (atom.field, atom.kind, atom.value) == ("certificate", "hash", OTHER)
    assert not holds(atom, facts(5))
    with_digest = Facts(dims=facts(5).dims, weights_sha256=DIGEST, correct=5,
                        certificate_sha256=OTHER)
    assert holds(atom, with_digest)
    assert not holds(statement.parse(f"certificate == sha256:{DIGEST}")[0], with_digest)
    for refused in ("certificate >= sha256:" + OTHER, "certificate == 3"):
        with pytest.raises(Malformed):
            statement.parse(refused)


def test_total_is_vocab_to_the_context():
    assert facts(0, v=6, k=3).total == 216
    assert holds_all("accuracy >= 31/216", facts(31, v=6, k=3))
    assert not holds_all("accuracy >= 32/216", facts(31, v=6, k=3))


# -- through the CLI ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cert():
    art = artifacts()
    objs = parse(art.brute)
    path = write_lines(art.brute, "statement_brute.jsonl")
    digest = objs[0]["theorem"].split("sha256:")[1].split()[0]
    file_sha = hashlib.sha256(art.model.read_bytes()).hexdigest()
    return path, art.model, header_claim(objs), digest, file_sha, objs


def run(capsys, *argv):
    code = main([*map(str, argv), "--jobs", "1"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _policies(cert):
    path, model, n, digest, file_sha, _ = cert
    assert n == 31  # the random model of checker_fixtures: 31 of 216 certified
    return {
        "satisfied": [f"accuracy >= {n}/216", f"correct >= {n}", "accuracy >= 0.143518",
                      "accuracy >= 0.1435185185185185", f"accuracy >= {2 * n}/432",
                      "accuracy >= 0", "correct >= 0", "task == max_of_k",
                      "d_vocab == 6 and n_ctx == 3 and d_model == 8 and d_head == 8",
                      f"weights == sha256:{digest}",
                      f"weights == sha256:{digest} and accuracy >= 0.1"],
        "unsatisfied": [f"accuracy >= {n + 1}/216", f"correct >= {n + 1}",
                        "accuracy >= 0.143519", "accuracy >= 0.14351851851851852",
                        "accuracy >= 0.95", "accuracy >= 1", "d_vocab == 7", "n_ctx == 4",
                        f"weights == sha256:{OTHER}", f"model_file == sha256:{file_sha}",
                        f"accuracy >= 0.1 and weights == sha256:{OTHER}"],
        "unparsable": ["accuracy > 0.5", "accuracy >= 95%", "accuracy == 0.95", "",
                       "correct >= 31 and correct >= 30", "task == other", "weights == x",
                       "accuracy >= 1/0"],
    }


def test_require_satisfied_exits_0(cert, capsys):
    path = cert[0]
    for policy in _policies(cert)["satisfied"]:
        code, out, err = run(capsys, path, "--require", policy)
        assert code == 0, (policy, err)
        assert f"required and holds: {policy}" in out


def test_require_unsatisfied_exits_1(cert, capsys):
    path = cert[0]
    for policy in _policies(cert)["unsatisfied"]:
        code, out, err = run(capsys, path, "--require", policy)
        assert code == 1, (policy, err)
        assert err.startswith("REJECTED: required '") and err.count("\n") == 1, err
        assert "does not follow from the verified theorem" in err
        assert out == ""


def test_require_unparsable_exits_2(cert, capsys):
    path = cert[0]
    for policy in _policies(cert)["unparsable"]:
        code, out, err = run(capsys, path, "--require", policy)
        assert code == 2, (policy, err)
        assert err.startswith("MALFORMED: --require: ") and err.count("\n") == 1, err


def test_several_requires_all_must_hold(cert, capsys):
    path, _, n, digest, _, _ = cert
    ok = ["correct >= 1", f"weights == sha256:{digest}", "accuracy >= 1/10"]
    assert run(capsys, path, *[x for p in ok for x in ("--require", p)])[0] == 0
    bad = ok + [f"correct >= {n + 1}"]
    assert run(capsys, path, *[x for p in bad for x in ("--require", p)])[0] == 1
    worse = bad + ["accuracy >>= 1"]  # an unparsable policy is reported first
    assert run(capsys, path, *[x for p in worse for x in ("--require", p)])[0] == 2


def test_require_model_file_holds_only_with_model(cert, capsys):
    path, model, _, _, file_sha, _ = cert
    policy = f"model_file == sha256:{file_sha}"
    assert run(capsys, path, "--require", policy)[0] == 1
    code, out, err = run(capsys, path, "--model", model, "--require", policy)
    assert code == 0, err
    assert run(capsys, path, "--model", model, "--require",
               f"model_file == sha256:{OTHER}")[0] == 1
    # the weights digest is not the file digest
    assert run(capsys, path, "--model", model, "--require",
               f"model_file == sha256:{cert[3]}")[0] == 1


def test_require_does_not_rescue_a_bad_certificate(cert, capsys):
    """A policy is checked only after the certificate: a malformed certificate is
    exit 2 and a wrong one exit 1 whatever the policy."""
    objs = parse(dump(cert[5]))
    objs[0]["theorem"] = objs[0]["theorem"].replace("correct >= 31", "correct >= 32")
    wrong = write_lines(dump(objs), "statement_wrong.jsonl")
    truncated = write_lines(dump(cert[5])[:-1], "statement_truncated.jsonl")
    for policy in ("correct >= 0", "correct >= 1000"):
        assert run(capsys, wrong, "--require", policy)[0] == 1
        assert run(capsys, truncated, "--require", policy)[0] == 2


def _with_header(objs, extra):
    objs = parse(dump(objs))
    objs[0]["theorem"] += " and " + extra
    return objs


def test_header_theorem_accuracy_exact(cert, capsys):
    objs = cert[5]
    ok = write_lines(dump(_with_header(objs, "accuracy >= 31/216")), "hdr_acc_ok.jsonl")
    assert run(capsys, ok)[0] == 0
    over = write_lines(dump(_with_header(objs, "accuracy >= 0.14351851851851851851852")),
                       "hdr_acc_over.jsonl")
    code, out, err = run(capsys, over)
    assert code == 1 and "was not verified" in err


def test_header_theorem_model_file_needs_model(cert, capsys):
    path, model, _, _, file_sha, objs = cert
    bound = write_lines(dump(_with_header(objs, f"model_file == sha256:{file_sha}")),
                        "hdr_model_file.jsonl")
    code, out, err = run(capsys, bound, "--model", model)
    assert code == 0, err
    assert "weights are exactly those of" in out
    code, out, err = run(capsys, bound)
    assert code == 1 and "model_file == sha256:" in err


def test_require_certificate_digest_of_the_bytes_read(cert, capsys, tmp_path):
    """--require 'certificate == sha256:D' holds iff D is the SHA-256 of the bytes checked,
    from a file or from stdin; a byte more (a trailing newline) is another certificate."""
    path = cert[0]
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    code, out, err = run(capsys, path, "--require", f"certificate == sha256:{digest}")
    assert code == 0, err
    code, out, _ = run(capsys, path, "--json")
    assert code == 0 and f'"certificate_sha256": "{digest}"' in out
    assert run(capsys, path, "--require", f"certificate == sha256:{OTHER}")[0] == 1
    longer = tmp_path / "longer.jsonl"
    longer.write_bytes(data + b"\n")
    code, out, err = run(capsys, longer)
    if code == 0:  # the edit still verifies: only the digest tells them apart
        assert run(capsys, longer, "--require", f"certificate == sha256:{digest}")[0] == 1
    proc = run_checker_subprocess(["-", "--jobs", "1", "--require",
                                   f"certificate == sha256:{digest}"], stdin=data)
    assert proc.returncode == 0, proc.stderr


def test_header_theorem_cannot_claim_its_own_digest(cert, capsys):
    """A certificate cannot contain its own digest; a header claiming one is rejected."""
    objs = cert[5]
    claim = write_lines(dump(_with_header(objs, f"certificate == sha256:{OTHER}")),
                        "hdr_certificate.jsonl")
    code, _, err = run(capsys, claim)
    assert code == 1 and "certificate == sha256:" in err and "was not verified" in err


def test_require_through_subprocess(cert):
    path, _, n, _, _, _ = cert
    for policy, code in ((f"correct >= {n}", 0), (f"correct >= {n + 1}", 1),
                         ("correct => 1", 2)):
        proc = run_checker_subprocess([path, "--jobs", "1", "--require", policy])
        assert proc.returncode == code, (policy, proc.stderr)
        assert "Traceback" not in proc.stderr
