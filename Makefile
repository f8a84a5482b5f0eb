# Two set-up commands: `make demo` and `make test`. Both build the virtual environment first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
OUT    ?= out/demo
# pytest workers: CI machines have 2 cores.
JOBS   ?= 2

.PHONY: demo test venv clean bench fuzz notebooks

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

# The lecture's lessons as notebooks (notebooks/), opened in JupyterLab from the venv; JupyterLab is the optional
# extra `notebooks`, kept out of dev so that CI installs stay lean (tests run the notebooks through nbclient).
notebooks: venv
	$(PY) -m pip install --quiet -c constraints.txt -e '.[notebooks]'
	$(VENV)/bin/jupyter lab notebooks/

# Every benchmark side by side (seqlab bench): out/bench/bench.json and bench.md. BENCH_ARGS=--quick for a short run.
bench: venv
	$(VENV)/bin/seqlab bench --out out/bench $(BENCH_ARGS)

# Coverage-guided fuzzing of the mail reader (atheris, tests/fuzz_mail.py) for FUZZ_SECONDS, on a corpus kept
# under out/fuzz/mail/ between runs. A failing input lands in out/fuzz/mail/artifacts/: copy it into
# tests/fuzz_corpus/mail/ (the replay test runs every file there) and fix the reader.
FUZZ_SECONDS ?= 600
FUZZ_DIR     ?= out/fuzz/mail
fuzz: venv
	mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/artifacts
	$(PY) tests/fuzz_mail.py --write-seeds $(FUZZ_DIR)/seeds
	$(PY) tests/fuzz_mail.py -max_total_time=$(FUZZ_SECONDS) -timeout=30 -max_len=16384 -print_final_stats=1 \
		-artifact_prefix=$(FUZZ_DIR)/artifacts/ $(FUZZ_DIR)/corpus $(FUZZ_DIR)/seeds tests/fuzz_corpus/mail

clean:
	rm -rf $(VENV) out .pytest_cache
