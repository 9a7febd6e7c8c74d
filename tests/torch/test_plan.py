"""Which layers `protect` swaps and how it groups them (`plan`: no client needed)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from safemon.models import Activation  # noqa: E402
from safemon.torch.protect import plan  # noqa: E402
from safemon.torch.report import NOT_MODULES, Status  # noqa: E402


def members(model: nn.Module) -> list[list[tuple[str, str]]]:
    groups, _ = plan(model)
    return [[(name, act.value) for name, _, act in g.members] for g in groups]


def test_consecutive_linears_with_supported_activations_are_one_group() -> None:
    """Linear-ReLU-Dropout-Linear-tanhGELU-Linear in a Sequential is ONE request of 3 layers,
    each activation folded into the layer before it."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 16),
                          nn.GELU(approximate="tanh"), nn.Linear(16, 4))
    assert members(model) == [[("0", "relu"), ("3", "gelu"), ("5", "identity")]]
    groups, report = plan(model)
    assert groups[0].folded == [("1", "ReLU"), ("2", "Dropout"), ("4", "GELU")]
    assert report.requests == 1 and report.protected == ["0", "3", "5"]


def test_unsupported_op_between_linears_splits_the_group() -> None:
    """A LayerNorm between two Linears ends the group (reported as left to PyTorch); an
    exact (erf) GELU is folded into the Linear before it, as gelu_erf."""
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 8), nn.GELU(),
                          nn.Linear(8, 2))
    assert members(model) == [[("0", "identity")], [("2", "gelu_erf"), ("4", "identity")]]
    groups, report = plan(model)
    assert report.unprotected == ["1"]
    assert groups[1].folded == [("3", "GELU")]


def test_a_gelu_of_neither_form_is_left_to_pytorch() -> None:
    """nn.GELU(approximate=<neither "none" nor "tanh">), which PyTorch refuses when called,
    is no safemon activation: it ends the group."""
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(approximate="erf"), nn.Linear(4, 2))
    assert members(model) == [[("0", "identity")], [("2", "identity")]]


def test_second_activation_ends_the_group() -> None:
    """One activation per layer: Linear-ReLU-Tanh leaves Tanh to PyTorch."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Tanh(), nn.Linear(4, 2))
    assert members(model) == [[("0", "relu")], [("3", "identity")]]


def test_widths_that_do_not_chain_are_separate_groups() -> None:
    """Linear(4,6) then Linear(5,2) (a bug PyTorch reports at run time) are not chained."""
    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(5, 2))
    assert members(model) == [[("0", "identity")], [("1", "identity")]]


def test_conv_takes_its_activation_but_never_chains() -> None:
    """Conv2d-ReLU is one request; the next Conv2d is another (an unfold sits between)."""
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16, 10))
    assert members(model) == [[("0", "relu")], [("2", "relu")], [("6", "identity")]]
    _, report = plan(model)
    assert report.unprotected == ["4", "5"]


def test_attributes_of_custom_modules_are_swapped_one_by_one() -> None:
    """Linear layers held as attributes of a custom module are single groups; nested
    Sequentials are grouped; subclasses of Linear and grouped convs are left alone."""

    class Sub(nn.Linear):
        pass

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(8, 24)
            self.ffn = nn.Sequential(nn.Linear(8, 32), nn.GELU(approximate="tanh"),
                                     nn.Linear(32, 8))
            self.norm = nn.LayerNorm(8)
            self.odd = Sub(8, 8)
            self.dw = nn.Conv2d(4, 4, 3, groups=4)

    assert members(Net()) == [[("qkv", "identity")],
                              [("ffn.0", "gelu"), ("ffn.2", "identity")]]
    _, report = plan(Net())
    assert report.unprotected == ["norm", "odd", "dw"]
    notes = {e.name: e.note for e in report.entries if e.status is Status.UNPROTECTED}
    assert "subclass" in notes["odd"] and "groups=4" in notes["dw"]


def test_multihead_attention_is_left_alone_and_said_so() -> None:
    """nn.MultiheadAttention's out_proj is not swapped (MHA reads its weight directly)."""
    model = nn.Sequential(nn.Linear(8, 8), nn.MultiheadAttention(8, 2))
    groups, report = plan(model)
    assert [g.members[0][0] for g in groups] == ["0"]
    assert "1.out_proj" in report.unprotected
    assert Activation.IDENTITY is groups[0].members[0][2]


def test_printout_lists_protected_and_unprotected_and_what_is_never_seen() -> None:
    """The rendered report has a line per module and the note on functional products."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.LayerNorm(4), nn.Softmax(-1))
    _, report = plan(model)
    text = report.render()
    assert "1 layers protected in 1 request(s)" in text
    assert "NOT protected: normalisation" in text and "NOT protected: softmax" in text
    assert "folded" in text and NOT_MODULES in text


def test_report_of_an_unprotected_model_is_a_value_error() -> None:
    """report_of() on a model protect() never saw says so."""
    from safemon.torch import report_of

    with pytest.raises(ValueError, match="not protected"):
        report_of(nn.Linear(2, 2))


def test_an_activation_held_at_two_places_is_judged_at_each() -> None:
    """One nn.ReLU object at two places: where it follows a protected layer it is folded,
    where it stands alone it is left to PyTorch as an activation, not as a shared layer
    (only a Linear, Conv2d or container held at several places is left alone as shared)."""
    act = nn.ReLU()
    model = nn.Sequential(act, nn.Linear(8, 8), act)
    groups, report = plan(model)
    assert len(groups) == 1 and groups[0].folded == [("2", "ReLU")]
    note = {e.name: e.note for e in report.entries}
    assert report.unprotected == ["0"] and "several places" not in note["0"]
