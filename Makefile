# The two commands a newcomer needs: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export UV_PYTHON_DOWNLOADS := never

.PHONY: venv run worker test test-fast lint bench bench-peers chaos fuzz clean

venv: $(STAMP)

# Re-install only when the pinned dependencies change.
$(STAMP): pyproject.toml
	@test -x $(PY) || { BASE=$$(scripts/find-python) && $$BASE -m venv $(VENV); }
	@$(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip -q
	@$(VENV)/bin/uv --version >/dev/null 2>&1 || $(PY) -m pip install -q uv==0.13.8
	$(VENV)/bin/uv pip install -q -p $(PY) -r pyproject.toml --extra dev
	@touch $(STAMP)

run: venv
	scripts/run-site

test: venv
	$(PY) -m tests.services -- scripts/run-tests $(ARGS)

bench: venv
	$(PY) bench/run.py

bench-peers: venv
	scripts/bench-peers $(ARGS)

chaos: venv
	scripts/chaos

# The fuzz layer with a long budget, on both databases (FUZZ_EXAMPLES per route).
fuzz: venv
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-100} $(PY) -m tests.services -- scripts/run-tests -m fuzz --timeout=3600 $(ARGS)

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .venv-peers var
