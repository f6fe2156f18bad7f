"""Run inside Pyodide by tests/test_pyodide.py (not collected by pytest: no test_ prefix).

Every notebook copied to /work runs its code cells top to bottom with the kit's checks, as
a learner's kernel in JupyterLite would; solution notebooks' answers are also judged on
fresh seeds, as the grader draws them. Prints one line: ``RESULT`` and a JSON document.
"""

import contextlib
import glob
import io
import json
import os
import traceback

os.environ["MPLBACKEND"] = "Agg"

import numpy as np  # noqa: E402

from ipukit.grading import feedback  # noqa: E402

found = {"intp_bits": np.dtype(np.intp).itemsize * 8, "notebooks": {}}
for path in sorted(glob.glob("/work/*.ipynb")):
    nb = json.load(open(path))
    ns, error = {"__name__": "__main__"}, None
    feedback.reset()
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or source.lstrip().startswith(("%", "!")):
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, os.path.basename(path), "exec"), ns)
        except Exception:
            error = "\n".join(traceback.format_exc().splitlines()[-6:])
            break
    results = {k: [r.status, r.message[:500]] for k, r in feedback.results().items()}
    fresh = {}
    if path.endswith("_solutions.ipynb") and error is None:
        lesson = os.path.basename(path)[:2]
        for ex in feedback.lesson_exercises(lesson):
            try:
                cases = feedback.draw_cases(ex, np.random.default_rng(7))
                outputs = feedback.run_trials(ex, cases, tuple(ns[a] for a in ex.answers))
                r = feedback.result_of(ex, cases, outputs)
                fresh[ex.id] = [r.status, r.message[:500]]
            except Exception:
                fresh[ex.id] = ["raised", "\n".join(traceback.format_exc().splitlines()[-6:])]
    found["notebooks"][os.path.basename(path)] = {"error": error, "results": results,
                                                  "fresh": fresh}
print("RESULT " + json.dumps(found))
