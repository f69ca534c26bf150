# Two commands on a fresh machine (Python 3.11 + pip):
#   make demo   installs into .venv and runs the whole pipeline on embedded defaults
#   make test   installs into .venv (with test extras) and runs the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU build by default; GPU users: make TORCH_SPEC="torch==2.13.0" TORCH_INDEX="<your CUDA wheel index>" ...
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
# two workers (loadfile keeps a module's fixtures in one worker); more where there are cores
PYTEST_ARGS ?= -n auto --maxprocesses=4 --dist loadfile

.PHONY: install install-test demo test ui lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),) "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e .

install-test: install
	$(BIN)/pip install -q -e ".[test,k8s]"

demo: install
	$(BIN)/foxhunt demo $(DEMO_ARGS)

ui: install
	$(BIN)/foxhunt ui

test: install-test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/lint-imports

clean:
	rm -rf .foxhunt .pytest_cache
