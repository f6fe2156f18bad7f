"""Refresh the stored outputs of the lessons' widget cells (and only those): run each
notebook in a fresh kernel with this worktree's ipukit and copy the new outputs of the
cells that make a widget, so that ``jupyter nbconvert --to html`` shows them playing.

    PYTHONPATH=$PWD python tools/update_widget_cells.py notebooks/01_ipu_and_bsp.ipynb ...
"""

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from ipukit.grading.notebook_file import read_notebook, save_notebook

WIDGETS = ("BSPView(", "PipelineTimeline(", "MemoryMap(")


def refresh(path: Path) -> int:
    nb, checked = read_notebook(path)
    run = nbformat.from_dict(nb)  # a deep copy to run
    client = NotebookClient(run, timeout=300, kernel_name="python3", record_timing=False,
                            store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute(env=dict(os.environ))
    changed = 0
    for cell, fresh in zip(nb.cells, run.cells):
        if cell.cell_type == "code" and any(w in cell.source for w in WIDGETS):
            cell.outputs = fresh.outputs
            changed += 1
    save_notebook(nb, path, checked, "tools/update_widget_cells.py")
    return changed


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(name, refresh(Path(name)), "widget cells refreshed")
