"""A built wheel, installed outside the checkout, finds the default pair's manifest and
completes with the embedded pair (the editable checkout is not the only way that works)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.real_model
def test_a_built_wheel_completes_with_the_embedded_pair(tmp_path):
    source_tree = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside it
    shutil.copytree(
        ROOT,
        source_tree,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "bench-out", "build", "*.egg-info", "__pycache__", "docs", "tests"
        ),
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(wheels), str(source_tree)],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("codespec-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
        + [str(wheel)],
        check=True,
        timeout=300,
    )
    # The dependencies (torch, transformers, the model's data packages) come from the test's
    # own environment, added after the fresh venv's site-packages: the codespec that runs is
    # the wheel's.
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import codespec, codespec.models as m; print(codespec.__file__);"
            "print(m.find_manifest(m.DEFAULT_PAIR))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    package_file, manifest = where.stdout.split()
    assert package_file.startswith(str(venv)) and manifest.startswith(str(venv))
    source = tmp_path / "area.py"
    source.write_text("def area(width, height):\n    return \n", encoding="utf-8")
    result = subprocess.run(
        [str(venv / "bin" / "codespec"), "complete", f"{source}:2:12", "--json"]
        + ["--max-tokens", "8"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tokens"] > 0 and report["completion"].strip()


def link(home: Path, **env: str) -> subprocess.CompletedProcess:
    """scripts/link-codespec.sh (the set-up's last step) with ``home`` as the user's home."""
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "link-codespec.sh")],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), **env},
        capture_output=True,
        text=True,
        check=True,
    )


def test_the_setup_links_codespec_where_the_editor_plugins_look(tmp_path):
    ours = (ROOT / ".venv" / "bin" / "codespec").resolve()
    linked = tmp_path / ".local" / "bin" / "codespec"
    assert "linked" in link(tmp_path).stderr
    assert linked.is_symlink() and linked.resolve() == ours
    assert "editors find it" in link(tmp_path).stderr  # again: left as it is
    linked.unlink()
    linked.symlink_to(tmp_path / "gone")  # dangling (a checkout removed since): made again
    link(tmp_path)
    assert linked.resolve() == ours
    linked.unlink()
    linked.write_text("#!/bin/sh\n")  # someone else's codespec: kept, and the message says so
    linked.chmod(0o755)
    assert "another codespec" in link(tmp_path).stderr
    assert linked.read_text() == "#!/bin/sh\n"
    other = tmp_path / "other"
    other.mkdir()
    assert "serverPath" in link(other, CODESPEC_NO_LINK="1").stderr
    assert not (other / ".local").exists()
