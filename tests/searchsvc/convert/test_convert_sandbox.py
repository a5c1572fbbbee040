"""Conversion reads nothing but the document (issue 27, finding 1).

A writer PUT `.. image:: /proc/self/environ#.svg` with `:loading: embed` and the stored text held
the service's environment, tokens included. Here every format's way to name a file, a URL or the
environment is sent through every face that ingests (REST by extension and by contentType, MCP
`ingest_document`, dot-ai's REST and MCP `manageKnowledge`, and a synced repository) to a real
service process whose environment and a file on disk hold a random canary; the stored text, the
answers and the log never contain it, nor its base64. The sandbox itself is tested directly: a
converter child that tries to read files, the environment and the network gets nothing.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import secrets
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

import kbsearch.convert.warmup  # noqa: F401  # the forked children below need no file, as the forkserver's
from kbsearch.convert import ConversionLimits, ConversionWorker, Converted
from kbsearch.convert.formats import CONVERTERS
from kbsearch.convert.pdf import data_dirs as parser_data_dirs
from kbsearch.convert.rst import RstConverter
from kbsearch.convert.sandbox import SandboxSupport, probe
from kbsearch.convert.worker import _child
from kbsearch.errors import ServiceError
from tests.support.formatfiles import code_cell, docx_file, markdown_cell, notebook, stream_output
from tests.support.git import WorkRepo
from tests.support.mcpclient import mcp_client, text_of
from tests.support.service_process import REPO, ServiceProcess, ready_service, service_env

CANARY = secrets.token_hex(15)  # 30 bytes: a file holding only it base64-encodes to base64 of it
TOKEN = f"kbtok-{CANARY}"  # the service's own API token is a canary too
SUPPORT = probe()
LANDLOCK = pytest.mark.skipif(not SUPPORT.landlock_abi, reason="this kernel has no Landlock (the fallback is tested)")


def leaked(text: str) -> bool:
    """The canary, or its base64 at any alignment (an embedded file is base64 with some prefix)."""
    if CANARY in text:
        return True
    cores = (base64.b64encode(b"\0" * shift + CANARY.encode()).decode()[4:-4] for shift in range(3))
    return any(core in text or core.replace("+", "-").replace("/", "_") in text for core in cores)


def test_the_leak_check_sees_the_canary_plain_and_base64_encoded() -> None:
    assert leaked(f"x {CANARY} y")
    for prefix in ("", "a", "ab", "KEY="):
        assert leaked("data:image/svg+xml;base64," + base64.b64encode((prefix + CANARY).encode()).decode())
    assert not leaked("nothing here " + secrets.token_hex(15))


# --- the attacks: every way each format has to name a file -----------------------------------


def _docx_with_linked_image(target: str) -> bytes:
    """A real .docx (python-docx) with a picture linked, not embedded, to `target` (TargetMode External)."""
    base = docx_file(lambda d: d.add_paragraph("A linked picture follows."))
    drawing = (
        '<w:p><w:r><w:drawing><wp:inline xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/'
        'wordprocessingDrawing"><wp:docPr id="9" name="Leak" descr="linked picture"/>'
        '<a:graphic xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"><a:graphicData '
        'uri="http://schemas.openxmlformats.org/drawingml/2006/picture"><pic:pic xmlns:pic="http://schemas.'
        'openxmlformats.org/drawingml/2006/picture"><pic:blipFill><a:blip r:link="rIdLeak"/></pic:blipFill>'
        "</pic:pic></a:graphicData></a:graphic></wp:inline></w:drawing></w:r></w:p>"
    )
    relationship = (
        '<Relationship Id="rIdLeak" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        f'image" Target="file://{target}" TargetMode="External"/>'
    )
    out = BytesIO()
    with zipfile.ZipFile(BytesIO(base)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as docx:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "word/document.xml":
                data = data.replace(b"<w:sectPr", drawing.encode() + b"<w:sectPr", 1)
            elif info.filename == "word/_rels/document.xml.rels":
                data = data.replace(b"</Relationships>", relationship.encode() + b"</Relationships>")
            docx.writestr(info, data)
    return out.getvalue()


def attacks(secret: Path) -> dict[str, tuple[str, str | bytes]]:
    """name -> (file extension, document). `secret` holds the canary; /proc/self/environ holds it too."""
    path = str(secret)
    relative = "../" * 40 + path.lstrip("/")  # from any working directory, up to / and down again
    environ = "/proc/self/environ"
    rst_image = ".. image:: {}\n   :loading: embed\n   :alt: {}\n"
    cases: dict[str, tuple[str, str | bytes]] = {
        "rst image of a file (svg)": ("rst", rst_image.format(path + "#.svg", "")),
        "rst image of the environment": ("rst", rst_image.format(environ + "#.svg", "env")),
        "rst image, relative path": ("rst", rst_image.format(relative + "#.svg", "")),
        "rst image, ?.svg": ("rst", rst_image.format(path + "?.svg", "")),
        "rst image as base64 video (#.mp4)": ("rst", rst_image.format(path + "#.mp4", "")),
        "rst image with scale (size read)": ("rst", f".. image:: {path}\n   :scale: 50\n"),
        "rst figure": ("rst", f".. figure:: {environ}?.svg\n   :loading: embed\n\n   Caption.\n"),
        "rst substitution image": (
            "rst",
            f"Text |i| here.\n\n.. |i| image:: {path}#.svg\n   :loading: embed\n",
        ),
        "rst include": ("rst", f".. include:: {path}\n\n.. include:: {environ}\n   :literal:\n"),
        "rst raw file": ("rst", f".. raw:: html\n   :file: {path}\n"),
        "rst raw url": ("rst", f".. raw:: html\n   :url: file://{path}\n"),
        "rst csv-table file": ("rst", f".. csv-table:: T\n   :file: {path}\n"),
        "rst csv-table url": ("rst", f".. csv-table:: T\n   :url: file://{path}\n"),
        "rst literalinclude": ("rst", f".. literalinclude:: {path}\n"),
        "rst raw role": ("rst", f'.. role:: r(raw)\n   :format: html\n\nA :r:`<img src="{path}">` b.\n'),
        "mdx imports and tags": (
            "mdx",
            f"import S from '{path}';\nimport E from '{environ}';\n\n# T\n\n"
            f'<img src="file://{path}" alt="pic" />\n\n![pic]({path})\n\n<iframe src="file://{environ}" />\n\n'
            f"{{require('fs').readFileSync('{path}')}}\n",
        ),
        "html resources": (
            "html",
            f'<h1>T</h1><p><img src="file://{path}" alt="pic"><img src="{relative}"></p>'
            f'<iframe src="file://{path}"></iframe><object data="{path}"></object><embed src="{environ}">'
            f'<link rel="stylesheet" href="{path}"><video src="{path}"></video><audio src="{environ}"></audio>'
            f'<frameset><frame src="{path}"></frameset><base href="file:///"><img src="secret.txt">',
        ),
        "notebook outputs and attachments": (
            "ipynb",
            notebook(
                [
                    markdown_cell(f'# T\n\n![x]({path})\n\n<img src="file://{environ}">'),
                    code_cell(
                        "show()",
                        outputs=[
                            stream_output(
                                "display_data",
                                data={
                                    "text/plain": "<picture>",
                                    "text/html": f'<img src="file://{path}">',
                                    "image/svg+xml": f'<svg><image href="file://{path}"/></svg>',
                                    "text/markdown": f"![x]({relative})",
                                },
                            )
                        ],
                    ),
                ]
            ).decode(),
        ),
        "asciidoc include and image": (
            "adoc",
            f"= T\n\ninclude::{path}[]\n\ninclude::{environ}[]\n\nimage::{path}[pic]\n\nimage:{environ}[env]\n",
        ),
        "markdown image": ("md", f"# T\n\n![x]({path})\n\n<img src='file://{environ}'>\n"),
        "docx linked image": ("docx", _docx_with_linked_image(path)),
    }
    return cases


# --- a real service process with the canary in its environment and on its disk ---------------


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "secret.txt"
    path.write_text(CANARY)
    return path


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("sandboxed")
    env = {
        "SEARCHSVC_DATA_DIR": str(root / "data"),
        "SEARCHSVC_API_TOKEN": TOKEN,
        "SEARCHSVC_DOTAI_API": "true",
        "SEARCHSVC_MCP_COMPAT_DOTAI": "true",
        "KB_SANDBOX_CANARY": CANARY,
    }
    with ready_service(root / "service.log", env) as process:
        yield process
    assert not leaked(process.log_text())


AUTH = {"authorization": f"Bearer {TOKEN}"}


def stored_text(service: ServiceProcess, uri: str) -> str:
    response = service.client.get("/api/v1/documents/text", params={"uri": uri, "maxChars": 1_000_000}, headers=AUTH)
    assert response.status_code == 200, response.text
    return str(response.json()["text"])


def _slug(name: str) -> str:
    return name.replace(" ", "-").replace("/", "-")


def _content(document: str | bytes) -> dict[str, str]:
    if isinstance(document, bytes):
        return {"content": base64.b64encode(document).decode(), "contentEncoding": "base64"}
    return {"content": document}


def test_the_service_process_would_show_a_document_holding_the_canary(service: ServiceProcess) -> None:
    """The check below can fail: a document that does hold the canary is seen to."""
    body = {"uri": "control/plain.md", "content": f"# Control\n\nThe value {CANARY} is here.\n"}
    assert service.client.put("/api/v1/documents", json=body, headers=AUTH).status_code == 200
    assert leaked(stored_text(service, "control/plain.md"))
    service.client.delete("/api/v1/documents", params={"uri": "control/plain.md"}, headers=AUTH)


def _expect_stored_without_canary(service: ServiceProcess, uri: str, response_text: str) -> None:
    assert not leaked(response_text), (uri, response_text)
    assert not leaked(stored_text(service, uri)), uri


def test_rest_put_by_extension_and_by_content_type_stores_no_file_or_environment(
    service: ServiceProcess, secret: Path
) -> None:
    for name, (extension, document) in attacks(secret).items():
        slug = _slug(name)
        for uri, extra in (
            (f"rest/{slug}.{extension}", {}),
            (f"rest-typed/{slug}", {"contentType": "markdown" if extension == "md" else extension}),
        ):
            body = {"uri": uri, **_content(document), **extra}
            response = service.client.put("/api/v1/documents", json=body, headers=AUTH)
            assert response.status_code == 200, (name, response.text)
            _expect_stored_without_canary(service, uri, response.text)
    # The attacks were converted, not refused: their harmless words are there.
    assert "Caption." in stored_text(service, "rest/rst-figure.rst")
    assert "pic" in stored_text(service, "rest/html-resources.html")


async def test_mcp_ingest_document_stores_no_file_or_environment(service: ServiceProcess, secret: Path) -> None:
    async with mcp_client(service.url, TOKEN) as client:
        for name, (extension, document) in attacks(secret).items():
            uri = "mcp/" + _slug(name)
            arguments: dict[str, Any] = {"uri": uri, "content_type": "markdown" if extension == "md" else extension}
            if isinstance(document, bytes):
                arguments |= {"content": base64.b64encode(document).decode(), "content_encoding": "base64"}
            else:
                arguments["content"] = document
            result = await client.call_tool("ingest_document", arguments)
            assert not result.is_error, (name, text_of(result))
            _expect_stored_without_canary(service, uri, text_of(result) + json.dumps(result.structured_content))


async def test_dotai_ingest_routes_store_no_file_or_environment(service: ServiceProcess, secret: Path) -> None:
    text_attacks = {n: a for n, a in attacks(secret).items() if isinstance(a[1], str)}
    for name, (extension, document) in text_attacks.items():
        uri = f"https://git.example/dotai-rest/{_slug(name)}.{extension}"
        body = {"operation": "ingest", "uri": uri, "content": document}
        response = service.client.post("/api/v1/tools/manageKnowledge", json=body, headers=AUTH)
        assert response.status_code == 200 and response.json()["success"], (name, response.text)
        _expect_stored_without_canary(service, uri, response.text)
    async with mcp_client(service.url, TOKEN) as client:
        for name, (extension, document) in text_attacks.items():
            if extension == "ipynb":  # the MCP SDK parses a JSON string given for `str | None` into an object
                continue
            uri = f"https://git.example/dotai-mcp/{_slug(name)}.{extension}"
            result = await client.call_tool("manageKnowledge", {"operation": "ingest", "uri": uri, "content": document})
            assert not result.is_error, (name, text_of(result))
            _expect_stored_without_canary(service, uri, text_of(result))


def test_a_synced_repository_with_the_attack_stores_no_file_or_environment(
    service: ServiceProcess, secret: Path, tmp_path: Path
) -> None:
    repo = WorkRepo(tmp_path / "docs")
    repo.write("docs/leak.rst", "Leak\n====\n\n.. image:: /proc/self/environ#.svg\n   :loading: embed\n")
    repo.write("docs/file.rst", f"File\n====\n\n.. image:: {secret}#.svg\n   :loading: embed\n   :alt: logo\n")
    repo.write("docs/inc.adoc", f"= Inc\n\ninclude::{secret}[]\n\nWords.\n")
    repo.commit("the attack, as a writer of the repository would commit it")
    # knowledge-sync as CI runs it: its own process, the token in its environment.
    env = service_env(KB_SANDBOX_TEST_TOKEN=TOKEN)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(REPO / "operator")])
    run = subprocess.run(
        [
            sys.executable, "-c", "import sys; from kboperator.cli import main; sys.exit(main())",
            "--repo", str(repo.path), "--source-id", "team/leak", "--service", service.url,
            "--token-env", "KB_SANDBOX_TEST_TOKEN", "--include", "**/*.rst", "**/*.adoc",
            "--cache-dir", str(tmp_path / "cache"), "--json",
        ],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["added"] == 3
    listed = service.client.get("/api/v1/documents", params={"sourceIdentifier": "team/leak"}, headers=AUTH)
    uris = [doc["uri"] for doc in listed.json()["documents"]]
    assert len(uris) == 3
    for uri in uris:
        assert not leaked(stored_text(service, uri)), uri
    assert any("logo" in stored_text(service, uri) for uri in uris)


# --- the sandbox itself: a converter child that tries to read gets nothing ---------------------


class _Prober(RstConverter):
    """The rst converter on a real document, then everything a hostile parser would try, reported."""

    name = "probe"

    def __init__(self, secret: Path) -> None:
        self.secret = secret

    def convert(self, data: bytes) -> Converted:
        converted = super().convert(data)
        report: dict[str, str] = {"text": converted.text, "cwd": os.getcwd(), "environ": json.dumps(dict(os.environ))}
        attempts = {
            "etc-passwd": lambda: open("/etc/passwd").read(),  # noqa: SIM115
            "secret": lambda: self.secret.read_text(),
            "proc-environ": lambda: open("/proc/self/environ", "rb").read().decode(errors="replace"),  # noqa: SIM115
            "parent-environ": lambda: open(f"/proc/{os.getppid()}/environ", "rb").read().decode(errors="replace"),  # noqa: SIM115
            "list-root": lambda: ",".join(os.listdir("/")),
            "list-cwd": lambda: ",".join(os.listdir(".")),
            "write-cwd": lambda: str(Path("planted.txt").write_text("x")),
            "udp-socket": lambda: str(__import__("socket").socket(2, 2)),
            # pdfminer's character maps: the one folder a parser may read (read only, as every write above).
            "parser-data": lambda: str(len((Path(parser_data_dirs()[0]) / "78-H.json.gz").read_bytes())),
        }
        for key, attempt in attempts.items():
            try:
                report[key] = "allowed: " + attempt()
            except OSError as exc:
                report[key] = f"denied: {type(exc).__name__}"
        return Converted(json.dumps(report))


def _probe_child(secret: Path, support: SandboxSupport, workdir: Path, monkeypatch) -> dict[str, str]:
    """The worker's own child entry point (limits, sandbox, conversion, one message), forked from here."""
    monkeypatch.setitem(CONVERTERS, "probe", _Prober(secret))
    monkeypatch.setenv("KB_SANDBOX_CANARY", CANARY)
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    limits = ConversionLimits(memory_bytes=1024 * 1_048_576, cpu_seconds=60, wall_seconds=60)
    document = b"Probe\n=====\n\nA real page with a *word*.\n"
    args = ("probe", document, limits, support, str(workdir), sender, parser_data_dirs())
    process = context.Process(target=_child, args=args)
    process.start()
    sender.close()
    assert receiver.poll(60)
    message = receiver.recv()
    process.join(60)
    assert message[0] == "ok", message
    return dict(json.loads(message[1]))


