"""Configuration: defaults, example files, environment overrides, and refused inputs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from safemon.config import DEFAULT_METRICS_PORT, Config, VariantConfig, default_config, load_config
from safemon.errors import ConfigError, SafemonError
from safemon.kernels.catalog import TILES, t_level_tile
from safemon.states import Policy

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
XDG = {"XDG_RUNTIME_DIR": "/run/user/1000"}


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def problems(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    """The bullet lines of a ConfigError message."""
    return [ln.strip()[2:] for ln in str(exc.value).splitlines() if ln.startswith("  - ")]


# ---------------------------------------------------------------- the embedded default


def test_default_is_2oo3_with_three_process_channels() -> None:
    c = load_config(env=XDG)
    assert c.policy is Policy.TWO_OO_THREE
    assert c.degraded_policy is Policy.TWO_OO_TWO
    assert c.backend == "auto"
    assert c.channel_names == ("ch0", "ch1", "ch2")
    for ch in c.channels or ():
        assert ch.placement == "process"
        assert ch.gpu is None
        v = ch.variant
        assert (v.checksum, v.level, v.mode, v.tile) == ("ones", "T", "fma", "auto")
    assert (c.metrics.host, c.metrics.port) == ("127.0.0.1", DEFAULT_METRICS_PORT)
    assert c.timing.dti_s == 1.0
    assert c.weights.ecc is True


def test_default_endpoints_are_ipc_inside_the_xdg_runtime_dir() -> None:
    c = load_config(env=XDG)
    assert c.endpoints.runtime_dir == Path("/run/user/1000/safemon-safemon")
    assert c.endpoints.ingress == "ipc:///run/user/1000/safemon-safemon/ingress.sock"
    assert c.endpoints.events == "ipc:///run/user/1000/safemon-safemon/events.sock"
    assert c.channel_address("ch1") == "ipc:///run/user/1000/safemon-safemon/channel-ch1.sock"


def test_runtime_dir_falls_back_to_tmp_with_uid_and_name() -> None:
    c = load_config(env={"SAFEMON_NAME": "plant-a"})
    assert c.endpoints.runtime_dir == Path(f"/tmp/safemon-{os.getuid()}-plant-a")
    assert c.endpoints.control == f"ipc:///tmp/safemon-{os.getuid()}-plant-a/control.sock"


def test_default_config_ignores_safemon_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFEMON_POLICY", "1oo1D")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/42")
    assert default_config().policy is Policy.TWO_OO_THREE
    assert default_config() == load_config(env={"XDG_RUNTIME_DIR": "/run/user/42"})
    assert load_config().policy is Policy.ONE_OO_ONE_D  # env=None reads os.environ


def test_empty_file_means_all_defaults(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "# nothing\n"), env=XDG) == load_config(env=XDG)


# ---------------------------------------------------------------- example files


@pytest.mark.parametrize(
    ("file", "policy", "channels", "degraded"),
    [
        ("hft0.yaml", Policy.ONE_OO_ONE_D, 1, None),
        ("hft1.yaml", Policy.ONE_OO_TWO_D, 2, Policy.ONE_OO_ONE_D),
        ("hft2.yaml", Policy.ONE_OO_THREE_D, 3, Policy.ONE_OO_TWO_D),
        ("2oo3.yaml", Policy.TWO_OO_THREE, 3, Policy.TWO_OO_TWO),
    ],
)
def test_example_configs_validate(
    file: str, policy: Policy, channels: int, degraded: Policy | None
) -> None:
    c = load_config(CONFIGS / file, env=XDG)
    assert c.policy is policy
    assert len(c.channels or ()) == channels == policy.channels
    assert c.degraded_policy == degraded


def test_hft1_example_uses_diverse_tiles_on_two_gpus() -> None:
    c = load_config(CONFIGS / "hft1.yaml", env=XDG)
    assert c.channels is not None
    assert {ch.variant.tile for ch in c.channels} == {"small", "large"}
    assert [ch.gpu for ch in c.channels] == [0, 1]


def test_hft2_example_puts_each_channel_on_its_own_gpu() -> None:
    """HFT 2 needs three independent pieces of hardware (safemon.hft): three GPUs, CuPy."""
    c = load_config(CONFIGS / "hft2.yaml", env=XDG)
    assert c.channels is not None and c.backend == "cupy"
    assert sorted(ch.gpu for ch in c.channels if ch.gpu is not None) == [0, 1, 2]


def test_2oo3_example_spells_out_the_embedded_default() -> None:
    """Only the name differs, so the commented file documents the real defaults."""
    assert load_config(CONFIGS / "2oo3.yaml", env=XDG) == load_config(
        env={**XDG, "SAFEMON_NAME": "2oo3-demo"}
    )


def test_1oo3d_degrades_only_to_1oo2d_and_needs_a_checksum() -> None:
    """1oo3D → 1oo2D → 1oo1D, and 1oo1D relies on the signatures: no unprotected kernel."""
    c = load_config(env={**XDG, "SAFEMON_POLICY": "1oo3D"})
    assert c.policy_chain() == (Policy.ONE_OO_THREE_D, Policy.ONE_OO_TWO_D, Policy.ONE_OO_ONE_D)
    with pytest.raises(ConfigError, match="degraded_policy"):
        load_config(env={**XDG, "SAFEMON_POLICY": "1oo3D", "SAFEMON_DEGRADED_POLICY": "2oo2"})
    with pytest.raises(ConfigError, match=r"channels\.1\.variant\.checksum"):
        load_config(env={**XDG, "SAFEMON_POLICY": "1oo3D",
                         "SAFEMON_CHANNELS": "[{name: a}, {name: b, variant: {checksum: null, "
                                             "level: null}}, {name: c}]"})


@pytest.mark.parametrize("source", [None, "hft0.yaml", "hft1.yaml", "hft2.yaml", "2oo3.yaml"])
def test_model_dump_round_trips(source: str | None, tmp_path: Path) -> None:
    c = load_config(None if source is None else CONFIGS / source, env=XDG)
    assert Config.model_validate(c.model_dump()) == c
    # Through YAML too, as `safemon config --dump > file` would do it.
    dumped = write(tmp_path, yaml.safe_dump(c.model_dump(mode="json")))
    assert load_config(dumped, env={}) == c


# ---------------------------------------------------------------- environment overrides


def test_env_overrides_a_nested_field_and_a_top_level_field() -> None:
    c = load_config(env={**XDG, "SAFEMON_METRICS__PORT": "9500", "SAFEMON_POLICY": "2oo2"})
    assert c.metrics.port == 9500
    assert c.policy is Policy.TWO_OO_TWO
    assert c.channel_names == ("ch0", "ch1")  # default channels follow the policy
    assert c.degraded_policy is None


def test_env_overrides_win_over_the_file_and_index_into_lists() -> None:
    env = {
        **XDG,
        "SAFEMON_CHANNELS__1__GPU": "3",
        "SAFEMON_TIMING__DTI_S": "0.5",
        "SAFEMON_PATTERNS__DIMS": "[16x16x16, 32x32x8]",
        "SAFEMON_ACTIONS__HOOK": "null",
    }
    c = load_config(CONFIGS / "hft1.yaml", env=env)
    assert c.channels is not None
    assert [ch.gpu for ch in c.channels] == [0, 3]
    assert c.timing.dti_s == 0.5
    assert c.patterns.shapes() == [(16, 16, 16), (32, 32, 8)]
    assert c.actions.hook is None


def test_env_list_index_out_of_range_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"channels\.7: .*out of range \(the list has 2 items\)"):
        load_config(CONFIGS / "hft1.yaml", env={"SAFEMON_CHANNELS__7__GPU": "1"})


def test_env_reserved_variable_is_not_an_override() -> None:
    assert load_config(env={**XDG, "SAFEMON_CONFIG": "/etc/safemon.yaml"}) == load_config(env=XDG)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SAFEMON_POLCY": "2oo2"}, "SAFEMON_POLCY"),
        ({"SAFEMON_METRICS__PROT": "1"}, "metrics.prot"),
        ({"SAFEMON_METRICS__PORT": "abc"}, "metrics.port"),
        ({"SAFEMON_METRICS__PORT": "'9500'"}, "metrics.port"),  # a string is not converted
        ({"SAFEMON_METRICS____PORT": "1"}, "SAFEMON_METRICS____PORT"),
        ({"SAFEMON_CHANNELS__0__GPU": "1"}, "channels: SAFEMON_* overrides index"),
    ],
)
def test_bad_env_override_is_named(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(env=env)
    assert named in str(exc.value)


# ---------------------------------------------------------------- refused files

BAD_FILES: list[tuple[str, list[str]]] = [
    ("colour: red\n", ["colour"]),
    ("metrics: {prot: 1}\n", ["metrics.prot"]),
    ("channels: [{name: a, colour: red}, {name: b}, {name: c}]\n", ["channels.0.colour"]),
    (
        "channels: [{name: a, variant: {checksum: ones, lvl: I}}, {name: b}, {name: c}]\n",
        ["channels.0.variant.lvl"],
    ),
    (
        # Several independent field errors in one file: every one is named.
        "metrics: {port: 70000}\ntiming: {dti_jitter: 0.9}\nlogging: {level: loud}\n"
        "channels: [{name: a, placement: thread}, {name: b}, {name: c}]\n",
        ["metrics.port", "timing.dti_jitter", "logging.level", "channels.0.placement"],
    ),
    ("policy: 3oo4\n", ["policy"]),
    ("backend: torch\n", ["backend"]),
    ("name: Plant_A\n", ["name"]),
    ("policy: 2oo2\nchannels: [{name: a}, {name: b}, {name: c}]\n", ["channels"]),
    ("channels: [{name: a}, {name: b}, {name: a}]\n", ["channels.2.name"]),
    ("channels: [{name: Ch_0}, {name: b}, {name: c}]\n", ["channels.0.name"]),
    ("channels: [{name: a, gpu: -1}, {name: b}, {name: c}]\n", ["channels.0.gpu"]),
    ("backend: numpy\nchannels: [{name: a}, {name: b, gpu: 0}, {name: c}]\n", ["channels.1.gpu"]),
    (
        "channels: [{name: a, variant: {checksum: md5}}, {name: b}, {name: c}]\n",
        ["channels.0.variant.checksum"],
    ),
    (
        "channels: [{name: a}, {name: b, variant: {tile: huge}}, {name: c}]\n",
        ["channels.1.variant.tile"],
    ),
    (
        "channels: [{name: a}, {name: b}, {name: c, variant: {checksum: ones_fletcher, level: E}}]\n",
        ["channels.2.variant.level"],
    ),
    (
        "channels: [{name: a, variant: {mode: fast}}, {name: b}, {name: c}]\n",
        ["channels.0.variant.mode"],
    ),
    (
        "policy: 1oo1D\nchannels: [{name: a, variant: {checksum: null, level: null}}]\n",
        ["channels.0.variant.checksum"],
    ),
    (
        "channels: [{name: a, variant: {checksum: null}}, {name: b}, {name: c}]\n",
        ["channels.0.variant.level"],
    ),
    ("degraded_policy: 1oo1D\n", ["degraded_policy"]),
    (
        "policy: 2oo2\nchannels: [{name: a}, {name: b}]\ndegraded_policy: 1oo1D\n",
        ["degraded_policy"],
    ),
    ("weights: {ecc: 1}\n", ["weights.ecc"]),
    ("weights: {word_bits: 16}\n", ["weights.word_bits"]),
    ("weights: {ecc: false}\n", ["timing.scrub_interval_s"]),
    ("metrics: {port: '9464'}\n", ["metrics.port"]),
    ("metrics: {host: 'not a host!'}\n", ["metrics.host"]),
    ("metrics: {tls_cert: /etc/c.pem}\n", ["metrics.tls_key"]),
    (
        "timing: {dti_s: 1.0, selftest_deadline_s: 1.5, ftti_s: 5.0}\n",
        ["timing.selftest_deadline_s"],
    ),
    ("timing: {dti_s: 1.0, selftest_deadline_s: 0.2, ftti_s: 1.1}\n", ["timing.ftti_s"]),
    (
        "timing: {heartbeat_interval_s: 0.5, heartbeat_timeout_s: 0.5}\n",
        ["timing.heartbeat_timeout_s"],
    ),
    ("timing: {heartbeat_timeout_s: 3.0}\n", ["timing.heartbeat_timeout_s"]),
    ("timing: {request_deadline_s: .inf}\n", ["timing.request_deadline_s"]),
    ("timing: {request_deadline_s: 0}\n", ["timing.request_deadline_s"]),
    ("timing: {dti_s: '1.0'}\n", ["timing.dti_s"]),
    ("restart: {backoff_initial_s: 5.0, backoff_max_s: 1.0}\n", ["restart.backoff_max_s"]),
    ("restart: {max_restarts: 0}\n", ["restart.max_restarts"]),
    # The scheduler's and the controller's rules, reported under this file's names.
    ("timing: {dti_s: 0.0}\n", ["timing.dti_s"]),
    ("timing: {selftest_deadline_s: -0.1}\n", ["timing.selftest_deadline_s"]),
    ("timing: {scrub_interval_s: 0.0}\n", ["timing.scrub_interval_s"]),
    ("restart: {window_s: 0.0}\n", ["restart.window_s"]),
    ("restart: {backoff_factor: 0.5}\n", ["restart.backoff_factor"]),
    ("restart: {backoff_initial_s: -1.0}\n", ["restart.backoff_initial_s"]),
    ('actions: {hook: "notify \'unclosed"}\n', ["actions.hook"]),
    ("actions: {hook: '  '}\n", ["actions.hook"]),
    ("endpoints: {runtime_dir: relative/dir}\n", ["endpoints.runtime_dir"]),
    ("endpoints: {ingress: 'http://x:1'}\n", ["endpoints.ingress"]),
    ("endpoints: {control: 'ipc://{runtime_dir}/{nope}.sock'}\n", ["endpoints.control"]),
    ("endpoints: {events: 'ipc://{runtime_dir}/ingress.sock'}\n", ["endpoints.events"]),
    # 91-byte runtime dir: ingress.sock still fits in 107 bytes, channel-ch0.sock does not.
    ("endpoints: {runtime_dir: /" + "d" * 90 + "}\n", ["endpoints.channel_base"]),
    (
        "endpoints: {runtime_dir: /" + "d" * 100 + "}\n",
        [f"endpoints.{e}" for e in ("ingress", "control", "events", "channel_base")],
    ),
    ("endpoints: {ingress: 'tcp://0.0.0.0'}\n", ["endpoints.ingress", "security.curve"]),
    ("endpoints: {ingress: 'tcp://0.0.0.0:5555'}\n", ["security.curve"]),
    ("security: {curve: true}\n", ["security.keys_dir"]),
    ("patterns: {dims: ['16x16', '0x4x4', '8192x8x8']}\n", ["patterns.dims"]),
    ("patterns: {dims: []}\n", ["patterns.dims"]),
]


@pytest.mark.parametrize(
    ("text", "fields"), BAD_FILES, ids=[f[1][0] + f"-{i}" for i, f in enumerate(BAD_FILES)]
)
def test_bad_file_names_each_bad_field(text: str, fields: list[str], tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), env=XDG)
    lines = problems(exc)
    for f in fields:
        assert any(line.startswith(f"{f}:") for line in lines), (f, str(exc.value))
    assert len(lines) == len(fields), str(exc.value)
    assert "c.yaml" in str(exc.value)  # the message says which file


def test_unknown_key_message_says_unknown(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"metrics\.prot: unknown key"):
        load_config(write(tmp_path, "metrics: {prot: 1}\n"), env=XDG)


def test_field_error_message_shows_the_bad_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"metrics\.port: .*65535.*\(got 70000\)"):
        load_config(write(tmp_path, "metrics: {port: 70000}\n"), env=XDG)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("- a\n- b\n", "must be a mapping"),
        ("a: [1,\n", "not valid YAML"),
        ("7\n", "must be a mapping"),
    ],
)
def test_non_mapping_or_broken_yaml_is_refused(text: str, match: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, text), env=XDG)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml", env=XDG)


def test_config_error_is_a_safemon_value_error() -> None:
    assert issubclass(ConfigError, SafemonError)
    assert issubclass(ConfigError, ValueError)


# ---------------------------------------------------------------- helpers on Config


def test_channel_addresses_by_placement_and_scheme(tmp_path: Path) -> None:
    text = (
        "endpoints: {channel_base: 'ipc:///run/sm/ch'}\n"
        "channels: [{name: a}, {name: b, placement: stream}, {name: c}]\n"
    )
    c = load_config(write(tmp_path, text), env=XDG)
    assert c.channel_address("a") == "ipc:///run/sm/ch-a.sock"
    assert c.channel_address("b") == "inproc://safemon-safemon-b"  # lives in the daemon
    assert c.channel_address("c") == "ipc:///run/sm/ch-c.sock"
    with pytest.raises(KeyError):
        c.channel_address("d")
    inproc = load_config(env={**XDG, "SAFEMON_ENDPOINTS__CHANNEL_BASE": "inproc://{name}-ch"})
    assert inproc.channel_address("ch0") == "inproc://safemon-ch-ch0"


def test_tcp_channel_base_is_refused_at_load_for_process_channels(tmp_path: Path) -> None:
    """A tcp:// channel link would let any network peer answer in a channel's place (and it
    never worked): refused at config time, even with CURVE on the client endpoints."""
    text = (
        "endpoints: {channel_base: 'tcp://10.0.0.5:7000'}\n"
        "security: {curve: true, keys_dir: /etc/safemon/keys}\n"
        "channels: [{name: a}, {name: b, placement: stream}, {name: c}]\n"
    )
    with pytest.raises(ConfigError, match=r"endpoints\.channel_base: tcp:// is not supported"):
        load_config(write(tmp_path, text), env=XDG)


def test_limits_and_testing_sections_default_to_production_values() -> None:
    """Fault injection is off unless a config turns it on; admission limits are set."""
    c = load_config(env=XDG)
    assert c.testing.fault_injection is False
    assert c.limits.max_in_flight >= 1 and c.limits.max_request_bytes > 0
    on = load_config(env={**XDG, "SAFEMON_TESTING__FAULT_INJECTION": "true"})
    assert on.testing.fault_injection is True


def test_a_per_client_quota_is_off_by_default_and_never_above_the_whole_budget() -> None:
    assert load_config(env=XDG).limits.max_client_weight_bytes is None
    quota = load_config(env={**XDG, "SAFEMON_LIMITS__MAX_CLIENT_WEIGHT_BYTES": str(2**28)})
    assert quota.limits.max_client_weight_bytes == 2**28
    for outside in (2**31, 2**30 // 256 - 1):  # over the budget; under one weight's least
        with pytest.raises(ConfigError, match="max_client_weight_bytes"):
            load_config(env={**XDG, "SAFEMON_LIMITS__MAX_CLIENT_WEIGHT_BYTES": str(outside)})


def test_the_model_byte_budget_defaults_to_256_mib_and_is_a_positive_int() -> None:
    assert load_config(env=XDG).limits.max_model_total_bytes == 256 * 2**20
    small = load_config(env={**XDG, "SAFEMON_LIMITS__MAX_MODEL_TOTAL_BYTES": "4096"})
    assert small.limits.max_model_total_bytes == 4096
    for bad in ("0", "-1", "1.5"):
        with pytest.raises(ConfigError, match="max_model_total_bytes"):
            load_config(env={**XDG, "SAFEMON_LIMITS__MAX_MODEL_TOTAL_BYTES": bad})


def test_policy_chain_follows_the_degradations() -> None:
    two_of_three = load_config(env={**XDG, "SAFEMON_DEGRADED_POLICY": "1oo2D"})
    assert two_of_three.policy_chain() == (
        Policy.TWO_OO_THREE,
        Policy.ONE_OO_TWO_D,
        Policy.ONE_OO_ONE_D,
    )
    assert load_config(env=XDG).policy_chain() == (Policy.TWO_OO_THREE, Policy.TWO_OO_TWO)
    assert load_config(CONFIGS / "hft0.yaml", env=XDG).policy_chain() == (Policy.ONE_OO_ONE_D,)


def test_variant_auto_tile_resolves_by_output_size() -> None:
    ch = (load_config(env=XDG).channels or [])[0]
    assert ch.variant.to_variant(80, 80, 80).tile == TILES["small"]
    # The default folds at level T, which runs `large` with 16-wide k-tiles (same K-slices).
    assert ch.variant.to_variant(4096, 4096, 4096).tile == t_level_tile(TILES["large"])
    assert ch.variant.to_variant(80, 80, 80).name == "ones/T/fma/small"


@pytest.mark.parametrize("shape", [(80, 80, 80), (1, 4096, 4096), (64, 4096, 4096),
                                   (256, 1024, 4096), (4096, 4096, 4096), (3, 16, 512)])
def test_a_channel_runs_the_tile_and_split_protected_matmul_picks(
        shape: tuple[int, int, int]) -> None:
    """Channels and direct calls resolve a shape to the same variant, split-K included."""
    from safemon.kernels.api import _variant_for

    m, n, k = shape
    for level in ("M", "T"):
        vc = VariantConfig(checksum="ones", level=level, mode="fma")
        direct = _variant_for(np.empty((m, k)), np.empty((k, n)), "ones", level, "fma", None, None)
        assert vc.to_variant(m, n, k) == direct
        assert vc.tile_for(m, n, k) == direct.tile


@pytest.mark.parametrize("shape", [(64, 4096, 4096), (256, 1024, 4096), (1024, 1024, 1024)])
def test_an_unprotected_channel_and_every_unprotected_call_pick_one_variant(
        shape: tuple[int, int, int]) -> None:
    """`protected_matmul(checksum=None)` keeps its default level "I", which an unprotected
    variant does not have: the tile is chosen by the variant's own level, as channels do."""
    from safemon.kernels.api import _variant_for

    m, n, k = shape
    vc = VariantConfig(checksum=None, level=None, mode="fma")
    a, b = np.empty((m, k)), np.empty((k, n))
    direct = _variant_for(a, b, None, "I", "fma", None, None)
    assert direct == _variant_for(a, b, None, None, "fma", None, None) == vc.to_variant(m, n, k)


