"""The video section's noise between processes: what bounds it, and a blank where nothing does."""

import pandas as pd

from benchbay.analysis.data_loading import _with_noise_floor, best_loaders, workers_claim
from benchbay.analysis.metrics import Verdict


def _table(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame([{"workload": "dreamzero", "mbs": mbs, "video_backend": backend, "video_device": "cpu",
                          "prefetch_factor": 2, "num_workers": workers, "inflation_change": change,
                          "inflation_change_low": low, "inflation_change_high": high, "verdict": verdict,
                          "wait share": 0.0, "measured again in": ""}
                         for mbs, backend, workers, change, low, high, verdict in rows])


def test_nothing_bounds_the_noise_where_no_loader_reads_faster():
    """It read '+0.0%' where no speed-up bounded it (review): a blank says unknown."""
    table = _with_noise_floor(_table([
        (1, "pyav", 4, 0.10, 0.05, 0.15, Verdict.SLOWER),
        (1, "pyav", 16, 0.30, 0.20, 0.40, Verdict.SLOWER),
        # at mbs 4 a speed-up the steps cannot tell from none still is a process reading faster
        (4, "pyav", 4, -0.08, -0.20, 0.04, Verdict.NOT_SIGNIFICANT),
        (4, "pyav", 16, 0.12, 0.02, 0.22, Verdict.SLOWER),
    ]))
    floors = table.groupby("mbs")["noise_floor_change"].first()
    assert pd.isna(floors[1]) and floors[4] == 0.08
    # unknown noise: the intervals alone decide; at mbs 4 the slow-down is within the speed-up seen
    assert list(table["verdict"]) == [Verdict.SLOWER, Verdict.SLOWER, Verdict.NOT_SIGNIFICANT,
                                      Verdict.NOT_SIGNIFICANT]
    assert pd.isna(best_loaders(table).set_index("mbs").loc[1, "noise_floor_change"])
    claim = workers_claim(table).set_index("mbs")["claim"]
    assert claim[1] == "reproduced" and claim[4].startswith("not reproduced")
