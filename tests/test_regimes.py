"""Regime maps on synthetic sweep rows (the contract's shape): winners, ties, speedups, fallbacks, figures, report."""

from __future__ import annotations

import itertools

import matplotlib.image
import pytest

from gradcode.errors import ConfigError
from gradcode.output import regime_plots, regimes
from gradcode.output.regime_plots import write_figures
from gradcode.output.regimes import markdown, winners

SCHEMES = [("sync", "sync"), ("fastest_k", "fastest_k"), ("coded", "coded")]


def make_rows(swept: dict[str, list], time, delays=("d",), clusters=("sim",), schemes=SCHEMES) -> list[dict]:
    """One row per cell x cluster x delay x scheme; ``time(values, label, delay)`` -> (mean, ci) or None."""
    rows = []
    for cell, combo in enumerate(itertools.product(*swept.values())):
        values = dict(zip(swept, combo, strict=True))
        for cluster, delay, (label, name) in itertools.product(clusters, delays, schemes):
            t = time(values, label, delay)
            mean, ci = (None, None) if t is None else t
            rows.append({"cell": cell, **values, "cluster": cluster, "delay": delay, "scheme": label,
                         "scheme_name": name, "baseline": name == "sync", "seeds": 3,
                         "time_to_target": mean, "time_to_target_ci": ci,
                         "mean_iteration_time": None if mean is None else mean / 10,
                         "mean_iteration_time_ci": None if ci is None else ci / 10,
                         "computed_units": 40.0 * (3 if name == "coded" else 1),
                         "total_time": None if mean is None else 20 * mean / 10,   # 20 iterations
                         "wall_seconds": 0.5})
    return rows


def straggle_time(values, label, delay):
    """sync pays the added delay in full, fastest_k a little, the code none but its triple load."""
    extra = values.get("delay.extra", 0)
    return {"sync": (10.0 + extra, 0.1), "fastest_k": (8.0 + 0.6 * extra, 0.1), "coded": (12.0, 0.1)}[label]


@pytest.fixture
def figures(monkeypatch):
    """The figures drawn, kept for inspection (they are still written)."""
    drawn = {}
    save = regime_plots._save

    def keep(plt, fig, path):
        drawn[path.name] = fig
        save(plt, fig, path)

    monkeypatch.setattr(regime_plots, "_save", keep)
    return drawn


# --- winners --------------------------------------------------------------------------------------------------
def test_one_swept_key_winner_speedup_and_the_code_taking_over():
    rows = make_rows({"delay.extra": [0, 2, 4, 8]}, straggle_time)
    table = winners(rows, ["delay.extra"])
    assert [w["delay.extra"] for w in table] == [0, 2, 4, 8]
    assert [w["winner"] for w in table] == ["fastest_k", "fastest_k", "fastest_k", "coded"]
    assert table[0]["speedup"] == pytest.approx(10 / 8)
    assert table[3]["speedup"] == pytest.approx(18 / 12)
    assert table[0]["metric"] == "time_to_target" and table[0]["sync"] == "sync"
    assert table[0]["value"] == 8.0 and table[0]["ci"] == 0.1
    assert table[0]["values"] == {"sync": 10.0, "fastest_k": 8.0, "coded": 12.0}


def test_ties_are_the_schemes_whose_interval_overlaps_the_winners():
    def time(values, label, delay):
        return {"sync": (10.0, 0.5), "fastest_k": (9.0, 0.5), "coded": (9.5, 0.1)}[label]

    (w,) = winners(make_rows({"x": [1]}, time), ["x"])
    assert w["winner"] == "fastest_k"
    assert w["tied"] == ["sync", "coded"]     # |10 - 9| <= 0.5 + 0.5; |9.5 - 9| <= 0.5 + 0.1

    def apart(values, label, delay):
        return {"sync": (10.0, 0.4), "fastest_k": (9.0, 0.5), "coded": (9.7, 0.1)}[label]

    (w,) = winners(make_rows({"x": [1]}, apart), ["x"])
    assert w["tied"] == []