def test_a_long_k_is_split_and_a_short_one_is_not() -> None:
    vc = VariantConfig()
    assert vc.to_variant(64, 4096, 4096).name == "ones/T/fma/wide64_k16/split8"
    assert vc.to_variant(1, 4096, 4096).name == "ones/T/fma/skinny/split32"
    # A fold at every MAC keeps `small` (catalog.auto_tile), with its own split.
    every_mac = VariantConfig(checksum="ones", level="I", mode="exact")
    assert every_mac.to_variant(64, 4096, 4096).name == "ones/I/exact/small/split4"
    assert vc.to_variant(64, 4096, 64).split == 1


def test_unprotected_channels_are_allowed_where_the_vote_compares_c(tmp_path: Path) -> None:
    """2oo3 compares C bit-for-bit, so an unprotected kernel is a legal (faster) choice."""
    text = "channels: [{name: a, variant: {checksum: null, level: null}}, {name: b}, {name: c}]\n"
    c = load_config(write(tmp_path, text), env=XDG)
    assert c.channels is not None
    assert c.channels[0].variant.to_variant(16, 16, 16).name == "unprotected/fma/small"


def test_to_variant_gives_one_variant_object_per_shape() -> None:
    """The GPU backend caches launch plans per Variant object: a channel asking twice for
    the same shape must get the same object, and a different shape or config another."""
    from safemon.config import VariantConfig

    cfg = VariantConfig(checksum="ones", level="M", mode="fma")
    v = cfg.to_variant(64, 4096, 4096)
    assert cfg.to_variant(64, 4096, 4096) is v
    assert VariantConfig(checksum="ones", level="M", mode="fma").to_variant(64, 4096, 4096) is v
    assert cfg.to_variant(64, 4096, 1024) is not v
    other = VariantConfig(checksum="ones", level="M", mode="fma", rmt="block")
    assert other.to_variant(64, 4096, 4096).rmt == "block" and v.rmt == "none"
    assert v.tile.name == "wide64" and v.split == 8  # auto_tile / auto_split, as before


