"""Main's history: series per fingerprint, the page and its exports.

Series and points are written through `bot.history` (what the watch will call) into the
App's own database, and read back through the app over HTTP: the page, JSON and CSV."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask import Flask
from flask.testing import FlaskClient
from PIL import Image
from sqlalchemy import create_engine

from bot import history
from bot.db import upgrade
from bot.history import NewPoint, SeriesKey
from bot.models import Base
from tests.browser import serve
from tests.services import postgres_database
from tests.test_app_flow import rt

if TYPE_CHECKING:
    from playwright.sync_api import Browser

REPO = "sgl-project/sglang-omni"
T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
KEY = SeriesKey(REPO, "cosyvoice3", "H200", "550.54", "runner@sha256:aa", "streaming", 8, "rtf")


def point(n: int, change: float, **extra: object) -> NewPoint:
    fields: dict[str, object] = {
        "sha": f"{n:040x}",
        "parent_sha": f"{n - 1:040x}",
        "verification_id": f"v-w{n:04d}",
        "change_pct": change,
        "ci_low_pct": change - 1.0,
        "ci_high_pct": change + 1.0,
        "verdict": "no-change",
        "pairs": 6,
        **extra,
    }
    return NewPoint(**fields)  # type: ignore[arg-type]


def record(app: Flask, key: SeriesKey, points: list[NewPoint], start: int = 0) -> None:
    with rt(app).db.session() as s:
        for i, p in enumerate(points):
            history.add_point(s, key, p, T0 + dt.timedelta(hours=start + i))


def client_page(app: Flask) -> str:
    resp = app.test_client().get(f"/history/{REPO}?token={token(app)}")
    assert resp.status_code == 200
    return resp.get_data(as_text=True)


def token(app: Flask) -> str:
    return rt(app).signer.history_token(REPO)


def test_the_migrations_build_exactly_the_models_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/schema.db"
    upgrade(url)
    with create_engine(url).connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


def test_the_migrations_build_exactly_the_models_on_postgresql() -> None:
    with postgres_database() as url:
        upgrade(url)
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        engine.dispose()


def test_a_new_driver_closes_the_series_and_opens_another(app: Flask) -> None:
    record(app, KEY, [point(1, 0.5), point(2, -0.2, head_value=50.0)])
    newer = SeriesKey(**{**KEY.__dict__, "driver": "560.28"})
    record(app, newer, [point(3, 1.0, parent_value=53.0), point(4, 0.2)], start=2)
    with rt(app).db.session() as s:
        views = history.history(s, REPO, history.Filter())
    assert [(v.key.driver, v.closed_at is None) for v in views] == [
        ("560.28", True),
        ("550.54", False),
    ]
    new, old = views
    assert old.changes == [("driver", "550.54", "560.28")]
    assert old.successor_id == new.id
    assert [p.sha[-1] for p in old.points] == ["1", "2"]
    assert [p.sha[-1] for p in new.points] == ["3", "4"]
    # Commit 2, the head of the old series' last point and the parent of the new one's
    # first, measured in both sizes the shift: 53 / 50 − 1. Not an alert, not a point.
    assert old.shift_pct == pytest.approx(6.0)
    assert old.shift_sha == f"{2:040x}"
    assert new.shift_pct is None
    page = client_page(app)
    assert "the level moved +6.0%" in page
    assert "driver 550.54 → 560.28" in page


def test_a_point_recorded_twice_is_kept_once(app: Flask) -> None:
    record(app, KEY, [point(1, 2.0), point(1, 2.0)])
    with rt(app).db.session() as s:
        (view,) = history.history(s, REPO, history.Filter())
    assert len(view.points) == 1


def test_a_merge_measured_again_is_one_point_its_measurements_pooled(
    app: Flask, client: FlaskClient
) -> None:
    """The hunt's confirming rerun of the fifth merge (−9.4%) joins its watch point
    (−8.1%): five points, one cliff of about −8.7%, not two."""
    points = [point(n, 0.0) for n in range(1, 5)]
    points.append(point(5, -8.1, ci_low_pct=-9.1, ci_high_pct=-7.1, verdict="regressed"))
    record(app, KEY, points)
    rerun = point(5, -9.4, ci_low_pct=-10.4, ci_high_pct=-8.4, verdict="regressed")
    record(app, KEY, [NewPoint(**{**rerun.__dict__, "verification_id": "v-confirm"})], start=9)
    with rt(app).db.session() as s:
        (view,) = history.history(s, REPO, history.Filter())
    assert [p.sha for p in view.points] == [f"{n:040x}" for n in range(1, 6)]
    fifth = view.points[-1]
    assert [m.verification_id for m in fifth.measurements] == ["v-w0005", "v-confirm"]
    assert -9.4 < fifth.change_pct < -8.1
    assert fifth.ci_low_pct is not None
    assert fifth.ci_high_pct is not None
    assert fifth.ci_high_pct - fifth.ci_low_pct < 2.0  # two measurements: narrower than one
    assert round(fifth.index, 4) == round(100 * (1 + fifth.change_pct / 100), 4)
    page = client.get(f"/history/{REPO}?token={token(app)}").get_data(as_text=True)
    assert page.count(f"/commit/{5:040x}") == 1  # one row for the merge
    assert "pooled from 2 measurements: -8.1% (regressed), -9.4% (regressed)" in page.replace(
        "−", "-"
    )
    rows = json.loads(client.get(f"/history/{REPO}.json?token={token(app)}").get_data())
    assert [r["sha"] for r in rows["points"]].count(f"{5:040x}") == 1
    assert rows["points"][-1]["measurements"] == 2


def test_a_rerun_that_disagrees_stands_alone(app: Flask, client: FlaskClient) -> None:
    """The hunt's rerun cleared what the watch saw (−8% [−10, −6], then −1% [−3, +1]):
    pooling them would chain a −4% cliff for a merge the hunt found fine."""
    record(app, KEY, [point(1, -8.0, ci_low_pct=-10.0, ci_high_pct=-6.0, verdict="regressed")])
    rerun = point(1, -1.0, ci_low_pct=-3.0, ci_high_pct=1.0, verdict="no-change")
    record(app, KEY, [NewPoint(**{**rerun.__dict__, "verification_id": "v-rerun"})], start=3)
    with rt(app).db.session() as s:
        (view,) = history.history(s, REPO, history.Filter())
    [p] = view.points
    assert (p.change_pct, p.verdict, p.pooled, len(p.measurements)) == (-1.0, "no-change", False, 2)
    assert round(p.index, 4) == 99.0
    page = client.get(f"/history/{REPO}?token={token(app)}").get_data(as_text=True)
    assert "measured 2 times, the latest shown" in page


def test_the_index_band_widens_with_every_chained_change(app: Flask) -> None:
    record(app, KEY, [point(n, 0.5) for n in range(1, 9)])
    with rt(app).db.session() as s:
        (view,) = history.history(s, REPO, history.Filter())
    widths = [(p.band_high or 0) - (p.band_low or 0) for p in view.points]
    assert all(b > a for a, b in itertools.pairwise(widths))
    # Eight ±1% changes: about ±1% × √8 around the index.
    last = view.points[-1]
    assert last.band_low is not None
    assert last.band_high is not None
    assert 2.5 < (last.band_high - last.band_low) / 2 / last.index * 100 < 3.2
    record(app, KEY, [point(9, 1.0, ci_low_pct=None, ci_high_pct=None)], start=20)
    with rt(app).db.session() as s:
        (view,) = history.history(s, REPO, history.Filter())
    assert view.points[-1].band_low is None  # unknown once a merge without one is chained


def test_the_index_chains_every_point_whatever_the_dates_shown(app: Flask) -> None:
    record(app, KEY, [point(1, 10.0), point(2, -10.0), point(3, 5.0)])
    with rt(app).db.session() as s:
        (every,) = history.history(s, REPO, history.Filter())
        later = history.Filter.parse({"since": "2026-11-02", "until": "2026-11-02"})
        (shown,) = history.history(s, REPO, later)
    assert [round(p.index, 4) for p in every.points] == [110.0, 99.0, 103.95]
    since_two = history.Filter(since=T0 + dt.timedelta(hours=1))
    with rt(app).db.session() as s:
        (tail,) = history.history(s, REPO, since_two)
    assert [round(p.index, 4) for p in tail.points] == [99.0, 103.95]
    assert len(shown.points) == 3


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("mode=fast", "mode must be one of streaming, non-streaming"),
        ("concurrency=%C2%B2", "concurrency must be a whole number"),
        ("concurrency=99999999999", "concurrency must be a whole number"),
        ("since=yesterday", "since must be a date, YYYY-MM-DD"),
        ("task=%3Cscript%3E", "task must be a name of letters, digits and ._+-"),
    ],
)
def test_a_filter_that_is_not_one_is_a_400_naming_it(
    app: Flask, client: FlaskClient, query: str, says: str
) -> None:
    resp = client.get(f"/history/{REPO}?token={token(app)}&{query}")
    assert resp.status_code == 400
    assert resp.get_data(as_text=True).strip() == says


@pytest.mark.parametrize("suffix", ["", ".json", ".csv"])
@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("until=9999-12-31", "until must be a date from 2000-01-01 to 2999-12-31"),
        ("since=0001-01-01", "since must be a date from 2000-01-01 to 2999-12-31"),
    ],
)
def test_a_date_past_what_the_page_can_count_is_a_400_not_a_crash(
    app: Flask, client: FlaskClient, suffix: str, query: str, says: str
) -> None:
    """The day after 9999-12-31 overflowed: a 500 on the page and both exports."""
    record(app, KEY, [point(1, 1.0)])
    resp = client.get(f"/history/{REPO}{suffix}?token={token(app)}&{query}")
    assert resp.status_code == 400
    assert resp.get_data(as_text=True).strip() == says


def test_a_point_of_a_thousandfold_change_draws_no_nan_or_inf(
    app: Flask, client: FlaskClient
) -> None:
    """A runner's absurd figures (the index passes float's range after ~100 of them)
    leave the line where they stop being numbers; the exports stay strict JSON."""
    absurd = [point(1, 1e300), point(2, -100.0), point(3, 2.0)]
    record(app, KEY, [*absurd, *(point(n, 99_900.0) for n in range(4, 130))])
    page = client.get(f"/history/{REPO}?token={token(app)}").get_data(as_text=True)
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert "<polyline" in svg
    assert "nan" not in svg.lower()
    assert "inf" not in svg.lower()
    data = client.get(f"/history/{REPO}.json?token={token(app)}").get_data(as_text=True)
    json.loads(data, parse_constant=lambda c: pytest.fail(f"{c} in the JSON export"))


def test_without_the_repository_token_there_is_no_history(app: Flask, client: FlaskClient) -> None:
    record(app, KEY, [point(1, 1.0)])
    other = rt(app).signer.history_token("sgl-project/other")
    report_token = rt(app).signer.token("v-w0001")
    for bad in ("", "x", other, report_token):
        for suffix in ("", ".json", ".csv"):
            resp = client.get(f"/history/{REPO}{suffix}?token={bad}")
            assert resp.status_code == 404, (bad, suffix)


def test_the_page_shows_each_series_its_chart_and_its_merges(
    app: Flask, client: FlaskClient
) -> None:
    record(
        app,
        KEY,
        [
            point(1, 0.3),
            point(2, -8.1, verdict="regressed", change_point="regression", pr_number=412),
            point(3, 0.2, bundle_key="bundles/v-w0003/H200.zip"),
        ],
    )
    resp = client.get(f"/history/{REPO}?token={token(app)}")
    assert resp.status_code == 200
    page = resp.get_data(as_text=True)
    assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert "<script" not in page
    assert "cosyvoice3 · H200 · streaming · concurrency 8 · rtf" in page
    assert page.count("<polyline") == 1
    assert '<circle class="regression"' in page
    tooltip = f"<title>2026-11-02 · {2:040x}"[:30] + " · #412&#10;change -8.1% ["
    assert tooltip in page  # the point's date, sha, PR and change
    assert '<a href="https://github.com/sgl-project/sglang-omni/pull/412">#412</a>' in page
    assert f'<a href="https://github.com/{REPO}/commit/{2:040x}">' in page
    assert page.count("<circle") == 3  # every merge a hover target
    assert '<text class="date"' in page
    assert ">2026-11-02</text>" in page
    assert "−8.1%" in page or "-8.1%" in page
    assert "change point (regression)" in page
    assert f"/reports/v-w0003?token={rt(app).signer.token('v-w0003')}" in page


def test_hostile_names_from_a_runner_are_text(app: Flask, client: FlaskClient) -> None:
    hostile = SeriesKey(**{**KEY.__dict__, "image": '"><img src=x onerror=alert(1)>=cmd|x'})
    record(app, hostile, [point(1, 1.0)])
    page = client.get(f"/history/{REPO}?token={token(app)}").get_data(as_text=True)
    assert "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    rows = list(
        csv.DictReader(
            io.StringIO(
                client.get(f"/history/{REPO}.csv?token={token(app)}").get_data(as_text=True)
            )
        )
    )
    assert rows[0]["image"] == '"><img src=x onerror=alert(1)>=cmd|x'
    formula = SeriesKey(**{**KEY.__dict__, "task": "=HYPERLINK", "image": "=1+1"})
    record(app, formula, [point(1, 1.0)])
    csv_text = client.get(f"/history/{REPO}.csv?token={token(app)}").get_data(as_text=True)
    assert ",'=1+1," in csv_text


def test_the_exports_hold_every_point_shown_and_agree(app: Flask, client: FlaskClient) -> None:
    record(app, KEY, [point(n, (-1) ** n * 0.5 * n, bundle_key=f"b/{n}.zip") for n in range(1, 7)])
    q = f"token={token(app)}&mode=streaming&since=2026-11-02"
    as_json = json.loads(client.get(f"/history/{REPO}.json?{q}").get_data())
    as_csv = list(
        csv.DictReader(io.StringIO(client.get(f"/history/{REPO}.csv?{q}").get_data(as_text=True)))
    )
    assert as_json["repo"] == REPO
    assert len(as_json["points"]) == len(as_csv) == 6
    assert list(as_csv[0]) == list(history.EXPORT_FIELDS)
    for j, c in zip(as_json["points"], as_csv, strict=True):
        assert c["sha"] == j["sha"]
        assert float(c["change_pct"]) == j["change_pct"]
        assert float(c["index"]) == j["index"]
        assert c["bundle"] == j["bundle"]
        assert j["bundle"].endswith(
            f"/reports/{j['verification_id']}?token={rt(app).signer.token(j['verification_id'])}"
        )
    none = json.loads(client.get(f"/history/{REPO}.json?token={token(app)}&gpu=H100").get_data())
    assert none["points"] == []


def test_the_history_page_in_a_real_browser(app: Flask, browser: Browser, tmp_path: Path) -> None:
    """Chromium: the chart is drawn, the filters keep the token, the exports download,
    nothing is fetched elsewhere and no rule of the page's CSP is broken."""
    record(app, KEY, [point(n, 0.4 * ((-1) ** n), bundle_key=f"b/{n}") for n in range(1, 30)])
    other = SeriesKey(**{**KEY.__dict__, "mode": "non-streaming", "concurrency": 16})
    record(app, other, [point(n, -8.0 if n == 5 else 0.1) for n in range(1, 9)])
    with serve(app) as base:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        console: list[str] = []
        try:
            page = context.new_page()
            page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: console.append(str(e)))
            resp = page.goto(f"{base}/history/{REPO}?token={token(app)}", wait_until="load")
            assert resp is not None
            assert resp.status == 200
            assert page.title() == f"History of main · {REPO}"
            assert page.locator("section").count() == 2
            line = page.locator("svg polyline").first.bounding_box()
            assert line is not None
            assert line["width"] > 500
            assert line["height"] > 20
            shot = tmp_path / "history.png"
            page.screenshot(path=str(shot), full_page=True)
            with Image.open(shot) as im:
                assert im.format == "PNG"
                assert im.width >= 1280
                colours = im.convert("RGB").getcolors(maxcolors=1 << 16) or []
                assert len(colours) > 20  # drawn, not blank

            page.select_option("select[name=mode]", "non-streaming")
            page.click("button[type=submit]")
            page.wait_for_load_state("load")
            assert "mode=non-streaming" in page.url
            assert f"token={token(app)}" in page.url
            assert page.locator("section").count() == 1
            assert "concurrency 16" in page.locator("h2").inner_text()

            href = page.locator("#export-csv").get_attribute("href")
            assert href is not None
            got = page.request.get(page.locator("#export-csv").evaluate("a => a.href"))
            assert got.status == 200
            rows = list(csv.DictReader(io.StringIO(got.text())))
            assert {r["mode"] for r in rows} == {"non-streaming"}
            assert len(rows) == 8
            assert console == [], console
        finally:
            context.close()
