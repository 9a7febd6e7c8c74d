"""`safemon bench vote --runtime` without a GPU: the channel-variant labels it accepts and
the Markdown it renders from evidence (figures here are made up for the layout only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from safemon.bench.runtime import channel_variant, mps_state, runtime_markdown


def test_channel_variant_labels_map_to_config_fields() -> None:
    """"ones/M/fma" and "unprotected/fma" give VariantConfig fields; "" the default;
    anything else is a ValueError naming the form."""
    assert channel_variant("ones/M/fma") == {"checksum": "ones", "level": "M", "mode": "fma"}
    assert channel_variant("unprotected/fma") == {"checksum": None, "level": None, "mode": "fma"}
    assert channel_variant("") == {}
    with pytest.raises(ValueError, match="CHECKSUM/LEVEL/MODE"):
        channel_variant("ones")
    with pytest.raises(ValueError):
        channel_variant("ones/Q/fma")


def _stats(p50: float) -> dict[str, float]:
    return {"p50_us": p50, "p99_us": 2 * p50, "n": 10}


def test_the_report_has_a_row_per_path_and_request_with_its_baseline_ratio() -> None:
    ev = {"device": "GPU", "when": "T", "transport": "ipc", "paths": ["cuda-ipc", "host"],
          "variant": "ones/M/fma", "model": "mlp",
          "baselines": {"direct": {"80x80x80": _stats(50.0)},
                        "model_three_back_to_back": _stats(300.0),
                        "model_cupy_matmul": _stats(100.0)},
          "placements": [{"placement": "process", "faults": {"80x80x80": {
              "injected": 5, "released": 5, "errors": 0, "wrong_released": 0}}, "runs": [
              {"path": p, "request": r, "round_trip": _stats(500.0), "kernel": _stats(100.0),
               "overhead": _stats(400.0)} for p in ("cuda-ipc", "host")
              for r in ("80x80x80", "model")]}]}
    text = runtime_markdown(ev)
    assert "| process | cuda-ipc | 80x80x80 | 500 / 1,000 | 100 | 400 / 800 | 10.00× | direct kernel 50 |" in text
    assert "| process | host | model | 500 / 1,000 | 100 | — | 5.00× | cupy.matmul forward 100 |" in text
    assert "ECC weights" not in text  # evidence without that baseline renders as before
    ev["baselines"]["model_three_back_to_back_ecc"] = _stats(400.0)
    assert ("| process | host | model | 500 / 1,000 | 100 | — | 1.25× | 3 forwards back to back "
            "on ECC weights, as the channels run them 400 |") in runtime_markdown(ev)
    assert "channel variant ones/M/fma" in text and "| process | 80x80x80 | 5 | 5 | 0 | 0 |" in text
    assert "captured passes" not in text and "captured-pass" not in text
    ev["baselines"]["model_three_graphs"] = _stats(250.0)
    ev["baselines"]["model_three_graphs_concurrent"] = _stats(200.0)
    text2 = runtime_markdown(ev)
    assert ("| process | cuda-ipc | model | 500 / 1,000 | 100 | — | 2.00× | 3 channels' captured "
            "passes back to back (their GPU work) 250 |") in text2
    assert ("| process | cuda-ipc | model | 500 / 1,000 | 100 | — | 2.50× | 3 channels' captured "
            "passes side by side, one stream each 200 |") in text2
    assert "The captured-pass baselines are the three channels' GPU work alone" in text2
    assert "| channel busy p50 |" in text


def test_a_spinning_placement_says_so_in_its_rows() -> None:
    """Evidence with `spin_s` (TimingConfig.spin_s as the daemon loaded it) names it in the
    placement column; older evidence without the key renders as before."""
    ev = {"device": "GPU", "when": "T", "transport": "ipc", "paths": ["cuda-ipc"],
          "variant": "", "model": "mlp",
          "baselines": {"direct": {"80x80x80": _stats(50.0)},
                        "model_three_back_to_back": _stats(300.0),
                        "model_cupy_matmul": _stats(100.0)},
          "placements": [{"placement": "process", "spin_s": 0.005, "faults": {}, "runs": [
              {"path": "cuda-ipc", "request": "80x80x80", "round_trip": _stats(500.0),
               "kernel": _stats(100.0), "overhead": _stats(400.0)}]}]}
    assert "| process (spin 5 ms) | cuda-ipc | 80x80x80 | 500 / 1,000 |" in runtime_markdown(ev)
    ev["placements"][0]["spin_s"] = 0.0
    assert "| process | cuda-ipc | 80x80x80 |" in runtime_markdown(ev)
    # Stream channels: the daemon does not spin, the client does; the row says which.
    ev["placements"][0].update(placement="stream", client_spin_s=0.005)
    assert "| stream (client spin 5 ms) | cuda-ipc | 80x80x80 |" in runtime_markdown(ev)


def test_interleaved_timing_alternates_the_calls_and_drops_the_warm_up() -> None:
    """Each round calls every function once, in order, and syncs after each; warm-up rounds
    are run but not returned."""
    from safemon.bench.runtime import _timed_interleaved

    calls: list[str] = []
    out = _timed_interleaved([lambda: calls.append("a"), lambda: calls.append("b")], n=3,
                             warmup=2, sync=lambda: calls.append("sync"))
    assert calls == ["a", "sync", "b", "sync"] * 5
    assert [len(x) for x in out] == [3, 3] and all(t >= 0 for x in out for t in x)


def test_mps_is_recorded_from_the_control_pipe(tmp_path: Path) -> None:
    """The report says whether the run had a CUDA MPS control daemon to join: its control
    pipe in CUDA_MPS_PIPE_DIRECTORY (the scripts that start MPS export it)."""
    assert mps_state({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}) == "off"
    (tmp_path / "control").touch()
    assert mps_state({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}) == "on"
