# The two commands of the README.  Both install what they need first, so a
# fresh machine with nothing but Python can run them.
PY ?= python3
PIP = $(PY) -m pip install --quiet --disable-pip-version-check

.PHONY: install demo test test-fast test-fast-1 test-fast-2 bench proofs

install:
	$(PIP) torch==2.13.0
	$(PIP) -e '.[generator,fast,dev,zoo,interop]'

demo: install
	PY='$(PY)' bash scripts/demo.sh

test: install
	$(PY) -m ruff check .
	$(PY) -m pytest -q

# The developers' tier (after one `make install`): the soundness core without the
# long red-team, interop, zoo, training and install runs (tests/conftest.py marks
# them slow; their files are not even collected here).  Two halves in parallel,
# one per core; each prints its own report.  CI runs `make test`, the full suite.
FAST = $(PY) -m pytest -q -m "not slow" -p no:cacheprovider \
	--ignore-glob='tests/test_redteam_*' --ignore-glob='tests/test_interop_*' \
	--ignore=tests/test_fuzz_audit.py --ignore=tests/test_zoo.py \
	--ignore=tests/test_training.py --ignore=tests/test_certs_audit.py \
	--ignore=tests/test_install.py --ignore=tests/test_proof_length.py
FAST_HALF = tests/test_subcubic_*.py tests/test_arith.py tests/test_overwhelm_*.py \
	tests/test_mutants.py tests/test_families.py tests/test_cubic_soundness.py

test-fast:
	$(PY) -m ruff check .
	$(MAKE) --no-print-directory -j2 -O test-fast-1 test-fast-2

test-fast-1:
	$(FAST) $(wildcard $(FAST_HALF))

test-fast-2:
	$(FAST) $(addprefix --ignore=,$(wildcard $(FAST_HALF)))

bench: install
	$(PY) benchmarks/bench_cubic.py

# The Coq proofs of spec/rules.md's lemmas (proofs/check.sh; needs coqc).
proofs:
	bash proofs/check.sh
