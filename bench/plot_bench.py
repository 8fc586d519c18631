#!/usr/bin/env python3
"""flashcl-plot from a checkout, with no flashcl installed: PNG figures from
flashcl-bench's CSV and peers' CSVs. The code is the package's
python/flashcl/plot.py (`flashcl-plot` or `python -m flashcl.plot` once
installed with pip install './python[plot]'), loaded here by its path so
that neither the package nor libflashcl is needed; --help lists the
options."""
import importlib.util
import sys
from pathlib import Path

PLOT = Path(__file__).resolve().parents[1] / "python" / "flashcl" / "plot.py"


def _load():
    spec = importlib.util.spec_from_file_location("flashcl_plot", PLOT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    _load().main(prog="plot_bench.py")
