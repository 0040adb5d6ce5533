# The two commands of the README.  Both install what they need first, so a
# fresh machine with nothing but Python can run them.
PY ?= python3
PIP = $(PY) -m pip install --quiet --disable-pip-version-check

.PHONY: install demo test test-fast bench proofs

install:
	$(PIP) torch==2.13.0
	$(PIP) -e '.[generator,fast,dev,zoo,interop]'

demo: install
	PY='$(PY)' bash scripts/demo.sh

test: install
	$(PY) -m ruff check .
	$(PY) -m pytest -q

# The developers' tier (after one `make install`): the soundness core without the
# long red-team, interop, zoo and training runs (tests/conftest.py marks them
# slow).  CI runs `make test`, the full suite.
test-fast:
	$(PY) -m ruff check .
	$(PY) -m pytest -q -m "not slow"

bench: install
	$(PY) benchmarks/bench_cubic.py

# The Coq proofs of spec/rules.md's lemmas (proofs/check.sh; needs coqc).
proofs:
	bash proofs/check.sh
