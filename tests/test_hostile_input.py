"""A suite's name is one safe path component: nothing it says writes outside the results root."""

import pytest

from benchbay.store import run_dir
from benchbay.suite import SuiteError, load
from tests.conftest import write_suite

SUITE = """
name: {name}
workload: {{name: tests.fixtures.tinywork:Tiny}}
knobs: {{precision: fp32}}
steps: {{warmup: 1, measure: 2}}
"""


@pytest.mark.parametrize("name", ["/tmp/x", "../../escaped", "..", "''", "a/b", ".hidden"])
def test_a_name_that_is_not_one_safe_path_component_is_refused(tmp_path, name):
    path = write_suite(tmp_path / "s.yaml", SUITE.format(name=name))
    with pytest.raises(SuiteError, match="name.*one path component"):
        load(path)


def test_a_safe_name_loads(tmp_path):
    assert load(write_suite(tmp_path / "s.yaml", SUITE.format(name="my-suite_2.1"))).name == "my-suite_2.1"


@pytest.mark.parametrize("suite, run_id", [("..", "r"), ("ok", "../r"), ("/abs", "r"), ("ok", "")])
def test_the_store_never_builds_a_run_folder_outside_its_root(tmp_path, suite, run_id):
    with pytest.raises(ValueError, match="one path component"):
        run_dir(tmp_path, suite, run_id)
