"""Reading the machine: how many cores other processes leave free (``machine.FreeCores``)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from codespec import machine


def write_ticks(tmp_path, total_busy: tuple[int, int], mine: int) -> None:
    """A /proc/stat whose first line has ``total`` ticks, ``busy`` of them not idle, and a
    /proc/self/stat with ``mine`` ticks (utime + stime)."""
    total, busy = total_busy
    idle = total - busy
    (tmp_path / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    fields = ["S"] + ["0"] * 10 + [str(mine), "0"] + ["0"] * 30
    (tmp_path / "self").write_text("4242 (python (odd) name) " + " ".join(fields))


@pytest.fixture
def fake_proc(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "PROC_STAT", tmp_path / "stat")
    monkeypatch.setattr(machine, "PROC_SELF_STAT", tmp_path / "self")
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 2)
    return tmp_path


def test_a_core_other_processes_keep_busy_is_not_used(fake_proc):
    write_ticks(fake_proc, (1000, 400), mine=100)
    cores = machine.FreeCores(cores=2, window_s=0.0)
    # 200 ticks pass on 2 CPUs: 190 busy, 90 of them ours -> others kept 100 of 200 (1 core)
    write_ticks(fake_proc, (1200, 590), mine=190)
    assert cores.free() == 1
    # then 200 more, 110 busy, 100 of them ours -> others 10 of 200 (0.1 core)
    write_ticks(fake_proc, (1400, 700), mine=290)
    assert cores.free() == 2


def test_its_own_work_does_not_count_and_bad_files_keep_the_last_answer(fake_proc):
    write_ticks(fake_proc, (1000, 400), mine=100)
    cores = machine.FreeCores(cores=2, window_s=0.0)
    write_ticks(fake_proc, (1200, 600), mine=300)  # every busy tick was ours
    assert cores.free() == 2
    (fake_proc / "stat").write_text("garbage")
    assert cores.free() == 2
    (fake_proc / "stat").unlink()
    assert machine.cpu_ticks() is None and cores.free() == 2


def test_looks_closer_than_the_window_return_the_last_answer(fake_proc):
    write_ticks(fake_proc, (1000, 400), mine=0)
    cores = machine.FreeCores(cores=2, window_s=3600)
    write_ticks(fake_proc, (1200, 600), mine=0)  # fully busy since the start
    assert cores.free() == 1  # the first look measures, however soon it comes
    write_ticks(fake_proc, (1400, 600), mine=0)  # idle since, but not looked at yet
    assert cores.free() == 1


def test_a_look_at_once_measures_instead_of_guessing(fake_proc):
    """A request that comes right after the engine starts, on a busy machine, waits for
    enough clock ticks to see the busy core instead of assuming every core is free."""
    write_ticks(fake_proc, (1000, 400), mine=0)
    cores = machine.FreeCores(cores=2, window_s=3600, first_look_s=0.2)
    write_ticks(fake_proc, (1200, 500), mine=0)  # one core busy
    started = time.monotonic()
    assert cores.free() == 1
    assert time.monotonic() - started >= 0.15


@pytest.mark.skipif(
    machine.usable_cores() < 2 or machine.cpu_ticks() is None, reason="needs 2 cores and /proc"
)
def test_a_real_busy_process_takes_a_core():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # the interpreter started and spinning
        # the first look, at once: it samples the busy process rather than guess
        assert machine.FreeCores().free() <= machine.usable_cores() - 1
        cores = machine.FreeCores(window_s=0.0)
        cores.free()
        time.sleep(1.0)
        assert cores.free() <= cores.cores - 1
    finally:
        busy.kill()
        busy.wait()
