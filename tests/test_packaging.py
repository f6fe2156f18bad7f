"""environment.yml (conda-forge) and pyproject.toml must name the same dependencies."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def split(requirement: str) -> tuple[str, str]:
    name, spec = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", requirement.strip()).groups()
    return name.lower().replace("_", "-"), spec.replace(" ", "")


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(map(split, project["dependencies"]))
    for extra in ("lab", "test", "site"):
        wanted.update(map(split, project["optional-dependencies"][extra]))
    env_lines = (ROOT / "environment.yml").read_text().splitlines()
    deps = env_lines[env_lines.index("dependencies:") + 1:]
    conda = dict(split(line.strip()[2:]) for line in deps
                 if line.startswith("  - ") and not line.strip().endswith(":"))
    conda.pop("pip")
    assert conda.pop("python") == ">=" + project["requires-python"].lstrip(">=")
    assert conda == wanted
    assert "conda-forge" in env_lines[env_lines.index("channels:") + 1]
    assert "      - -e ." in env_lines


def test_gpu_extra_is_cupy_for_cuda12():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [split(r)[0] for r in project["optional-dependencies"]["gpu"]] == ["cupy-cuda12x"]
