"""CI runs every Python the package claims: pyproject's classifiers, README and ``.ci/run`` agree.

``.ci/run`` reads the versions from pyproject.toml's classifiers, finds an interpreter for each
(pyenv, else ``python3.X`` on PATH) and fails, naming the version, when one is missing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from script_runner import ROOT, run_command

CI_RUN = ROOT / ".ci" / "run"
LISTED = re.compile(r"^Python (3\.\d+): (\S+) \((3\.\d+\.\d+)\)$", re.MULTILINE)


def _classified_versions() -> list[str]:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject)


def _list(env: dict[str, str]) -> tuple[int, str, str]:
    proc = run_command(["bash", str(CI_RUN), "--list"], stdin=None, timeout=120, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def test_claimed_versions_are_3_10_to_3_13_and_match_requires_python() -> None:
    versions = _classified_versions()
    assert versions == ["3.10", "3.11", "3.12", "3.13"]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'requires-python = ">={versions[0]}"' in pyproject


def test_readme_states_the_versions_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Supported Python versions", 1)[1].split("\n## ", 1)[0]
    first_paragraph = section.strip().split("\n\n", 1)[0]
    assert re.findall(r"3\.\d+", first_paragraph.split("(", 1)[0]) == _classified_versions()
    assert ".ci/run" in section


def test_ci_finds_an_interpreter_for_every_claimed_version_on_this_machine() -> None:
    code, out, err = _list(dict(os.environ))
    assert code == 0, err
    found = {version: patch for version, _, patch in LISTED.findall(out)}
    assert sorted(found) == sorted(_classified_versions())
    assert all(patch.startswith(f"{version}.") for version, patch in found.items())


def test_ci_fails_naming_a_claimed_version_the_machine_lacks(tmp_path: Path) -> None:
    code, out, _ = _list(dict(os.environ))
    assert code == 0
    pyenv = tmp_path / "pyenv"
    for version, interpreter, patch in LISTED.findall(out):
        if version == "3.13":
            continue  # this one is "missing"
        bin_dir = pyenv / "versions" / patch / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python").symlink_to(interpreter)
    # Without pyenv's shims on PATH, nothing else provides python3.13.
    env = {**os.environ, "PYENV_ROOT": str(pyenv), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    code, out, err = _list(env)
    assert code == 1
    assert "Python 3.13 is claimed in pyproject.toml but not on this machine" in err
    assert "pyenv install 3.13" in err
    assert [version for version, _, _ in LISTED.findall(out)] == ["3.10", "3.11", "3.12"]


def test_ci_runs_the_readme_quickstart_command_one_as_written() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = quickstart.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(commands) == 2 and commands[1] == "bash scripts/test.sh"
    assert commands[0].startswith("python3 -m venv .venv && ")  # the line .ci/run picks out and runs
    ci = CI_RUN.read_text(encoding="utf-8")
    assert "/^python3 -m venv .venv && /p" in ci and 'bash -c "$quickstart"' in ci


def test_the_core_range_is_exactly_what_ci_tests() -> None:
    # The lower bound is the core .ci/run pins for its extra run; the upper bound is the minor after the newest
    # tested release, which README names beside the lowest.
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'"agent-framework-core>=(\d+)\.(\d+),<(\d+)\.(\d+)"', pyproject)
    assert found is not None
    low_major, low_minor, high_major, high_minor = (int(part) for part in found.groups())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Supported Python versions", 1)[1].split("\n## ", 1)[0]
    tested = section.split("**Tested cores.**", 1)[1].split("\n\n", 1)[0]
    assert f"{low_major}.{low_minor}.0 (the lowest accepted)" in tested
    assert re.search(rf"{high_major}\.{high_minor - 1}\.\d+ \(the newest release\)", tested)
    assert f"`>={low_major}.{low_minor},<{high_major}.{high_minor}`" in tested
    ci = CI_RUN.read_text(encoding="utf-8")
    assert 'CORE="$lowest_core"' in ci and "agent-framework-core>=" in ci
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert '"agent-framework-core==$CORE"' in script