@LANDLOCK
def test_a_child_in_the_sandbox_reads_no_file_no_environment_and_opens_no_socket(
    secret: Path, tmp_path: Path, monkeypatch
) -> None:
    report = _probe_child(secret, SUPPORT, tmp_path, monkeypatch)
    assert report["text"] == "# Probe\n\nA real page with a *word*.\n"  # the parser itself ran
    assert report["environ"] == "{}" and report["cwd"] == str(tmp_path)
    for key in ("etc-passwd", "secret", "proc-environ", "parent-environ", "list-root", "list-cwd", "write-cwd"):
        assert report[key] == "denied: PermissionError", (key, report[key])
    assert report["udp-socket"] == "denied: PermissionError"
    assert report["parser-data"].startswith("allowed: ")
    assert not leaked(json.dumps(report))
    assert list(tmp_path.iterdir()) == []


def test_without_landlock_the_child_still_has_an_empty_environment_and_directory(
    secret: Path, tmp_path: Path, monkeypatch
) -> None:
    """The fallback where a kernel has no Landlock: the other layers hold, the converters' own rules do the rest."""
    fallback = SandboxSupport(landlock_abi=0, seccomp=False, missing=("Landlock: not in this kernel",))
    report = _probe_child(secret, fallback, tmp_path, monkeypatch)
    assert report["environ"] == "{}" and report["cwd"] == str(tmp_path)
    assert report["list-cwd"] == "allowed: "  # empty
    assert report["secret"] == f"allowed: {CANARY}"  # only Landlock stops a parser that opens files itself