def test_gpu_backend_prices_work_items_at_the_gpu_default_unless_the_config_says() -> None:
    """On a GPU the default 0.05 GFLOP/s priced a 64×4096×4096 item at 43 s, so a single
    straggling item made the next request a BusyError; the daemon swaps in the GPU default,
    and only where the config left the field unset."""
    from safemon.admission import check_request, item_cost_s, max_ahead_s
    from safemon.config import CPU_MIN_CHANNEL_GFLOPS, GPU_MIN_CHANNEL_GFLOPS, with_backend_limits

    cfg = load_config(None, env={})
    assert with_backend_limits(cfg, False) is cfg
    gpu = with_backend_limits(cfg, True)
    assert gpu.limits.min_channel_gflops == GPU_MIN_CHANNEL_GFLOPS
    assert cfg.limits.min_channel_gflops == CPU_MIN_CHANNEL_GFLOPS  # the original is not modified
    cost = item_cost_s(gpu, 64, 4096, 4096)
    assert cost < 0.05 and item_cost_s(cfg, 64, 4096, 4096) > 40
    # One such item queued on a channel no longer refuses the next one ...
    assert check_request(gpu, (64, 4096), 4096, in_flight=1, queued_s=cost) is None
    # ... while the CPU pricing still does, and a full queue still does on the GPU.
    assert check_request(cfg, (64, 4096), 4096, in_flight=1, queued_s=1.0) is not None
    assert check_request(gpu, (64, 4096), 4096, in_flight=1,
                         queued_s=max_ahead_s(gpu) - cost / 2) is not None
    own = load_config(None, env={}).model_copy(
        update={"limits": cfg.limits.model_copy(update={"min_channel_gflops": 3.0})})
    own = type(cfg).model_validate(own.model_dump())  # as if read from YAML
    assert own.limits.min_channel_gflops == 3.0
    assert with_backend_limits(own, True).limits.min_channel_gflops == 3.0


