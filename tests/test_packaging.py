"""The distribution is one import package: privfed, with its layers and examples inside it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
         str(REPO_ROOT)],
        check=True, capture_output=True,
    )
    (built,) = out.glob("privfed-*.whl")
    return built


def test_wheel_installs_only_the_privfed_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"privfed"}
    for layer in ("accounting", "pipelines", "reports"):
        assert f"privfed/{layer}/__init__.py" in names


def test_wheel_ships_the_examples(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"privfed/examples/votes.npy", "privfed/examples/pipeline.toml",
            "privfed/examples/claims/fedkt_l1_adult.json"} <= names


def test_accounting_imports_no_ml_framework():
    code = ("import sys, privfed.accounting; bad = {'sklearn', 'torch', 'xgboost', 'pandas'} & set(sys.modules); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


def test_the_wheel_ships_every_example_and_privfed_examples_writes_the_same_files(wheel, tmp_path):
    """Every file under examples/ is in the wheel, and `privfed examples` run from the installed wheel writes the
    same files, byte for byte, as from this checkout."""
    names = set(zipfile.ZipFile(wheel).namelist())
    examples = REPO_ROOT / "examples"
    checkout = {p.relative_to(examples).as_posix() for p in examples.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}
    assert {f"privfed/examples/{name}" for name in checkout} <= names
    installed = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(installed), str(wheel)],
                   check=True, capture_output=True)
    for where, path in (("wheel", str(installed)), ("checkout", str(REPO_ROOT))):
        subprocess.run([sys.executable, "-m", "privfed", "examples", str(tmp_path / where)], check=True,
                       capture_output=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path})
    written = {where: {p.relative_to(tmp_path / where).as_posix(): p.read_bytes()
                       for p in (tmp_path / where).rglob("*") if p.is_file()} for where in ("wheel", "checkout")}
    assert written["wheel"] == written["checkout"] and set(written["wheel"]) == checkout


def test_the_wheel_ships_every_module_of_the_public_face(wheel):
    """Every module under privfed/, its subpackages (privfed/audit/, privfed/federation/) included, is in the wheel:
    pyproject.toml lists the packages one by one, so a new subpackage left out of the list fails here."""
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {path.relative_to(REPO_ROOT).as_posix() for path in (REPO_ROOT / "privfed").rglob("*.py")
               if "__pycache__" not in path.parts}
    assert "privfed/audit/driver.py" in modules and modules <= names, sorted(modules - names)