def test_without_intervals_only_equal_means_tie():
    def time(values, label, delay):
        return {"sync": (10.0, None), "fastest_k": (9.0, None), "coded": (9.0, None)}[label]

    (w,) = winners(make_rows({"x": [1]}, time), ["x"])
    assert w["winner"] == "fastest_k" and w["tied"] == ["coded"] and w["ci"] is None


def test_a_cell_without_sync_has_no_speedup_and_says_so():
    rows = [r for r in make_rows({"delay.extra": [0, 4]}, straggle_time) if not (r["cell"] == 1 and r["baseline"])]
    table = winners(rows, ["delay.extra"])
    assert table[0]["speedup"] == pytest.approx(10 / 8)
    assert table[1]["winner"] == "fastest_k" and table[1]["sync"] is None and table[1]["speedup"] is None
    text = "\n".join(markdown(rows, ["delay.extra"]))
    assert "| no sync |" in text and "; 1 without sync (no speedup)." in text


def test_sync_without_a_value_gives_no_speedup():
    def time(values, label, delay):
        return None if label == "sync" else straggle_time(values, label, delay)

    (w,) = winners(make_rows({"x": [1]}, time), ["x"])
    assert w["winner"] == "fastest_k" and w["sync"] == "sync" and w["speedup"] is None


def test_falls_back_to_mean_iteration_time_only_where_no_scheme_reached_the_target():
    rows = make_rows({"delay.extra": [0, 8]}, straggle_time)
    for r in rows:
        if r["cell"] == 1:
            r["time_to_target"] = r["time_to_target_ci"] = None
    table = winners(rows, ["delay.extra"])
    assert [w["metric"] for w in table] == ["time_to_target", "mean_iteration_time"]
    assert table[1]["winner"] == "coded" and table[1]["value"] == pytest.approx(1.2)
    assert table[1]["speedup"] == pytest.approx(18 / 12)
    lines = markdown(rows, ["delay.extra"])
    assert any(line.startswith("| 1 | 8 |") and "†" in line for line in lines)
    assert "; 1 ranked by mean iteration time †." in lines[-2]
    assert "none reached the target loss" in lines[2]


def test_a_scheme_that_never_reached_the_target_cannot_win_and_there_is_no_fallback():
    def time(values, label, delay):
        return None if label == "fastest_k" else straggle_time(values, label, delay)

    (w,) = winners(make_rows({"x": [1]}, time), ["x"])
    assert w["metric"] == "time_to_target" and w["winner"] == "sync" and w["speedup"] == 1.0
    assert "fastest_k" not in w["values"]


def test_several_delays_and_clusters_are_ranked_apart():
    def time(values, label, delay):
        slow = {"pareto": 0, "straggle": 10}[delay]
        return {"sync": (10.0 + slow, 0.1), "fastest_k": (8.0 + slow / 2, 0.1), "coded": (12.0, 0.1)}[label]

    rows = make_rows({"x": [1, 2]}, time, delays=("pareto", "straggle"), clusters=("sim", "mpi"))
    table = winners(rows, ["x"])
    assert len(table) == 2 * 2 * 2
    assert {(w["cluster"], w["delay"], w["winner"]) for w in table} == {
        (c, "pareto", "fastest_k") for c in ("sim", "mpi")} | {(c, "straggle", "coded") for c in ("sim", "mpi")}
    reading = markdown(rows, ["x"])[-2]
    assert "On sim, pareto: fastest_k wins 2 of 2 cells (every cell)" in reading
    assert "On mpi, straggle: coded wins 2 of 2 cells" in reading


def test_higher_is_better_for_the_speedup_metrics():
    rows = make_rows({"x": [1]}, straggle_time)
    for r in rows:
        r["speedup_target"] = 10.0 / r["time_to_target"]
    (w,) = winners(rows, ["x"], metric="speedup_target")
    assert w["winner"] == "fastest_k" and w["speedup"] == pytest.approx(1.25)


