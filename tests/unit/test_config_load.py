"""DispatcherConfig.from_dict / from_env: generic over the config tree, typed errors."""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from kdispatch import DispatcherConfig, ExecutorConfig, RateLimitConfig, RegistryConfig
from kdispatch.actors.model.config_load import (
    OTHER_VARIABLES,
    env_variables,
    load_dataclass,
    load_env,
)
from kdispatch.actors.model.errors import InvalidConfigError
from kdispatch.testing.envtest.binaries import CACHE_ENV

pytestmark = pytest.mark.timeout(30)


def test_from_dict_sets_nested_fields_and_keeps_the_other_defaults() -> None:
    config = DispatcherConfig.from_dict(
        {
            "rate_limit": {"qps": 20, "burst": "40"},
            "executor": {"workers": 4},
            "registry": {"max_live": None},
            "reap_interval": "0.5",
        }
    )
    assert config == DispatcherConfig(
        rate_limit=RateLimitConfig(qps=20.0, burst=40),
        executor=ExecutorConfig(workers=4),
        reap_interval=0.5,
    )
    assert DispatcherConfig.from_dict({}) == DispatcherConfig()


def test_from_dict_takes_config_instances_too() -> None:
    limit = RateLimitConfig(qps=math.inf, burst=1)
    assert DispatcherConfig.from_dict({"rate_limit": limit}).rate_limit is limit


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"rate_limt": {}}, "unknown config key 'rate_limt'"),
        ({"rate_limit": {"qsp": 1}}, "unknown config key 'rate_limit.qsp'"),
        ({"rate_limit": 5}, "rate_limit must be a mapping"),
        ({"rate_limit": {"burst": 1.5}}, "rate_limit.burst must be an int"),
        ({"rate_limit": {"burst": True}}, "rate_limit.burst must be an int"),
        ({"rate_limit": {"qps": "fast"}}, "rate_limit.qps must be a number"),
        ({"rate_limit": {"qps": "nan"}}, "rate_limit.qps must not be NaN"),
        ({"rate_limit": {"qps": -1}}, r"rate_limit: qps must be > 0"),
        ({"rate_limit": {"qps": 10**400}}, "rate_limit.qps is too large"),
        ({"rate_limit": {"burst": 10**400}}, "rate_limit: burst is too large"),
        ({"registry": {"max_live": "lots"}}, "registry.max_live"),
        ({"metrics_prefix": 3}, "metrics_prefix must be a str"),
        ({"metrics_prefix": "a b"}, "metrics_prefix must match"),
        ({"retry": {"jitter": "inf"}}, "retry: jitter must be finite"),
        ({"retry": {"base_backoff": "inf", "max_backoff": "inf"}}, "base_backoff must be finite"),
        ({"runtime": {"gc_young_threshold": 2**31}}, "gc_young_threshold must be at most"),
        ("rate_limit=5", "config must be a mapping"),
    ],
)
def test_from_dict_bad_input_names_the_key(data: Any, match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        DispatcherConfig.from_dict(data)


def test_from_env_reads_documented_names() -> None:
    env = {
        "KDISPATCH_RATE_LIMIT_QPS": "inf",
        "KDISPATCH_RATE_LIMIT_BURST": "7",
        "KDISPATCH_RETRY_MAX_ATTEMPTS": "3",
        "KDISPATCH_REGISTRY_MAX_LIVE": "1000",
        "KDISPATCH_REAP_INTERVAL": "1.5",
        "KDISPATCH_METRICS_PREFIX": "my_controller",
        "PATH": "/usr/bin",  # other variables are ignored
    }
    config = DispatcherConfig.from_env(env)
    assert config.rate_limit == RateLimitConfig(qps=math.inf, burst=7)
    assert config.retry.max_attempts == 3
    assert config.registry == RegistryConfig(max_live=1000)
    assert config.reap_interval == 1.5
    assert config.metrics_prefix == "my_controller"
    assert DispatcherConfig.from_env({}) == DispatcherConfig()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        *[(t, True) for t in ("true", "True", "YES", "yes", "on", "ON", "1")],
        *[(t, False) for t in ("false", "FALSE", "no", "No", "off", "Off", "0")],
    ],
)
def test_from_env_reads_every_documented_bool_spelling(text: str, value: bool) -> None:
    config = DispatcherConfig.from_env(
        {"KDISPATCH_LOG_CALLS": text, "KDISPATCH_RUNTIME_GC_FREEZE": text}
    )
    assert config.log_calls is value and config.runtime.gc_freeze is value


