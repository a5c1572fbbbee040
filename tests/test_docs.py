"""The README documents every environment variable both programs read, with its default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).parents[1] / "README.md").read_text()


def settings_classes():
    from kboperator.settings import OperatorSettings
    from kbsearch.settings import Settings

    return [(Settings, "SEARCHSVC_"), (OperatorSettings, "KBOPERATOR_")]


def documented_default(variable: str) -> str | None:
    row = re.search(rf"^\| `{variable}` \| ([^|]*) \|", README, re.MULTILINE)
    return row.group(1).strip() if row else None


def expected_default(field) -> str:
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is None or value == []:
        return "—"
    return f"`{value}`"


@pytest.mark.parametrize(("settings_class", "prefix"), settings_classes())
def test_every_setting_is_documented_with_its_default(settings_class, prefix):
    wrong = {}
    for name, field in settings_class.model_fields.items():
        variable = f"{prefix}{name.upper()}"
        if documented_default(variable) != expected_default(field):
            wrong[variable] = (documented_default(variable), expected_default(field))
    assert wrong == {}


def test_readme_names_the_two_commands():
    assert "make run" in README and "make test" in README
