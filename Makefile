# The README's commands. Each target sets up its own virtualenv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Django 6.x needs Python 3.12+: the first one found on PATH or under pyenv.
PYTHON6 ?= $(shell for p in python3.13 python3.12 $$(ls -d $$HOME/.pyenv/versions/3.1[23]*/bin/python3.1[23] 2>/dev/null); do $$p -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV6 ?= .venv-django6
# The site (mkdocs.yml) into site/. --strict: a broken link, anchor or
# include fails the build. The variable silences Material's banner.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

.PHONY: install demo test test-django6 lint format bench docs site

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/python manage.py rundemo

# Django 5.2 LTS on PostgreSQL, the portable subset on SQLite, then Django 6.x
# with server-side binding (tests/servers.py).
# The SQLite run leaves out the adopter tests: their projects use PostgreSQL
# whatever the suite's settings, so a second run would prove nothing new.
test: install
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest --ds=tests.settings_sqlite -m "not postgresql and not adopter" -q
	@if [ -n "$(PYTHON6)" ]; then $(MAKE) --no-print-directory test-django6; \
	else echo "No Python 3.12+ found: the Django 6.x run is skipped."; fi

$(VENV6)/.installed: pyproject.toml
	$(PYTHON6) -m venv $(VENV6)
	$(VENV6)/bin/python -m pip install --quiet --upgrade pip
	$(VENV6)/bin/python -m pip install --quiet -e '.[dev]'
	touch $@

test-django6: $(VENV6)/.installed
	$(VENV6)/bin/python -c "import django; print('Django', django.__version__)"
	TEST_DATABASE_NAME=$${TEST_DATABASE_NAME:-test_once}_django6 \
	TEST_DATABASE_SERVER_SIDE_BINDING=1 $(VENV6)/bin/python -m pytest -q -p no:cacheprovider

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	PYTHONPATH=. $(BIN)/lint-imports
	$(MKDOCS)

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# make bench PARTS="idempotency relay": those parts only (python -m bench --help).
bench: install
	$(BIN)/python -m bench $(PARTS)

# docs/settings.md from the apps' option tables (tests/test_docs.py checks it),
# then the site.
docs: install
	$(BIN)/python docs/reference.py
	$(MKDOCS)

# The site alone, as `make lint` builds it: nothing regenerated.
site: install
	$(MKDOCS)
