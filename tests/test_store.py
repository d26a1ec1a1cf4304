"""The results store: append-only records survive a torn write; runs load into one DataFrame."""

import dataclasses
import json

import pandas as pd
import pytest

from benchbay import store
from benchbay.record import Record, Status
from tests.fixtures.records import typed


def record(i, status=Status.OK, **metrics):
    return typed(run_id="r1", point_id=f"p{i}", label=f"L{i}", workload="w", params={"preset": "tiny"},
                 knobs={"mbs": i, "compile": "off"}, status=status, metrics={"step_time_s": 0.1 * i, **metrics},
                 series={"step_times_s": [0.1 * i] * 3, "losses": [1.0, 0.9, 0.8]},
                 env={"machine_key": "cpu-x", "gpu": None})


def test_append_and_load(tmp_path):
    run = store.run_dir(tmp_path, "s", "r1")
    for i in (1, 2):
        store.append_record(run, record(i))
    store.write_manifest(run, {"suite": "s", "env": {"machine_key": "cpu-x"}})
    df = store.load_runs([run])
    assert list(df["mbs"]) == [1, 2] and list(df["param.preset"]) == ["tiny", "tiny"]
    assert list(df["step_time_s"]) == pytest.approx([0.1, 0.2])
    assert df["env.machine_key"].tolist() == ["cpu-x", "cpu-x"]
    assert df["losses"].iloc[0] == [1.0, 0.9, 0.8]
    # the same run found by suite folder, run id and records file
    assert len(store.load_runs(["s"], root=tmp_path)) == 2
    assert len(store.load_runs(["r1"], root=tmp_path)) == 2
    assert len(store.load_runs([run / "records.jsonl"])) == 2
    assert store.latest_run(tmp_path, "s", "cpu-x") == run
    assert store.latest_run(tmp_path, "s", "other") is None


def test_torn_last_line_is_skipped(tmp_path):
    run = store.run_dir(tmp_path, "s", "r1")
    store.append_record(run, record(1))
    with open(run / "records.jsonl", "a") as f:
        f.write(json.dumps(record(2).to_json())[:40])  # a hard kill mid-write
    with pytest.warns(UserWarning, match="incomplete record"):
        assert [r["point_id"] for r in store.read_records(run)] == ["p1"]


def test_a_record_reads_back_as_written(tmp_path):
    run = store.run_dir(tmp_path, "s", "r1")
    written = record(1, Status.OOM)
    store.append_record(run, written)
    (stored,) = store.read_records(run)
    assert stored["status"] == "oom" and list(stored) == [f.name for f in dataclasses.fields(Record)]
    assert Record.from_json(stored) == written


def test_typed_records_validate_each_record_once(tmp_path, monkeypatch):
    run = store.run_dir(tmp_path, "s", "r1")
    for i in (1, 2):
        store.append_record(run, record(i))
    validate, checked = store.validate, []
    monkeypatch.setattr(store, "validate", lambda data: checked.append(data) or validate(data))  # read_records'
    monkeypatch.setattr("benchbay.record.validate", lambda data: pytest.fail("a record validated again"))
    assert store.typed_records(run) == [record(1), record(2)] and len(checked) == 2


def test_unknown_run_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run, suite folder or records file called 'nope'"):
        store.find_runs(["nope"], root=tmp_path)


def test_export_csv_and_parquet(tmp_path):
    run = store.run_dir(tmp_path, "s", "r1")
    store.append_record(run, record(1))
    df = store.load_runs([run])
    back = pd.read_csv(store.export(df, tmp_path / "t.csv"))
    assert back["step_time_s"].iloc[0] == pytest.approx(0.1)
    assert json.loads(back["losses"].iloc[0]) == [1.0, 0.9, 0.8]
    assert pd.read_parquet(store.export(df, tmp_path / "t.parquet"))["mbs"].iloc[0] == 1
    with pytest.raises(ValueError, match="parquet or .csv"):
        store.export(df, tmp_path / "t.xlsx")


def test_a_record_appended_after_a_torn_line_is_kept(tmp_path):
    run = store.run_dir(tmp_path, "s", "r1")
    store.append_record(run, record(1))
    with open(run / "records.jsonl", "a") as f:
        f.write(json.dumps(record(2).to_json())[:40])  # a hard kill mid-write, then a resumed run appends
    store.append_record(run, record(3))
    with pytest.warns(UserWarning, match="incomplete record"):
        assert [r["point_id"] for r in store.read_records(run)] == ["p1", "p3"]
