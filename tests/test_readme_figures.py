"""The README's table of tuned points at update fidelity is the store's: each row's step, samples/s/GPU,
MFU and fidelity are what ``benchbay show`` derives from the committed records it names."""

import re
from pathlib import Path

import pytest

from benchbay.analysis.tables import point_summary
from benchbay.store import load_runs

ROOT = Path(__file__).resolve().parents[1]


def table_rows() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- fidelity-table -->\n(.*?)<!-- /fidelity-table -->", text, re.S).group(1)
    lines = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| point")]
    return [[cell.strip().strip("*`") for cell in line.strip("|").split("|")] for line in lines]


@pytest.mark.parametrize("row", table_rows(), ids=lambda r: f"{r[0]}-{r[-1]}")
def test_readme_row_matches_its_record(row):
    label, numerics, mbs, step, rate, mfu, fidelity, run = row
    run_dir = next((ROOT / "results").glob(f"*/{run}"))
    summary = point_summary(load_runs([run_dir]))
    point = summary[summary["label"] == label].iloc[0]
    assert numerics == f"{point['precision']} / {point['optimizer']}"
    assert int(mbs) == point["mbs"]
    assert step == f"{point['step_time_s']:.3f}"
    assert rate == f"{point['samples_per_s_per_gpu']:.2f}"
    assert mfu == f"{point['mfu']:.1%} / {point['mfu_datasheet']:.1%}"
    assert fidelity == point["fidelity"]
