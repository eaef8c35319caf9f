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


SITE_URL = "https://agent-framework-functional.github.io/agent-framework-functional/"
REPOSITORY_URL = "https://github.com/agent-framework-functional/agent-framework-functional"
# Pages that are not task pages: the home page includes README.md, the API reference is generated.
NOT_TASK_PAGES = {"index.md", "api.md"}


def _slug(heading: str) -> str:
    # Python-Markdown's toc slug (mkdocs' default): lower case, punctuation dropped, spaces to hyphens.
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_readme_is_short_and_its_links_work_on_pypi() -> None:
    # PyPI shows README.md as the long description: a relative link there leads nowhere, and a link into the
    # docs site must name a page (and heading) that exists.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)\s]+)\)|^\[[^]]+\]:\s*(\S+)|href=\"([^\"]+)\"", readme, flags=re.MULTILINE)
    links = [next(part for part in found if part) for found in links]
    assert links and all(link.startswith("https://") for link in links), links
    for link in links:
        if not link.startswith(SITE_URL.split("/agent-framework-functional/")[0]):
            continue
        assert link.startswith(SITE_URL), link
        page, _, anchor = link.removeprefix(SITE_URL).partition("#")
        path = ROOT / "docs" / (f"{page.strip('/')}.md" if page.strip("/") else "index.md")
        if not path.exists():
            path = ROOT / "docs" / page.strip("/") / "index.md"
        assert path.exists(), f"README links to {link}, but docs/ has no such page"
        headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
        assert not anchor or anchor in {_slug(heading) for heading in headings}, link


def test_the_project_urls_are_the_ones_the_docs_link_to() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert f'Documentation = "{SITE_URL}"' in pyproject and f"site_url: {SITE_URL}" in mkdocs
    assert f'Repository = "{REPOSITORY_URL}"' in pyproject and f"repo_url: {REPOSITORY_URL}" in mkdocs


def test_every_docs_page_is_in_the_nav_and_task_pages_are_50_to_150_lines() -> None:
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    in_nav = set(re.findall(r":\s+([\w/-]+\.md)$", mkdocs, flags=re.MULTILINE))
    pages = {path.relative_to(ROOT / "docs").as_posix(): path for path in (ROOT / "docs").rglob("*.md")}
    assert set(pages) == in_nav
    sizes = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in pages.items()
        if name not in NOT_TASK_PAGES
    }
    assert len(sizes) >= 15 and all(50 <= size <= 150 for size in sizes.values()), sizes


def test_the_release_has_a_short_changelog_section() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.MULTILINE)
    assert version is not None
    section = changelog.split(f"## [{version[1]}]", 1)[1].split("\n## [", 1)[0]
    entries = [line for line in section.splitlines() if line.startswith("- ")]
    assert 0 < len(entries) <= 40 and all(len(line) <= 200 for line in entries), len(entries)
    assert not re.search(r"benchmark|soak|tests/", section, re.IGNORECASE)


def test_benchmarks_readme_keeps_the_latest_tables_only() -> None:
    assert len((ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


def test_links_to_repository_files_name_files_that_exist() -> None:
    # The docs site and PyPI reach the repository's files (samples, tests, AGENTS.md) through absolute links.
    texts = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pattern = re.compile(re.escape(REPOSITORY_URL) + r"/(?:blob|tree)/main/([^)#\s\"]+)")
    linked = {(path.name, target) for path in texts for target in pattern.findall(path.read_text(encoding="utf-8"))}
    missing = sorted((name, target) for name, target in linked if not (ROOT / target).exists())
    assert linked and not missing, missing
