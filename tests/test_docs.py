"""The README documents every environment variable both programs read."""

from __future__ import annotations

from pathlib import Path

import pytest

README = (Path(__file__).parents[1] / "README.md").read_text()


def settings_classes():
    from kboperator.settings import OperatorSettings
    from kbsearch.settings import Settings

    return [(Settings, "SEARCHSVC_"), (OperatorSettings, "KBOPERATOR_")]


@pytest.mark.parametrize("settings_class,prefix", settings_classes())
def test_every_setting_is_documented(settings_class, prefix):
    missing = [f"{prefix}{name.upper()}" for name in settings_class.model_fields if f"`{prefix}{name.upper()}`" not in README]
    assert missing == []


def test_readme_names_the_two_commands():
    assert "make run" in README and "make test" in README
