"""The retest classifier alone (`safemon.fault_classes`): a fault that does not show again
in its retests is transient, one that does is permanent; bookkeeping per channel."""

from __future__ import annotations

import pytest

from safemon.fault_classes import Classifier, FaultClass


def test_all_retests_passing_make_the_fault_transient() -> None:
    c: Classifier[str] = Classifier(3)
    assert c.begin("a", "f1")
    assert c.result("a", True) is None and c.result("a", True) is None
    assert c.result("a", True) == ("f1", FaultClass.TRANSIENT)
    assert not c.active("a")


def test_any_failed_retest_makes_the_fault_permanent() -> None:
    c: Classifier[str] = Classifier(2)
    assert c.begin("a", "f1")
    assert c.result("a", False) is None
    assert c.result("a", True) == ("f1", FaultClass.PERMANENT)


def test_one_retest_per_channel_zero_retests_and_abandon() -> None:
    c: Classifier[str] = Classifier(1)
    assert c.begin("a", "f1") and not c.begin("a", "f2") and c.begin("b", "g")
    assert c.abandon("a") == "f1" and c.abandon("a") is None and c.active("b")
    assert not Classifier[str](0).begin("a", "f")
    with pytest.raises(ValueError):
        Classifier[str](-1)
