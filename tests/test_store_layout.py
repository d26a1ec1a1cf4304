"""The store owns a run's layout: its file and folder names, and a versioned manifest."""

import json

import pytest

from benchbay import store


def test_a_manifest_is_stamped_with_its_schema_and_a_newer_one_is_skipped_by_name(tmp_path):
    run = tmp_path / "results" / "s" / "20260101-000000-abcd"
    store.write_manifest(run, {"suite": "s", "state": "complete"})
    assert json.loads((run / store.MANIFEST).read_text())["schema"] == store.MANIFEST_SCHEMA
    assert store.read_manifest(run)["state"] == "complete"
    (run / store.MANIFEST).write_text(json.dumps({"suite": "s", "state": "complete"}))  # before versions
    assert store.read_manifest(run)["suite"] == "s"
    (run / store.MANIFEST).write_text(json.dumps({"suite": "s", "schema": store.MANIFEST_SCHEMA + 1}))
    newer = store.MANIFEST_SCHEMA + 1
    with pytest.warns(UserWarning, match=rf"{store.MANIFEST}: skipping a manifest of schema {newer}"):
        assert store.read_manifest(run) == {}


def test_a_runs_folders_are_named_by_the_store(tmp_path):
    run = tmp_path / "r"
    assert store.profile_dir(run, "abc", 2) == run / "profiles" / "abc-2"
    assert store.memory_dir(run) == run / "memory"
