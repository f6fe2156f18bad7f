"""tools/site/assets.py: every file the site ships is checked by sha256 (no network here:
the files below are made to differ from the pinned ones)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ipukit_site_assets",
                                               ROOT / "tools" / "site" / "assets.py")
assets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(assets)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IPUKIT_SITE_CACHE", str(tmp_path))
    return tmp_path


def test_a_cached_carrier_that_differs_is_refused_and_removed(cache):
    fake = cache / assets.WHEELS_FILE
    fake.write_bytes(b"not Pyodide's wheels")
    with pytest.raises(assets.AssetsUnavailable, match="is not the pinned"):
        assets.wheels_carrier()
    assert not fake.exists()


def test_a_cached_pure_wheel_that_differs_is_refused_and_removed(cache):
    (cache / "wheels").mkdir()
    fake = cache / "wheels" / f"anywidget-{assets.PINS['anywidget']}-py3-none-any.whl"
    fake.write_bytes(b"PK not anywidget")
    with pytest.raises(assets.AssetsUnavailable, match="is not the pinned"):
        assets.extra_wheels()
    assert not fake.exists()


def test_a_prepared_folder_with_a_changed_file_is_made_again(cache, monkeypatch):
    """The verified folder is trusted only while every file keeps its sha256."""
    out = cache / f"pyodide-{assets.PYODIDE_VERSION}"
    out.mkdir()
    (out / "numpy.whl").write_bytes(b"changed")
    (out / ".verified.json").write_text(json.dumps({"numpy.whl": assets.sha256(b"original")}))
    monkeypatch.setattr(assets, "pyodide_tarball", lambda: (_ for _ in ()).throw(
        assets.AssetsUnavailable("fetch asked for")))
    with pytest.raises(assets.AssetsUnavailable, match="fetch asked for"):
        assets.pyodide_dir()


def test_closure_follows_the_lock_files_names():
    lock = {"matplotlib": {"depends": ["numpy", "Pillow"]}, "numpy": {"depends": []},
            "pillow": {"depends": []}, "pandas": {"depends": ["numpy"]}}
    assert assets.closure(lock, ["matplotlib"]) == ["matplotlib", "numpy", "pillow"]