def test_rows_read_back_from_csv_strings_rank_the_same():
    rows = make_rows({"delay.extra": [0, 8]}, straggle_time)
    as_csv = [{k: ("" if v is None else str(v)) for k, v in r.items()} for r in rows]
    assert [(w["winner"], w["speedup"]) for w in winners(as_csv, ["delay.extra"])] == \
        [(w["winner"], w["speedup"]) for w in winners(rows, ["delay.extra"])]


@pytest.mark.parametrize("missing", [None, "", float("nan")])
def test_none_everywhere_never_raises(missing, tmp_path):
    rows = make_rows({"a": [1, 2], "b": [3, 4]}, lambda *_: None)
    for r in rows:
        for key in list(r):
            if key not in ("cell", "a", "b", "cluster", "delay", "scheme", "scheme_name", "baseline"):
                r[key] = missing
    table = winners(rows, ["a", "b"])
    assert all(w["winner"] is None and w["speedup"] is None and w["metric"] == "mean_iteration_time" for w in table)
    assert write_figures(rows, ["a", "b"], tmp_path) == []
    lines = markdown(rows, ["a", "b"])
    assert "no scheme has a value in any of the 4 cells" in lines[-2]
    assert sum("none (no value)" in line for line in lines) == 4


def test_only_some_values_missing_still_draws(tmp_path):
    rows = make_rows({"a": [1, 2], "b": [3, 4]}, straggle_time)
    for r in rows[::2]:
        r["computed_units"] = r["total_time"] = r["time_to_target_ci"] = None
    assert write_figures(rows, ["a", "b"], tmp_path) == ["regime_map.png", "computation_speedup.png"]


def test_two_jobs_draw_the_same_figures(tmp_path):
    """jobs = 2 draws the second figure in a forked process: the same files, byte for byte, as one job."""
    rows = make_rows({"a": [1, 2], "b": [3, 4]}, straggle_time)
    one, two = tmp_path / "one", tmp_path / "two"
    assert write_figures(rows, ["a", "b"], one) == ["regime_map.png", "computation_speedup.png"]
    assert write_figures(rows, ["a", "b"], two, jobs=2) == ["regime_map.png", "computation_speedup.png"]
    for name in ("regime_map.png", "computation_speedup.png"):
        assert (one / name).read_bytes() == (two / name).read_bytes()


# --- the reading ----------------------------------------------------------------------------------------------
def test_the_reading_says_who_wins_where_from_the_data():
    rows = make_rows({"delay.extra": [0, 2, 4, 8], "schemes.coded.s": [1, 2]}, straggle_time)
    reading = markdown(rows, ["delay.extra", "schemes.coded.s"])[-2]
    assert "fastest_k wins 6 of 8 cells (exactly where delay.extra <= 4)" in reading
    assert "coded wins 2 of 8 cells (exactly where delay.extra = 8)" in reading
    assert "speedup over sync ranges from 1.25x to 1.50x" in reading


def test_the_reading_tells_a_bounding_range_from_an_exact_one():
    def time(values, label, delay):
        wins = values["p"] >= 2 and values["q"] == 1 or (values["p"], values["q"]) == (3, 2)
        return {"sync": (10.0, 0.1), "fastest_k": (9.0, 0.1), "coded": (8.0 if wins else 11.0, 0.1)}[label]

    rows = make_rows({"p": [1, 2, 3], "q": [1, 2]}, time)
    reading = markdown(rows, ["p", "q"])[-2]
    assert "coded wins 3 of 6 cells (all where p >= 2)" in reading
    assert "fastest_k wins 3 of 6 cells" in reading


def test_markdown_table_has_a_line_per_cell_and_numbers_by_magnitude():
    rows = make_rows({"delay.extra": [0, 4]}, straggle_time)
    lines = markdown(rows, ["delay.extra"])
    assert lines[0] == "## Regime map"
    table = [line for line in lines if line.startswith("| ")]
    assert table[0].startswith("| cell | delay.extra | cluster | delay | winner |")
    assert table[1] == "| 0 | 0 | sim | d | fastest_k | 8.00 ± 0.10 | 1.25x | - | - |"
    assert len(table) == 3


