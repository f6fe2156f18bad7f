"""The root conftest.py's nbval kernel start: a kernel that never answers is replaced."""

import json
import sys
import textwrap
from pathlib import Path

import nbval.kernel
import pytest

import conftest


def test_the_suite_starts_nbval_kernels_patiently():
    assert Path(conftest.__file__).parent == Path(__file__).resolve().parent.parent
    assert nbval.kernel.start_new_kernel.__qualname__.startswith("patient_kernel_start")


def test_a_start_that_fails_is_tried_again_with_a_warning_that_keeps_its_log():
    calls = []

    def start(startup_timeout, stderr, **kwargs):
        calls.append((startup_timeout, stderr, kwargs))
        if len(calls) == 1:
            stderr.write(b"what the lost kernel said")
            raise RuntimeError("Kernel didn't respond in 30 seconds")
        return "km", "kc"

    with pytest.warns(UserWarning) as caught:
        got = conftest.patient_kernel_start(start)(startup_timeout=30, stderr=None, cwd="nb")
    assert got == ("km", "kc") and len(calls) == 2
    assert calls[0][1] is not calls[1][1] and calls[1][0] == 30 and calls[1][2] == {"cwd": "nb"}
    (warning,) = caught
    text = str(warning.message)
    assert "try 1 of 3" in text and "Kernel didn't respond in 30 seconds" in text
    assert "what the lost kernel said" in text and "nb" in text


def test_a_kernel_that_never_starts_fails_after_the_last_try():
    calls = []

    def start(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("Kernel died before replying to kernel_info")

    with pytest.warns(UserWarning) as caught, pytest.raises(RuntimeError, match="died"):
        conftest.patient_kernel_start(start, tries=3)(startup_timeout=1, stderr=None)
    assert len(calls) == 3 and len(caught) == 2
    assert "(nothing)" in str(caught[0].message)


def test_a_real_kernel_that_hangs_once_is_replaced(tmp_path, monkeypatch):
    """A kernel spec whose first kernel never answers ``kernel_info`` (it sleeps); nbval's own
    start, made patient, warns and runs the second, a real ipykernel."""
    marker = tmp_path / "hung-once"
    launcher = tmp_path / "launch.py"
    launcher.write_text(textwrap.dedent(f"""\
        import os, sys, time
        if not os.path.exists({str(marker)!r}):
            open({str(marker)!r}, "w").close()
            print("hanging on purpose", file=sys.stderr, flush=True)
            time.sleep(120)
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher"] + sys.argv[1:])
        """))
    spec = tmp_path / "kernels" / "hangs-once"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(launcher), "-f", "{connection_file}"],
        "display_name": "hangs once", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    start = conftest.patient_kernel_start(nbval.kernel.start_new_kernel.__wrapped__)
    with pytest.warns(UserWarning, match="hanging on purpose") as caught:
        km, kc = start(startup_timeout=3, kernel_name="hangs-once", stderr=None,
                       cwd=str(tmp_path))
    try:
        assert marker.exists() and len(caught) == 1 and km.is_alive()
        msg_id = kc.execute("print(6 * 7)")
        reply = kc.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
