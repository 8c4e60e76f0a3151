"""What the dashboards take from the rest of the repository.

The alert thresholds and the workload classes come from rules/classes.yaml and
the published knowledge base from rules/kdb/pairs.yaml, the files rules/gen
reads too: a number is written once, and a threshold line on a panel is the
alert's own. A change there changes the generated JSON, so the drift check
(scripts/dashboards.sh check) asks for a regeneration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Thresholds:
    """The alert limits the panels draw and the floors they quote (rules/classes.yaml: alerts, activity, efficiency)."""

    write_amplification_vs_best: float
    latency_overhead_vs_best: float
    mail_flush_latency_seconds: float
    contention_active_disks: float
    active_iops: float
    min_stage_requests_per_second: float
    guest_read_write_p99_seconds: float
    guest_flush_p99_seconds: float


@dataclass(frozen=True)
class PairVerdict:
    """One published verdict: a GUEST/HOST pair for one workload."""

    guest_fs: str
    host_fs: str
    verdict: str
    standout: bool


@dataclass(frozen=True)
class Workload:
    """One workload of the published knowledge base."""

    name: str
    character: str
    source: str
    pairs: tuple[PairVerdict, ...]


@dataclass(frozen=True)
class Inputs:
    """Everything the dashboards read from the repository."""

    thresholds: Thresholds
    classes: tuple[str, ...]  # the live classes in classes.yaml order, then mixed
    workloads: tuple[Workload, ...]
    sources: dict[str, str]


def _load(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        try:
            return yaml.safe_load(f)
        except yaml.YAMLError as err:
            raise ValueError(f"parse {path}: {err}") from err


def _value(doc: dict[str, Any], section: str, name: str) -> float:
    try:
        return float(doc[section][name]["value"])
    except (KeyError, TypeError) as err:
        raise ValueError(f"rules/classes.yaml: no {section}.{name}.value") from err


def _thresholds(doc: dict[str, Any]) -> Thresholds:
    return Thresholds(
        write_amplification_vs_best=_value(doc, "alerts", "write_amplification_vs_best"),
        latency_overhead_vs_best=_value(doc, "alerts", "latency_overhead_vs_best"),
        mail_flush_latency_seconds=_value(doc, "alerts", "mail_flush_latency_seconds"),
        contention_active_disks=_value(doc, "alerts", "contention_active_disks"),
        active_iops=_value(doc, "activity", "active_iops"),
        min_stage_requests_per_second=_value(doc, "efficiency", "min_stage_requests_per_second"),
        guest_read_write_p99_seconds=_value(doc, "alerts", "guest_read_write_p99_seconds"),
        guest_flush_p99_seconds=_value(doc, "alerts", "guest_flush_p99_seconds"),
    )


def _pair(entry: dict[str, Any]) -> PairVerdict:
    guest, host = str(entry["pair"]).split("/")
    return PairVerdict(guest, host, str(entry["verdict"]), bool(entry.get("standout", False)))


def _workload(entry: dict[str, Any]) -> Workload:
    return Workload(
        name=str(entry["name"]),
        character=" ".join(str(entry["character"]).split()),
        source=str(entry["source"]),
        pairs=tuple(_pair(p) for p in entry["pairs"]),
    )


def load(repo: Path) -> Inputs:
    """Reads rules/classes.yaml and rules/kdb/pairs.yaml under repo."""
    classes_doc = _load(repo / "rules" / "classes.yaml")
    pairs_doc = _load(repo / "rules" / "kdb" / "pairs.yaml")
    # mixed is not a workload of classes.yaml: the rules derive it from the others.
    classes = tuple(str(w["name"]) for w in classes_doc["workloads"]) + ("mixed",)
    return Inputs(
        thresholds=_thresholds(classes_doc),
        classes=classes,
        workloads=tuple(_workload(w) for w in pairs_doc["workloads"]),
        sources={k: " ".join(str(v).split()) for k, v in pairs_doc["sources"].items()},
    )