# --- figures --------------------------------------------------------------------------------------------------
def test_two_keys_draw_a_heatmap_of_winners_with_speedups_and_ties(tmp_path, figures):
    def time(values, label, delay):
        t = straggle_time(values, label, delay)
        return (t[0], 3.0) if values["schemes.coded.s"] == 2 else t   # wide intervals: every scheme tied

    rows = make_rows({"delay.extra": [0, 2, 8], "schemes.coded.s": [1, 2]}, time)
    assert write_figures(rows, ["delay.extra", "schemes.coded.s"], tmp_path) == \
        ["regime_map.png", "computation_speedup.png"]
    assert matplotlib.image.imread(tmp_path / "regime_map.png").ndim == 3
    (ax,) = [a for a in figures["regime_map.png"].axes if a.get_visible()]
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == sorted(["1.25x\nfastest_k", "1.30x\nfastest_k", "1.50x\ncoded",
                            "1.25x*\nfastest_k", "1.30x*\nfastest_k", "1.50x*\ncoded"])
    assert ax.get_xlabel() == "delay.extra" and ax.get_ylabel() == "schemes.coded.s"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "2", "8"]
    colours = regime_plots.scheme_colours(rows)
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(ax.patches) == 6 and len(hatched) == 3
    coded_cell = next(p for p in ax.patches if p.get_xy() == (1.5, -0.5))
    assert coded_cell.get_facecolor()[:3] == pytest.approx(matplotlib.colors.to_rgb(colours["coded"]))
    assert "time to target" in figures["regime_map.png"]._suptitle.get_text()
    assert "sim" in ax.get_title()
    (legend,) = figures["regime_map.png"].legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "fastest_k", "coded", "* tie: another scheme's 95% CI overlaps the winner's"]


def test_the_map_marks_cells_ranked_by_the_fallback_and_cells_without_value(figures, tmp_path):
    rows = make_rows({"delay.extra": [0, 8], "b": [1]}, straggle_time)
    for r in rows:
        if r["cell"] == 1:
            r["time_to_target"] = r["time_to_target_ci"] = None
    rows.extend([dict(r, cell=2, time_to_target=None, mean_iteration_time=None, **{"delay.extra": 9})
                 for r in rows[:3]])
    write_figures(rows, ["delay.extra", "b"], tmp_path)
    (ax,) = [a for a in figures["regime_map.png"].axes if a.get_visible()]
    assert [t.get_text() for t in ax.texts] == ["1.25x\nfastest_k", "1.50x†\ncoded", "no value"]
    legend = [t.get_text() for t in figures["regime_map.png"].legends[0].get_texts()]
    assert legend[-2:] == ["no scheme has a value", "† no scheme has time to target: ranked by mean iteration time"]


def test_a_zip_grid_leaves_cells_not_run_blank(figures, tmp_path):
    rows = [r for r in make_rows({"a": [1, 2], "b": [3, 4]}, straggle_time) if r["cell"] in (0, 3)]
    write_figures(rows, ["a", "b"], tmp_path)
    (ax,) = [a for a in figures["regime_map.png"].axes if a.get_visible()]
    assert len(ax.patches) == 2


def test_the_heatmap_grows_with_the_cells_and_wraps_panels(tmp_path, figures):
    write_figures(make_rows({"a": [1, 2], "b": [1, 2]}, straggle_time), ["a", "b"], tmp_path / "small")
    small_size = figures["regime_map.png"].get_size_inches()
    big = make_rows({"a": list(range(8)), "b": list(range(5))}, straggle_time, delays=("d1", "d2", "d3", "d4"))
    write_figures(big, ["a", "b"], tmp_path / "big")
    fig = figures["regime_map.png"]
    visible = [a for a in fig.axes if a.get_visible()]
    assert len(visible) == 4
    assert len({round(a.get_position().y0, 3) for a in visible}) == 2     # 3 + 1: wrapped
    assert fig.get_size_inches()[0] > 3 * small_size[0] and fig.get_size_inches()[1] > 2 * small_size[1]