def test_diverse_tiles_cut_k_alike_so_their_c_agree() -> None:
    """Channels of different tiles are voted on C alone; C depends on how K is cut into
    slices. Each tile's own automatic split differs at many shapes (200×700×1000: small 6,
    large 7), so a named tile takes the automatic choice's slice bounds: the same C bit for
    bit, where the tiles' own splits gave different C."""
    import itertools

    from safemon.kernels.catalog import TILES, auto_split, make_variant, slice_bounds
    from safemon.kernels.reference import reference_matmul

    for m, n, k in itertools.product([1, 8, 64, 128, 200], [256, 700, 4096], [100, 1000, 4096]):
        got = set()
        # skinny's 16-wide k-tiles cannot reproduce every bound of the 8-wide ones
        # (variant_with_tile; docs/SIGNATURES.md): it is left out here.
        for tile in ("auto", "small", "large", "wide", "wide64"):
            v = VariantConfig(checksum="ones", level="M", mode="fma", tile=tile).to_variant(m, n, k)
            got.add(tuple(slice_bounds(k, v.tile.bk, v.slices(k))))
        assert len(got) == 1, (m, n, k, got)
    m, n, k = 200, 700, 1000
    assert auto_split(m, n, k, TILES["small"]) != auto_split(m, n, k, TILES["large"])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    small, large = (VariantConfig(checksum=None, level=None, mode="fma", tile=t).to_variant(m, n, k)
                    for t in ("small", "large"))
    c_small = reference_matmul(a, b, small)[0]
    assert reference_matmul(a, b, large)[0].tobytes() == c_small.tobytes()
    own = make_variant(None, None, "fma", "large", auto_split(m, n, k, TILES["large"]))
    assert reference_matmul(a, b, own)[0].tobytes() != c_small.tobytes()  # what it fixes
