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

# Coverage-guided fuzzing (atheris): the mail reader (tests/fuzz_mail.py), then what the IMAP source parses from a
# server (tests/fuzz_imap.py), one after the other on one core, each to FUZZ_RUNS executions or FUZZ_SECONDS,
# whichever comes first, on a corpus kept under out/fuzz/<target>/ between runs. A failing input lands in
# out/fuzz/<target>/artifacts/: copy it into tests/fuzz_corpus/<target>/ (the replay tests run every file there)
# and fix the reader. The mail target is the slow one (large "pumped" messages): 1M runs take about an hour.
FUZZ_RUNS    ?= 1000000
FUZZ_SECONDS ?= 5400
FUZZ_DIR     ?= out/fuzz
FUZZ_FLAGS    = -runs=$(FUZZ_RUNS) -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1
fuzz: venv
	set -e; for t in mail:16384 imap:4096; do name=$${t%%:*}; \
		mkdir -p $(FUZZ_DIR)/$$name/corpus $(FUZZ_DIR)/$$name/artifacts; \
		$(PY) tests/fuzz_$$name.py --write-seeds $(FUZZ_DIR)/$$name/seeds; \
		$(PY) tests/fuzz_$$name.py $(FUZZ_FLAGS) -timeout=30 -max_len=$${t#*:} \
			-artifact_prefix=$(FUZZ_DIR)/$$name/artifacts/ $(FUZZ_DIR)/$$name/corpus $(FUZZ_DIR)/$$name/seeds \
			tests/fuzz_corpus/$$name; \
	done

clean:
	rm -rf $(VENV) out .pytest_cache
