# The two commands a newcomer needs: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export UV_PYTHON_DOWNLOADS := never

.PHONY: venv bytecode run worker test test-fast lint bench bench-peers chaos fuzz clean

venv: $(STAMP)

# Re-install only when the pinned dependencies change.
$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || { BASE=$$(scripts/find-python) && $$BASE -m venv $(VENV); }
	@$(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip -q
	@$(VENV)/bin/uv --version >/dev/null 2>&1 || $(PY) -m pip install -q uv==0.13.8
	$(VENV)/bin/uv pip install -q --compile-bytecode -p $(PY) -r pyproject.toml --extra dev
	@touch $(STAMP)

# Every worker, child and test process imports some 800 modules; where
# PYTHONDONTWRITEBYTECODE is set, each would compile them from source again
# (about 1 s of CPU per process). The dependencies are compiled at install,
# the project's own modules here (only what changed since the last time).
bytecode: venv
	@$(PY) -m compileall -q -j0 -x '/\.' .

run: venv bytecode
	VENV=$(VENV) exec scripts/run-site

test: venv bytecode
	$(PY) -m tests.services -- scripts/run-tests $(ARGS)

bench: venv bytecode
	$(PY) bench/run.py

bench-peers: venv bytecode
	scripts/bench-peers $(ARGS)

chaos: venv bytecode
	scripts/chaos

# The fuzz layer with a long budget, on both databases (FUZZ_EXAMPLES per route).
fuzz: venv bytecode
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-100} $(PY) -m tests.services -- scripts/run-tests -m fuzz --timeout=3600 $(ARGS)

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .venv-peers var
