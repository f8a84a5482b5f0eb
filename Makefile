# Two set-up commands: `make demo` and `make test`. Both build the virtual environment first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
OUT    ?= out/demo
# pytest workers: CI machines have 2 cores.
JOBS   ?= 2

.PHONY: demo test venv clean bench

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

demo: venv
	$(VENV)/bin/seqlab demo --out $(OUT)

# Lint and the import rules of ARCHITECTURE.md first: they take seconds and say exactly what broke.
test: venv
	$(VENV)/bin/ruff check -q .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile

bench: venv
	$(PY) benchmarks/bench_layers.py
	$(PY) benchmarks/bench_prepare.py
	$(PY) benchmarks/bench_latency.py

clean:
	rm -rf $(VENV) out .pytest_cache
