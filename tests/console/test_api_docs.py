"""/docs over HTTP: Swagger UI from the service's own files, under a CSP like the console's."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.service import running_service


async def test_docs_load_every_asset_from_the_service(tmp_path: Path) -> None:
    async with running_service("edge", tmp_path / "data") as client:
        page = await client.get("/docs")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "//" not in page.text  # no URL of another origin, with a scheme or without
        assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert len(assets) == 4 and all(a.startswith("/docs/assets/") for a in assets), assets
        types = {}
        for asset in assets:
            response = await client.get(asset)
            assert response.status_code == 200, asset
            types[asset.split("?")[0].rsplit(".", 1)[1]] = response.headers["content-type"]
        assert types["js"].startswith("text/javascript") and types["css"].startswith("text/css")
        assert 'data-openapi-url="/openapi.json"' in page.text
        assert (await client.get("/openapi.json")).json()["info"]["title"] == "Knowledge search service"
        # No inline script or style, and nothing the CSP would have to allow from elsewhere.
        assert all(re.fullmatch(r'<script src="[^"]+">', tag) for tag in re.findall(r"<script[^>]*>", page.text))
        assert "<style" not in page.text and " style=" not in page.text and not re.search(r"\son\w+=", page.text)
        csp = page.headers["content-security-policy"]
        assert "script-src 'self';" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe" not in csp and "http" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert (await client.get("/redoc")).status_code == 404  # its bundle would need inline styles
