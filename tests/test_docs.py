"""The public surface is listed in three places; keep them in sync ."""

from __future__ import annotations

import re
from pathlib import Path

import agent_framework_functional

ROOT = Path(__file__).resolve().parent.parent


def _public_names() -> set[str]:
    return {name for name in agent_framework_functional.__all__ if not name.startswith("__")}


def test_readme_api_table_lists_exactly_the_public_names() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The API in brief", 1)[1].split("\n## ", 1)[0]
    table_rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = {name for row in table_rows for name in re.findall(r"`([A-Za-z_]+)`", row.split("|")[1])}
    assert listed == _public_names()


def test_agents_md_mentions_every_public_name() -> None:
    agents = (ROOT / "AGENTS.md").read_text(encoding="utf-8")
    missing = {name for name in _public_names() if f"`{name}`" not in agents and name not in agents}
    assert not missing, f"AGENTS.md does not mention {sorted(missing)}"


def test_every_public_object_has_a_docstring() -> None:
    undocumented = [
        name for name in _public_names() if not (getattr(agent_framework_functional, name).__doc__ or "").strip()
    ]
    assert not undocumented


def test_changelog_keeps_an_unreleased_section() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert changelog.startswith("# Changelog")
    assert "## [Unreleased]" in changelog
