"""Planner: topology -> stages -> tasks, internal topics, checkpoint participants."""

from kstream.plan.model import (
    InputKind,
    InputSpec,
    InternalTopic,
    JobPlan,
    OutputKind,
    OutputSpec,
    PlanError,
    SinkTopic,
    StageSpec,
    TaskSpec,
)
from kstream.plan.planner import plan_job

__all__ = [
    "InputKind",
    "InputSpec",
    "InternalTopic",
    "JobPlan",
    "OutputKind",
    "OutputSpec",
    "PlanError",
    "SinkTopic",
    "StageSpec",
    "TaskSpec",
    "plan_job",
]
