#!/usr/bin/env bash
# Compile and audit the Coq proofs of spec/rules.md's soundness lemmas
# (issue 26).  Fails on: any compile error; any Admitted / admit / Axiom /
# Parameter / Conjecture (or a switch that disables Coq's checks) in any .v;
# Print Assumptions showing anything beyond the allowed axioms below; any
# deliberately wrong statement in negative/ that compiles, or that fails for
# a reason other than its proof (a syntax error, an unknown name).
set -euo pipefail
cd "$(dirname "$0")"

# The axioms Coq's standard Reals library (8.16) is built on: the classical
# Dedekind construction of R (Coq.Reals.ClassicalDedekindReals) and
# functional extensionality, which it uses.  Nothing else is allowed.
ALLOWED_AXIOMS="ClassicalDedekindReals.sig_forall_dec
ClassicalDedekindReals.sig_not_dec
FunctionalExtensionality.functional_extensionality_dep"

command -v coqc >/dev/null || { echo "check.sh: coqc not found (apt-get install -y coq)" >&2; exit 1; }
echo "coqc: $(coqc --version | head -1)"

# 1. Forbidden vernacular, in every .v file (negative/ included: an Admitted
#    there would make it compile).
FORBIDDEN='\b(Admitted|admit|Axiom|Axioms|Parameter|Parameters|Conjecture|Admit[[:space:]]+Obligations)\b|Unset[[:space:]]+(Guard|Positivity|Universe)[[:space:]]+Checking|bypass_check'
if grep -nE "$FORBIDDEN" -- *.v negative/*.v; then
  echo "check.sh: FAIL: forbidden command above (no Admitted, admit, Axiom, Parameter, Conjecture)" >&2
  exit 1
fi

# 2. Compile every file of _CoqProject in its (dependency) order.
FLAGS=$(grep -E '^-' _CoqProject | tr '\n' ' ')
FILES=$(grep -E '\.v$' _CoqProject)
for f in $FILES; do
  [ "$f" = Assumptions.v ] && continue
  echo "coqc $f"
  # shellcheck disable=SC2086
  coqc $FLAGS "$f"
done

# 3. Print Assumptions on every main theorem.
# shellcheck disable=SC2086
out=$(coqc $FLAGS Assumptions.v)
printed=$(grep -c '^Print Assumptions' Assumptions.v)
answered=$(printf '%s\n' "$out" | grep -cE '^(Axioms:|Closed under the global context)$' || true)
if [ "$printed" != "$answered" ]; then
  echo "check.sh: FAIL: $printed Print Assumptions commands, $answered answers" >&2
  exit 1
fi
# axiom names: lines starting in column 0 other than the two headers
used=$(printf '%s\n' "$out" | grep -E '^[^[:space:]]' \
       | grep -vE '^(Axioms:|Closed under the global context)$' | sed 's/ .*//' | sort -u)
bad=$(comm -23 <(printf '%s\n' "$used" | sed '/^$/d') <(printf '%s\n' "$ALLOWED_AXIOMS" | sort -u))
if [ -n "$bad" ]; then
  echo "check.sh: FAIL: axioms beyond the Reals library's:" >&2
  printf '%s\n' "$bad" >&2
  exit 1
fi
closed=$(printf '%s\n' "$out" | grep -c '^Closed under the global context$' || true)
echo "Print Assumptions: $printed theorems; $closed closed under the global context; the others use only:"
printf '%s\n' "$used" | sed '/^$/d; s/^/  /'

# 4. Deliberately wrong statements must FAIL, and in their proof.
for f in negative/*.v; do
  # shellcheck disable=SC2086
  if msg=$(coqc $FLAGS "$f" 2>&1); then
    echo "check.sh: FAIL: $f compiled, but it states a wrong lemma" >&2
    exit 1
  fi
  if printf '%s\n' "$msg" | grep -qE 'Syntax error|was not found in the current environment|Cannot find a physical path|Unable to locate library'; then
    echo "check.sh: FAIL: $f fails for the wrong reason:" >&2
    printf '%s\n' "$msg" >&2
    exit 1
  fi
  where=$(printf '%s\n' "$msg" | grep -m1 -E '^File ' | sed 's/^File "[^"]*", //; s/:$//')
  why=$(printf '%s\n' "$msg" | sed -n '/^Error/,$p' | grep -E '^Error|Unable to unify|Cannot find witness|with$|^ *"' \
        | tr '\n' ' ' | tr -s ' ' | cut -c1-240)
  echo "negative $f fails as expected ($where): $why"
  rm -f "${f%.v}.vo" "${f%.v}.vok" "${f%.v}.vos" "${f%.v}.glob"
done
echo "check.sh: OK"
