"""ipukit.grading.judge: cases drawn in the judge, results read only from the judge's own
cell, verdicts given here (issue 26, point 1)."""

import json
from pathlib import Path

import nbformat
import numpy as np
import pytest

from ipukit.grading import feedback, judge, lesson01, plain
from ipukit.grading.feedback import Exercise


def sent(*payloads, error=None):
    """A judge's cell whose outputs carry ``payloads`` on the judge's channel."""
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("display_data", data={judge.CHANNEL: p})
                    for p in payloads]
    if error:
        cell.outputs.append(nbformat.v4.new_output("error", ename=error, evalue="stop",
                                                   traceback=[]))
    return cell


def superstep(sync, bytes_in, bytes_out, compute, result_in, result_out, bpc=4):
    return (sync + -(-int(np.maximum(bytes_in, bytes_out).max()) // bpc) + int(compute.max())
            + -(-int(np.maximum(result_in, result_out).max()) // bpc))


@pytest.fixture
def plan():
    return judge.plans("01", seed=7)[2]  # 01.3


def test_every_lesson_01_exercise_is_judged_with_the_names_of_its_answers():
    plans = judge.plans("01", seed=1)
    assert [(p.ex.id, p.ex.answers) for p in plans] == [
        ("01.1", ("build_scale",)), ("01.2", ("place_vertices",)),
        ("01.3", ("superstep_cycles",)), ("01.4", ("build_ring_difference",))]


def test_an_exercise_without_a_trial_cannot_be_judged(monkeypatch):
    ex = Exercise("01.9", "not judged", 1, check="check_x")
    monkeypatch.setitem(feedback.EXERCISES, "01.9", ex)
    with pytest.raises(ValueError, match="exercise 01.9 has no judged check"):
        judge.plans("01", seed=1)


def test_the_same_seed_draws_the_same_cases_another_seed_others():
    def drawn(seed):
        return [plain.encode(c) for p in judge.plans("01", seed) for c in p.cases]

    assert drawn(3) == drawn(3) and drawn(3) != drawn(4)


def test_only_the_public_part_of_the_cases_reaches_the_kernel(tmp_path, plan):
    cell = plan.cell(tmp_path)
    written = json.loads((tmp_path / "cases-01.3.json").read_text())
    assert len(written) == len(plan.cases) and all(not k.startswith("_") for c in written
                                                   for k in c)
    assert "_cycles" in plan.cases[0] and "bytes_in" not in cell.source  # not inlined
    assert str(tmp_path / "cases-01.3.json") in cell.source


def outputs_of(answer, plan):
    return feedback.run_trials(plan.ex, [feedback.public(c) for c in plan.cases], (answer,))


def test_the_verdict_is_given_on_what_the_cell_sent(plan):
    good = plan.result(sent({"outputs": outputs_of(superstep, plan)}))
    assert (good.status, good.points) == ("passed", 2)
    off = plan.result(sent({"outputs": outputs_of(lambda *a: superstep(*a) + 1, plan)}))
    assert off.status == "failed" and off.message.startswith("step '")
    assert "hint" not in off.message  # the judge has seen no earlier attempt


@pytest.mark.parametrize("cell, message", [
    (sent(), "the check's results did not come back"),
    (sent({"outputs": []}, {"outputs": []}), "the check's results came back more than once"),
    (sent(5), "the check's results cannot be read"),
    (sent({"outputs": [], "extra": 1}), "the check's results cannot be read"),
    (sent({"status": "passed"}), "the check's results cannot be read"),
    (sent({"missing": ["superstep_cycles"]}),
     "the notebook defines no superstep_cycles (the check calls it by this name)"),
    (sent({"outputs": "passed"}), "the trial gave no readable results"),
    (sent({"outputs": [{"ok": 5}] * 3}), "the trial gave 3 results for"),
    (sent({"outputs": [{"ok": {"__ndarray__": "AAAA"}}]}),
     "case 1: the trial's result cannot be read: an encoded array that cannot be read"),
    (sent({"outputs": [{"ok": 0}, {"ok": 0}]}, error="CellTimeoutError"),
     "the check stopped: CellTimeoutError: stop"),
])
def test_anything_but_one_readable_message_of_the_right_kind_fails(plan, cell, message):
    r = plan.result(cell)
    assert (r.status, r.points) == ("failed", 0) and r.message.startswith(message)


def test_a_verdict_that_cannot_read_a_forged_output_fails_it(plan):
    forged = [{"ok": plain.encode([1, 2])}] * len(plan.cases)
    r = plan.result(sent({"outputs": forged}))
    assert r.status == "failed" and "expected" in r.message and r.message.endswith("[1, 2]")
    placement = judge.plans("01", seed=7)[1]
    r = placement.result(sent({"outputs": [{"ok": {"a": 1}}] * len(placement.cases)}))
    assert r.status == "failed" and "return a list of 48 tile numbers" in r.message


def test_a_cell_that_did_not_run_scores_nothing(plan):
    r = plan.result(sent({"outputs": outputs_of(superstep, plan)}), ran=False)
    assert r.message.startswith("the check did not run") and r.points == 0


def test_a_not_solved_trial_is_not_solved(plan):
    def stub(*args):
        raise NotImplementedError("write it")

    r = plan.result(sent({"outputs": outputs_of(stub, plan)}))
    assert (r.status, r.message) == ("not solved", "write it")


def test_the_judged_checks_of_lesson_01_are_registered_once():
    assert lesson01.check_superstep_cycles.exercise is feedback.EXERCISES["01.3"]


def test_every_lesson_with_checks_is_loaded_before_a_kernel_starts():
    """judge.load_all imports every lesson's checks (lesson 13's were left out)."""
    found = sorted(p.stem[-2:] for p in Path(judge.__file__).parent.glob("lesson[0-9][0-9].py"))
    assert list(judge.LESSONS) == found and "13" in found