def test_the_real_worker_converts_the_attack_under_the_sandbox(secret: Path) -> None:
    worker = ConversionWorker(ConversionLimits(memory_bytes=1024 * 1_048_576, cpu_seconds=60, wall_seconds=60))
    assert worker.sandbox == SUPPORT
    for name, (extension, document) in attacks(secret).items():
        fmt = {"md": None, "adoc": "adoc"}.get(extension, extension)
        if fmt is None:
            continue
        data = document if isinstance(document, bytes) else document.encode()
        assert not leaked(worker.convert(fmt, data).text), name


def test_each_converter_on_its_own_reads_no_file(secret: Path) -> None:
    """The first layer, without any sandbox: the converters themselves never open what a document names."""
    for name, (extension, document) in attacks(secret).items():
        if extension == "md":  # markdown is not converted: its text is stored as written
            continue
        data = document if isinstance(document, bytes) else document.encode()
        assert not leaked(CONVERTERS[extension].convert(data).text), name


def test_a_child_that_cannot_enter_its_sandbox_converts_nothing_and_says_so(tmp_path: Path) -> None:
    worker = ConversionWorker(ConversionLimits(memory_bytes=1024 * 1_048_576, cpu_seconds=60, wall_seconds=60))
    with pytest.raises(ServiceError) as caught:
        worker._convert_in("rst", b"Title\n=====\n\nText.\n", str(tmp_path / "removed"))
    assert caught.value.status_code == 500 and caught.value.code == "CONVERSION_SANDBOX_FAILED"
    assert "working directory" in caught.value.message
    assert worker.convert("rst", b"Title\n=====\n\nText.\n").text == "# Title\n\nText.\n"