@pytest.mark.parametrize("text", ["", "none", "None", "null", "NULL"])
def test_from_env_leaves_an_optional_field_unset(text: str) -> None:
    env = {
        "KDISPATCH_REGISTRY_MAX_LIVE": text,
        "KDISPATCH_RETRY_MAX_ATTEMPTS": text,
        "KDISPATCH_RATE_LIMIT_EVENTS_QPS": text,
        "KDISPATCH_RUNTIME_GC_YOUNG_THRESHOLD": text,  # leaves the thresholds alone
    }
    config = DispatcherConfig.from_env(env)
    assert config.registry.max_live is None and config.retry.max_attempts is None
    assert config.rate_limit.events_qps is None and config.runtime.gc_young_threshold is None


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"KDISPATCH_RETRY_BUDGET": "nan"}, "NaN"),
        ({"KDISPATCH_LOG_CALLS": "maybe"}, "log_calls must be a bool"),
        ({"KDISPATCH_EXECUTOR_WORKERS": "8.5"}, "executor.workers"),
        ({"KDISPATCH_RATE_LIMIT_BURST": "9" * 400}, "burst is too large"),
        ({"KDISPATCH_RATE_LIMIT_EVENTS_SHARED": "true", "KDISPATCH_RATE_LIMIT_EVENTS_QPS": "5"},
         "events_shared"),
    ],
)  # fmt: skip
def test_from_env_refuses_what_the_page_refuses(env: dict[str, str], match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        DispatcherConfig.from_env(env)


def test_from_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDISPATCH_EXECUTOR_WORKERS", "3")
    assert DispatcherConfig.from_env().executor.workers == 3


def test_every_field_of_the_tree_has_a_variable() -> None:
    """Generic: walking the dataclasses finds every leaf field, whatever fields exist now."""
    names = env_variables(DispatcherConfig)
    leaves: list[tuple[str, ...]] = []
    for f in dataclasses.fields(DispatcherConfig):
        value = getattr(DispatcherConfig(), f.name)
        if dataclasses.is_dataclass(value):
            leaves += [(f.name, g.name) for g in dataclasses.fields(value)]
        else:
            leaves.append((f.name,))
    assert sorted(names.values()) == sorted(leaves)
    assert names["KDISPATCH_RATE_LIMIT_QPS"] == ("rate_limit", "qps")


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"KDISPATCH_RATE_LIMT_QPS": "1"}, "unknown variable KDISPATCH_RATE_LIMT_QPS"),
        ({"KDISPATCH_RATE_LIMIT_QPS": "quick"}, r"KDISPATCH_\*.*rate_limit.qps"),
        ({"KDISPATCH_EXECUTOR_WORKERS": "0"}, "workers must be > 0"),
        ({"KDISPATCH_EXECUTOR_WORKERS": 3}, "must be a str"),
    ],
)
def test_from_env_bad_input_is_typed(env: Any, match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        DispatcherConfig.from_env(env)


def test_from_env_leaves_kdispatchs_other_variables_alone() -> None:
    """The envtest cache directory shares the prefix; it is no typo of a config field."""
    assert CACHE_ENV in OTHER_VARIABLES
    env = {CACHE_ENV: "/tmp/k8s", "KDISPATCH_RUNTIME_GC_YOUNG_THRESHOLD": str(2**31 - 1)}
    assert DispatcherConfig.from_env(env).runtime.gc_young_threshold == 2**31 - 1


def test_from_env_bad_arguments() -> None:
    with pytest.raises(InvalidConfigError, match="prefix"):
        DispatcherConfig.from_env({}, prefix="")
    with pytest.raises(InvalidConfigError, match="environ must be a mapping"):
        DispatcherConfig.from_env([("A", "1")])  # type: ignore[arg-type]


# ------------------------------------------------------------------ generic over new fields


class Mode(enum.Enum):
    FAST = "fast"
    SAFE = "safe"


@dataclass(frozen=True)
class Inner:
    budget: float = 60.0
    jitter: bool = True
    mode: Mode = Mode.SAFE
    lane: Literal["high", "low"] = "low"


@dataclass(frozen=True)
class Outer:
    inner: Inner = field(default_factory=Inner)
    name: str | None = None
    count: int | float = 1


def test_new_field_types_are_loaded_without_touching_the_loader() -> None:
    got = load_dataclass(
        Outer,
        {
            "inner": {"budget": "90", "jitter": "off", "mode": "fast", "lane": "high"},
            "name": "none",
            "count": "2.5",
        },
    )
    assert got == Outer(Inner(90.0, False, Mode.FAST, "high"), None, 2.5)
    env = {"APP_INNER_JITTER": "YES", "APP_NAME": "x", "APP_COUNT": "3"}
    assert load_env(Outer, env, prefix="APP_") == Outer(Inner(jitter=True), "x", 3)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"inner": {"jitter": "maybe"}}, "inner.jitter must be a bool"),
        ({"inner": {"mode": "turbo"}}, "inner.mode must be one of"),
        ({"inner": {"lane": "mid"}}, "inner.lane must be one of"),
        ({"count": "many"}, "count"),
        ({"name": 5}, "name"),
    ],
)
def test_new_field_types_bad_values(data: Any, match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        load_dataclass(Outer, data)


def test_not_a_dataclass_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match="not a dataclass"):
        load_dataclass(dict, {})
