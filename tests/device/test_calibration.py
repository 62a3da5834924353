"""benchmarks/calibrate.py: the shipped profiles are what the published calibration rows give,
and the validation rows are kept apart from them."""
import importlib.util
import json
from pathlib import Path

import pytest

CALIBRATE = Path(__file__).resolve().parents[2] / "benchmarks" / "calibrate.py"


@pytest.fixture(scope="module")
def calibrate():
    spec = importlib.util.spec_from_file_location("calibrate", CALIBRATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def published(calibrate):
    return json.loads(calibrate.PUBLISHED.read_text())


def test_every_calibration_row_is_reproduced_and_the_shipped_profiles_hold_the_result(calibrate, published):
    model, report = calibrate.calibrate(published)
    assert [row["id"] for row in report if not row["reached"]] == []
    assert calibrate.shipped_disagreements(report, published["systems"]) == []
    # the fitted model reproduces each row it was fitted on
    for row in report:
        predicted = calibrate.predict(row, model.profile(row["system"], conditions=row.get("set")))
        assert predicted == pytest.approx(row["measured"], rel=0.01), row["id"]


def test_validation_rows_are_sourced_and_none_was_fitted(calibrate, published):
    sources = published["sources"]
    rows = published["validation"]
    assert len(rows) >= 30
    assert {row["source"] for row in rows} <= set(sources)
    assert all(sources[name]["url"].startswith("https://") and sources[name]["publisher"] for name in sources)

    def measurement(row):
        return (row["source"], row["system"], row["kind"], tuple(row.get("shape", ())), row.get("bytes"),
                row.get("dtype"), row.get("ranks"))

    fitted = {measurement(row) for row in published["calibration"]}
    assert [row for row in rows if measurement(row) in fitted] == []
    parts = {published["systems"].get(row["system"], {}).get("profile", row["system"]) for row in rows}
    assert len(parts) >= 3


def test_a_validation_prediction_moves_with_the_constant_it_depends_on(calibrate, published):
    """The table is the model's answer, not a copy of the measurement: change a fitted constant and
    the GEMM rows on that part move with it."""
    model, _ = calibrate.calibrate(published)
    row = next(r for r in published["validation"] if r["system"] == "b200" and r["kind"] == "mm")
    before = calibrate.predict(row, model.profile("b200"))
    model.fitted["b200"]["efficiency.matrix"] /= 2
    after = calibrate.predict(row, model.profile("b200"))
    assert before / 2 < after < 0.6 * before  # (the tiles' epilogues do not scale with the matrix rate)
