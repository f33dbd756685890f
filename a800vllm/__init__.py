"""Drive the a800-vllm playbooks from Python: run a phase through ansible-runner, watch typed events as they
happen (task results per host, the weights prewarm and the vLLM weight load), get a typed Result.

    from a800vllm import run, DeployError
    result = run("preflight", inventory="prod")
"""

from .events import Event, LoadProgress, PlayStarted, PrewarmProgress, TaskResult, TaskStarted, TaskStatus, parse_event
from .phases import PHASES, Phase
from .result import EXIT_CODES, DeployError, HostFailure, HostStats, Outcome, Result, ResultBuilder
from .runner import ConfigurationError, find_project_dir, run

__all__ = [
    "EXIT_CODES",
    "PHASES",
    "ConfigurationError",
    "DeployError",
    "Event",
    "HostFailure",
    "HostStats",
    "LoadProgress",
    "Outcome",
    "Phase",
    "PlayStarted",
    "PrewarmProgress",
    "Result",
    "ResultBuilder",
    "TaskResult",
    "TaskStarted",
    "TaskStatus",
    "find_project_dir",
    "parse_event",
    "run",
]
