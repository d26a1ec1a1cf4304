"""The README's examples run as written: the loop (run, show, baseline save, run, compare, gate) read
from the README itself, and the custom training step from the guide it points to, so that neither
can drift from what runs; and
the tools the docs send users to are the project's own."""

import glob
import re
import shlex
import subprocess
import sys

import pytest

from benchbay.cli import main
from benchbay.launch.base import PointSpec
from benchbay.suite import Steps
from tests.conftest import ROOT, TINY, InProcessLauncher, write_suite

README = (ROOT / "README.md").read_text()
GUIDE = (ROOT / "docs/guide.md").read_text()
#: the quickstart's stand-in: one point whose step sleeps 20 ms; its gate fails only a step 5x slower,
#: so that an A/A on a shared 2-core machine (steps of 20 to 75 ms seen) tests the loop, not the noise
TINY_QUICKSTART = f"""
name: quickstart
workload: {{name: "{TINY}", params: {{step_s: 0.02}}}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: tiny}}]}}
steps: {{warmup: 1, measure: 5}}
gate: ["step_time:median:400%"]
"""


def _blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def readme_loop() -> list[str]:
    """The benchbay command lines of the README's loop (its shell block that saves a baseline), in order."""
    (block,) = [b for b in _blocks("bash") if "benchbay baseline save" in b]
    return [line for line in block.splitlines() if line.startswith("benchbay ")]


def shell_arguments(line: str) -> list[str]:
    """A command line's arguments after ``benchbay`` as a shell passes them here: its comment
    dropped, a glob expanded in the working directory (to the one path it must name)."""
    arguments = []
    for word in shlex.split(line, comments=True)[1:]:
        matches = sorted(glob.glob(word)) if "*" in word else [word]
        assert len(matches) == 1, f"{line}: {word} must name one path, got {matches}"
        arguments += matches
    return arguments


def test_the_readme_loop_runs_as_written(tmp_path, monkeypatch, capsys):
    """The README's loop, pasted in a fresh checkout (its quickstart suite a tiny one here): every
    command exits 0, the baseline it saves is the one the gate finds, and the gate gives its verdict.
    Whatever the gate's statistics make of two runs of one repeat, an A/A never fails it."""
    (tmp_path / "suites").mkdir()
    write_suite(tmp_path / "suites" / "quickstart.yaml", TINY_QUICKSTART)
    monkeypatch.chdir(tmp_path)  # results/ and reports/ where a checkout has them
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the points' processes import the tiny workload
    lines = readme_loop()
    commands = [shlex.split(line, comments=True)[1] for line in lines]
    assert commands == ["run", "show", "baseline", "run", "compare", "gate"]
    said: dict[str, str] = {}
    for line in lines:
        arguments = shell_arguments(line)  # each in turn: compare's glob names the baseline saved before it
        code = main(arguments)
        out = capsys.readouterr()
        assert code == 0, f"{line}: exit code {code}\n{out.out}\n{out.err}"
        said[arguments[0]] = said.get(arguments[0], "") + out.out
    assert len(list((tmp_path / "results" / "quickstart").iterdir())) == 2
    assert "tiny" in said["show"] and "ok" in said["show"]
    (baseline,) = (tmp_path / "results" / "baselines").glob("*/quickstart")
    saved = baseline.relative_to(tmp_path)
    assert f"baseline: {saved} " in said["baseline"] and "`benchbay gate RUN`" in said["baseline"]
    assert "tiny" in said["compare"]
    # the gate found the baseline the loop saved (not "no baseline") and gave its verdict on it
    assert f"baseline: {saved}\n" in said["gate"] and "no baseline" not in said["gate"]
    assert "benchbay gate" in said["gate"]


def test_the_readme_custom_step_runs(tmp_path, monkeypatch):
    """The guide's own training step (the README points to it), as its package's file, measured as a
    point (narrower than written: its 1024-wide blocks take a second a step on one CPU thread)."""
    (snippet,) = [block for block in _blocks("python", GUIDE) if "class MyStep" in block]
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bench.py").write_text(snippet)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mypkg", raising=False)
    spec = PointSpec(workload="mypkg.bench:MyStep", params={"width": 32}, knobs={"precision": "fp32", "mbs": 2},
                     steps=Steps(warmup=1, measure=2), device="cpu", timeout=120)
    out = InProcessLauncher().run(spec, tmp_path / "point")
    assert out.status == "ok", out.reason
    assert len(out.series["step_times_s"]) == 3 and all(loss > 0 for loss in out.series["losses"])
    assert out.metrics["flops_per_sample"] == pytest.approx(6 * 128 * 32 ** 2 * 24)


def test_the_docs_tools_are_in_the_repository():
    """docs/gpu-machine.md's wheel fetcher is tools/device-wheels.sh; without a target it says its
    usage (fetching is left to a person: it downloads tens of MB)."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert not [doc.name for doc in docs if "../shared/" in doc.read_text()]
    assert "bash tools/device-wheels.sh decoders" in (ROOT / "docs" / "gpu-machine.md").read_text()
    out = subprocess.run(["bash", str(ROOT / "tools" / "device-wheels.sh")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "bash tools/device-wheels.sh train" in out.stderr
    assert (ROOT / "tools" / "device-env.sh").is_file()
