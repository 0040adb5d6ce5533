"""The trusted checker of Max-of-K accuracy certificates.

Imports only the Python standard library, mpmath and lark.  Never searches;
fails closed (exit 0 only on full acceptance).  See spec/ for the contract.

Reading order for an audit:
  cli.py          exit codes, limits, policies (--require)
  certificate.py  line-by-line replay: header, weights, ops, rules, qed
  numbers.py      exact decoding; interval helpers; upper-bound arithmetic;
                  the checker's own rigorous exp and 1/sqrt
  ops.py          the matrix ops and their shapes
  definitions.py  what EQKE, EQKP, EVOU, PVOU, EU (and their exps) are, as terms
  rules/          brute_force.py, cubic.py: each rule's theorem in its docstring
  statement.py    the theorem/policy language (grammar: statement.lark)
  modelspec.py, modelfile.py   the model class; reading .pt/.safetensors safely
  policy.py, audit.py   `check-cert audit POLICY`: many checks, one policy (spec/policy.md)
"""
