"""Long work shows its rate and ETA: the progress bar's text, and its one-line summary off a terminal."""

import io
import sys

from trtkit import log


def test_rates_read_as_people_read_them():
    assert log.format_rate(120, 10.0, "img") == "12.0 img/s"
    # slower than one a second: seconds per unit, never "0 img/s"
    assert log.format_rate(16, 230.5, "img") == "14.4 s/img"
    assert log.format_rate(0, 3.0, "img") == "- img/s"
    assert [log.format_duration(s) for s in (4.4, 65, 3725)] == ["4s", "1m05s", "1h02m"]
    assert log.eta(25, 100, 10.0) == 30.0 and log.eta(0, 100, 10.0) is None and log.eta(5, None, 1.0) is None


def test_the_bar_draws_count_rate_and_eta(monkeypatch):
    monkeypatch.setenv("TRTKIT_PROGRESS", "1")
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    clock = [1000.0]
    monkeypatch.setattr(log.time, "time", lambda: clock[0])
    with log.Progress("verifying", total=8, unit="img") as bar:
        clock[0] += 4.0
        bar.update(2)
        assert bar.status() == "2/8 img, 2.0 s/img, 4s, ETA 12s"
        clock[0] += 12.0
        bar.update(6)
    drawn = err.getvalue()
    assert "verifying [" in drawn and "ETA 12s" in drawn and drawn.endswith("\n")
    assert "8/8 img, 2.0 s/img, 16s" in drawn


def test_off_a_terminal_the_end_line_has_the_rate(monkeypatch, capsys):
    monkeypatch.delenv("TRTKIT_PROGRESS", raising=False)
    monkeypatch.setattr(log, "_interactive", lambda: False)
    with log.Progress("calibration statistics", total=4, unit="img") as bar:
        bar.update(4)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "calibration statistics ..." in text
    assert "calibration statistics done in" in text and "img/s" in text


def test_off_a_terminal_a_long_step_logs_its_status_now_and_then(monkeypatch, capsys):
    """A blind test found the 8-minute layer-sensitivity phase silent in a log: off a terminal a step says
    where it is every ``LOG_EVERY`` seconds."""
    clock = [1000.0]
    monkeypatch.setattr(log, "_interactive", lambda: False)
    monkeypatch.setattr(log.time, "time", lambda: clock[0])
    with log.Progress("layer sensitivity", total=10, unit="layer") as bar:
        for _ in range(10):
            clock[0] += 10.0
            bar.update(1)
    text = capsys.readouterr().err
    status = [line for line in text.splitlines() if line.startswith("layer sensitivity: ")]
    assert len(status) == 3 and "3/10 layer" in status[0] and "ETA" in status[0], text


def test_a_bar_not_shown_counts_and_says_nothing_on_a_terminal_or_off_it(monkeypatch, capsys):
    for interactive in ("1", "0"):
        monkeypatch.setenv("TRTKIT_PROGRESS", interactive)
        with log.Progress("learning", total=3, unit="layer", shown=False) as bar:
            for _ in range(3):
                bar.update(postfix="error 0.4x")
        captured = capsys.readouterr()
        assert bar.count == 3 and captured.out == "" and captured.err == ""