def test_more_than_two_keys_one_panel_per_combination_of_the_rest(tmp_path, figures):
    rows = make_rows({"a": [1, 2], "b": [3, 4], "c": ["x", "y", "z"]}, straggle_time)
    write_figures(rows, ["a", "b", "c"], tmp_path)
    titles = [a.get_title() for a in figures["regime_map.png"].axes if a.get_visible()]
    assert titles == ["sim, d\nc = x", "sim, d\nc = y", "sim, d\nc = z"]


def test_too_many_panels_are_cut_and_the_title_says_so(tmp_path, figures, monkeypatch):
    monkeypatch.setattr(regime_plots, "MAX_PANELS", 2)
    rows = make_rows({"a": [1, 2], "b": [3, 4], "c": ["x", "y", "z"]}, straggle_time)
    write_figures(rows, ["a", "b", "c"], tmp_path)
    assert len([a for a in figures["regime_map.png"].axes if a.get_visible()]) == 2
    assert "first 2 of 3 panels" in figures["regime_map.png"]._suptitle.get_text()


def test_one_key_draws_lines_with_ci_bands_and_log_y_when_wide(tmp_path, figures):
    rows = make_rows({"delay.extra": [0, 2, 4, 8]}, straggle_time, delays=("narrow", "wide"))
    for r in rows:
        if r["delay"] == "wide" and r["scheme"] == "sync":
            r["time_to_target"] *= 50
    assert write_figures(rows, ["delay.extra"], tmp_path) == ["regime_map.png", "computation_speedup.png"]
    narrow, wide = [a for a in figures["regime_map.png"].axes if a.get_visible()]
    assert narrow.get_yscale() == "linear" and wide.get_yscale() == "log"
    assert [line.get_label() for line in narrow.get_lines()] == ["sync", "fastest_k", "coded"]
    assert list(narrow.get_lines()[0].get_xdata()) == [0, 2, 4, 8]
    assert len(narrow.collections) == 3      # one CI band per scheme
    assert narrow.get_xlabel() == "delay.extra" and "time to target" in narrow.get_ylabel()
    assert figures["regime_map.png"].legends      # outside the axes: on the figure


def test_computation_speedup_one_point_per_scheme_and_cell_a_panel_per_delay(tmp_path, figures):
    rows = make_rows({"delay.extra": [0, 8]}, straggle_time, delays=("d1", "d2"))
    write_figures(rows, ["delay.extra"], tmp_path)
    fig = figures["computation_speedup.png"]
    axes = [a for a in fig.axes if a.get_visible()]
    assert [a.get_title() for a in axes] == ["sim, d1", "sim, d2"]
    points = {c.get_label(): c.get_offsets().tolist() for c in axes[0].collections}
    assert points["coded"] == [pytest.approx([6.0, 10 / 12]), pytest.approx([6.0, 18 / 12])]   # 120 units / 20 it.
    assert points["sync"] == [[2.0, 1.0], [2.0, 1.0]]


def test_per_step_uses_iterations_else_total_over_mean_time():
    assert regime_plots.per_step({"computed_units": 30.0, "iterations": 10}) == 3.0
    assert regime_plots.per_step({"computed_units": 30.0, "total_time": 20.0, "mean_iteration_time": 4.0}) == 6.0
    assert regime_plots.per_step({"computed_units": None, "iterations": 10}) is None


def test_no_sync_anywhere_draws_nothing(tmp_path):
    rows = [r for r in make_rows({"x": [1, 2]}, straggle_time) if not r["baseline"]]
    assert write_figures(rows, ["x"], tmp_path) == []
    assert winners(rows, ["x"])[0]["winner"] == "fastest_k"


def test_no_swept_key_ranks_the_cells(tmp_path):
    rows = make_rows({}, straggle_time)
    (w,) = winners(rows, [])
    assert w["winner"] == "fastest_k"
    assert write_figures(rows, [], tmp_path) == ["regime_map.png", "computation_speedup.png"]


def test_scheme_colours_are_fixed_per_label_and_sync_grey():
    rows = make_rows({"x": [1]}, straggle_time)
    colours = regime_plots.scheme_colours(rows)
    assert colours["sync"] == "tab:gray" and colours["fastest_k"] != colours["coded"]
    assert regime_plots.scheme_colours(list(reversed(rows)))["sync"] == "tab:gray"


# --- bad input ------------------------------------------------------------------------------------------------
GOOD_ROW = {"cell": 0, "x": 1, "cluster": "sim", "delay": "d", "scheme": "sync"}


@pytest.mark.parametrize("rows, swept, metric, message", [
    ("rows", ["x"], "time_to_target", "rows must be a list of dicts"),
    ([1, 2], ["x"], "time_to_target", "sweep row 0 is a int; accepted: a dict per row"),
    ([{"cell": 0, "x": 1}], ["x"], "time_to_target", "sweep row 0 has no 'cluster', 'delay', 'scheme'"),
    ([GOOD_ROW, {"cell": 1}], ["x"], "time_to_target", "sweep row 1 has no 'cluster', 'delay', 'scheme', 'x'"),
    (None, ["y"], "time_to_target", "swept path 'y' is a column of no sweep row; columns: cell, x, cluster"),
    (None, "x", "time_to_target", "swept must be a list of the swept paths"),
    (None, ["x", "x"], "time_to_target", "names a path twice; accepted: each swept path once"),
    (None, ["delay"], "time_to_target", "delay is a column of every sweep row, not a swept path"),
    (None, ["x"], "speed", "metric 'speed' is not a sweep metric; accepted: time_to_target"),
    (None, ["x"], None, "is not a sweep metric"),
])
def test_bad_input_is_a_config_error_naming_what_is_accepted(rows, swept, metric, message, tmp_path):
    rows = make_rows({"x": [1]}, straggle_time) if rows is None else rows
    for call in (lambda: winners(rows, swept, metric), lambda: markdown(rows, swept, metric),
                 lambda: write_figures(rows, swept, tmp_path, metric)):
        with pytest.raises(ConfigError, match=message):
            call()


@pytest.mark.parametrize("key, value, message", [
    ("time_to_target", "fast", "time_to_target = 'fast' is not a number"),
    ("time_to_target_ci", [1], "time_to_target_ci = \\[1\\] is not a number"),
    ("computed_units", True, "computed_units = True is not a number"),
    ("baseline", "maybe", "baseline = 'maybe'; accepted: true or false"),
    ("cluster", ["sim"], "cluster = \\['sim'\\]; accepted: cell an integer"),
    ("scheme", "", "scheme = ''; accepted: cell an integer"),
    ("cell", 1.5, "cell = 1.5; accepted: cell an integer"),
])
def test_a_row_value_of_the_wrong_kind_is_a_config_error(key, value, message):
    rows = make_rows({"x": [1]}, straggle_time)
    rows[2][key] = value
    with pytest.raises(ConfigError, match="sweep row 2: " + message):
        winners(rows, ["x"])


def test_a_figures_folder_that_cannot_be_one_is_a_config_error(tmp_path):
    rows = make_rows({"x": [1]}, straggle_time)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        write_figures(rows, ["x"], tmp_path / "file")
    with pytest.raises(ConfigError, match="out must be the folder to write the figures into"):
        write_figures(rows, ["x"], None)


def test_the_module_constants_name_the_contract():
    assert regimes.METRICS[-3:] == ["computed_units", "wasted_units", "total_time"]
    assert "time_to_target" in regimes.METRICS and "speedup_target" in regimes.METRICS


def test_a_scheme_that_missed_the_target_stays_in_the_table_with_its_seeds():
    """A scheme without a time to target on every seed is not ranked, and the table says how many seeds reached it
    rather than dropping it in silence."""
    rows = make_rows({"x": [0]}, lambda values, label, delay: None if label == "coded" else (10.0, 0.1))
    for row in rows:
        row["reached"] = 1 if row["scheme"] == "coded" else 3
    assert winners(rows, ["x"])[0]["missed"] == ["coded (1/3)"]
    line = next(line for line in markdown(rows, ["x"]) if line.startswith("| 0 |"))
    assert line.endswith("| coded (1/3) |")
