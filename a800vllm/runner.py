"""run(): one playbook run through ansible-runner, in a fresh private data directory, with the project's
ansible.cfg; returns a Result, raises DeployError when the run did not succeed."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ansible_runner

from .events import Event, parse_event
from .phases import resolve
from .result import DeployError, Result, ResultBuilder

log = logging.getLogger(__name__)

Inventory = str | Path | Mapping[str, Any] | Sequence[str | Path]
PROJECT_ENV = "A800VLLM_PROJECT_DIR"
# ansible-playbook's prompts for --ask-vault-pass and --ask-become-pass (with its agnostic become prompt, forced on
# below), which ansible-runner answers from its `passwords` mapping (docs/api.md#passwords-through-ansible-runner)
VAULT_PROMPT = r"^Vault password:\s*$"
BECOME_PROMPT = r"^BECOME password:\s*$"
PathArg = str | Path


class ConfigurationError(ValueError):
    """The call cannot run: no project directory, an inventory argument that makes no sense."""


def find_project_dir(explicit: str | Path | None = None) -> Path:
    """The repository with site.yml and ansible.cfg: `explicit`, $A800VLLM_PROJECT_DIR, the directory above this
    package (a checkout or an editable install), or the current directory."""
    candidates: list[str | Path | None] = (
        [explicit] if explicit else [os.environ.get(PROJECT_ENV), Path(__file__).resolve().parent.parent, "."]
    )
    for candidate in candidates:
        if not candidate:
            continue
        path = Path(candidate).expanduser().resolve()
        if (path / "site.yml").is_file() and (path / "ansible.cfg").is_file():
            return path
    raise ConfigurationError(
        f"no project directory (site.yml and ansible.cfg) in {[str(c) for c in candidates if c]}: "
        f"pass project_dir or set {PROJECT_ENV}"
    )


def _inventory_path(item: str | Path, project: Path) -> str:
    text = str(item)
    if "," in text and not os.path.exists(text):  # "host1,host2," - a host list
        return text
    path = Path(text).expanduser()
    if not path.is_absolute() and not path.exists() and (project / path).exists():
        path = project / path  # -i prod from elsewhere: the project's inventory
    return str(path.absolute())


def prepare_inventory(inventory: Inventory | None, group_vars: str | Path | None, private_dir: Path,
                      project: Path) -> str | list[str] | None:  # fmt: skip
    """The -i argument(s). A dict is written to <private_dir>/inventory/hosts.json, with `group_vars` linked next to
    it (the model profile and bill of materials live in an inventory's group_vars). None: ansible.cfg's default."""
    if group_vars is not None and not isinstance(inventory, Mapping):
        raise ConfigurationError("group_vars goes with a dict inventory; a path inventory brings its own group_vars")
    if inventory is None:
        return None
    if isinstance(inventory, Mapping):
        directory = private_dir / "inventory"
        directory.mkdir(parents=True)
        (directory / "hosts.json").write_text(json.dumps(inventory, indent=1), encoding="utf-8")
        if group_vars is not None:
            source = Path(group_vars).expanduser()
            source = source if source.is_absolute() or source.exists() else project / source
            if not source.is_dir():
                raise ConfigurationError(f"group_vars {group_vars}: not a directory")
            (directory / "group_vars").symlink_to(source.resolve(), target_is_directory=True)
        return str(directory)
    if isinstance(inventory, str | Path):
        return _inventory_path(inventory, project)
    return [_inventory_path(item, project) for item in inventory]


def _password(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{name}: empty or not a string; give the password, or None to be asked for none")
    if "\n" in value or "\r" in value:
        raise ConfigurationError(f"{name}: holds a line break, which would end the answer to Ansible's prompt early")
    return value


def _files(name: str, value: PathArg | Sequence[PathArg] | None) -> list[str]:
    items = [] if value is None else [value] if isinstance(value, str | Path) else list(value)
    paths = []
    for item in items:
        path = Path(item).expanduser()
        if not path.is_file():
            raise ConfigurationError(f"{name} {item}: no such file; give the path of the password file (or script)")
        paths.append(str(path.absolute()))
    return paths


def _vault_ids(value: str | Sequence[str] | None) -> list[str]:
    """`label@FILE` (or FILE), as ansible-playbook's --vault-id, with FILE made absolute (the run's directory is
    the project's)."""
    ids = [] if value is None else [value] if isinstance(value, str) else list(value)
    absolute = []
    for vault_id in ids:
        label, at, source = vault_id.partition("@")
        if not at:
            label, source = "", vault_id
        if source in ("prompt", "prompt_ask_vault_pass"):
            raise ConfigurationError(
                f"vault_id {vault_id}: its prompt would wait for an answer nobody gives; pass vault_password "
                "(CLI: --ask-vault-pass) or a password file (label@FILE)"
            )
        path = Path(source).expanduser()
        if not path.is_file():
            raise ConfigurationError(f"vault_id {vault_id}: no such file {source}; give label@FILE")
        absolute.append(f"{label}@{path.absolute()}" if at else str(path.absolute()))
    return absolute


def secret_options(
    *,
    vault_password: str | None = None,
    vault_password_file: PathArg | Sequence[PathArg] | None = None,
    vault_id: str | Sequence[str] | None = None,
    become_password: str | None = None,
    become_password_file: PathArg | None = None,
) -> tuple[list[str], dict[str, str]]:
    """ansible-playbook's options for the vault and become passwords, and ansible-runner's `passwords` (prompt
    regex -> answer) for those given as strings: ansible-playbook asks (--ask-vault-pass, --ask-become-pass) and
    ansible-runner answers on its terminal, so that the password is in no argument, environment or file. Files
    and vault ids go to ansible-playbook as paths. Raises ConfigurationError on what ansible-playbook refuses."""
    vault = _password("vault_password", vault_password)
    become = _password("become_password", become_password)
    vault_files = _files("vault_password_file", vault_password_file)
    become_files = _files("become_password_file", become_password_file)
    if vault is not None and vault_files:
        raise ConfigurationError("vault_password and vault_password_file: give one (ansible-playbook takes one)")
    if become is not None and become_files:
        raise ConfigurationError("become_password and become_password_file: give one (ansible-playbook takes one)")
    args: list[str] = []
    passwords: dict[str, str] = {}
    if vault is not None:
        args.append("--ask-vault-pass")
        passwords[VAULT_PROMPT] = vault
    for path in vault_files:
        args += ["--vault-password-file", path]
    for identity in _vault_ids(vault_id):
        args += ["--vault-id", identity]
    if become is not None:
        args.append("--ask-become-pass")
        passwords[BECOME_PROMPT] = become
    for path in become_files:
        args += ["--become-password-file", path]
    return args, passwords


def write_extravars(extravars: Mapping[str, Any], private_dir: Path) -> None:
    """env/extravars of the private directory, 0600, as ansible-runner writes it (it is told to write no env files,
    so that the passwords stay in memory), read by ansible-playbook as -e @env/extravars."""
    directory = private_dir / "env"
    directory.mkdir(mode=0o700, exist_ok=True)
    descriptor = os.open(directory / "extravars", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(dict(extravars), handle)


def runner_env(project: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of ansible-playbook: the project's ansible.cfg and Ansible home, inventory parse errors fatal,
    the ansible-playbook of this Python's environment, plain output."""
    env = {
        "ANSIBLE_CONFIG": str(project / "ansible.cfg"),
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",  # a broken inventory is an error, not zero hosts and success
        "ANSIBLE_HOME": os.environ.get("ANSIBLE_HOME", str(project / ".ansible-home")),
        # ansible-runner turns host key checking off unless told otherwise; keep what ansible-playbook does
        "ANSIBLE_HOST_KEY_CHECKING": os.environ.get("ANSIBLE_HOST_KEY_CHECKING", "true"),
        "ANSIBLE_NOCOLOR": "true",
        "ANSIBLE_FORCE_COLOR": "false",
    }
    bindir = Path(sys.executable).parent
    if (bindir / "ansible-playbook").exists():
        env["PATH"] = os.pathsep.join([str(bindir), os.environ.get("PATH", "")])
    env.update(extra or {})
    return env


def _joined(value: str | Sequence[str] | None) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    return ",".join(value) or None


@contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """ansible-runner installs SIGINT/SIGTERM handlers (to cancel the run) and leaves them in place: put the
    caller's back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def run(
    playbook: str = "site.yml",
    *,
    inventory: Inventory | None = None,
    group_vars: str | Path | None = None,
    extravars: Mapping[str, Any] | None = None,
    limit: str | Sequence[str] | None = None,
    tags: str | Sequence[str] | None = None,
    skip_tags: str | Sequence[str] | None = None,
    check: bool = False,
    diff: bool = False,
    on_event: Callable[[Event], None] | None = None,
    raise_on_failure: bool = True,
    project_dir: str | Path | None = None,
    artifacts_dir: str | Path | None = None,
    envvars: Mapping[str, str] | None = None,
    verbosity: int = 0,
    vault_password: str | None = None,
    vault_password_file: PathArg | Sequence[PathArg] | None = None,
    vault_id: str | Sequence[str] | None = None,
    become_password: str | None = None,
    become_password_file: PathArg | None = None,
) -> Result:
    """Run a phase (`deploy`, `preflight`, `host`, `weights`, `image`, `serve`, `verify`, `bench`, `gateway`,
    `status`) or a playbook path of the project, and return its Result.

    inventory: a path (file or directory, relative paths also tried under the project), a list of paths, a dict
    (written to the run's private directory; `group_vars` is linked next to it), or None for ansible.cfg's default.
    tags / extravars: the phase's own, unless given (extravars are merged over the phase's).
    on_event: called with each typed event as it happens (a callback that raises is logged and ignored).
    Raises DeployError (with .result) for a failed or unreachable host, an inventory error, or no host at all,
    unless raise_on_failure is False. artifacts_dir keeps ansible-runner's private data directory there.
    vault_password / become_password: answered to ansible-playbook's prompts, never written to a file, an argument
    or the environment (the artifacts hold none of them); vault_password_file (one or a list), vault_id
    (`label@FILE`, one or a list) and become_password_file: ansible-playbook's options of those names. Bad ones raise
    ConfigurationError before anything runs."""
    phase = resolve(playbook)
    project = find_project_dir(project_dir)
    secret_args, passwords = secret_options(
        vault_password=vault_password,
        vault_password_file=vault_password_file,
        vault_id=vault_id,
        become_password=become_password,
        become_password_file=become_password_file,
    )
    merged_vars = {**phase.extravars, **(extravars or {})}
    tag_arg = _joined(tags) if tags is not None else phase.tags
    limit_arg = _joined(limit)
    cmdline = shlex.join([flag for flag, on in (("--check", check), ("--diff", diff)) if on] + secret_args)
    env = runner_env(project, envvars)
    if become_password is not None:
        env["ANSIBLE_AGNOSTIC_BECOME_PROMPT"] = "true"  # the prompt BECOME_PROMPT answers, whatever the method
    keep = artifacts_dir is not None
    if artifacts_dir is not None:
        Path(artifacts_dir).mkdir(parents=True, exist_ok=True)
    private_dir = Path(tempfile.mkdtemp(prefix="a800vllm-run-", dir=artifacts_dir))
    builder = ResultBuilder()

    def handle(raw: dict[str, Any]) -> bool:
        builder.feed(raw)
        if on_event is not None:
            for event in parse_event(raw):
                try:
                    on_event(event)
                except Exception:  # a display error must not lose the run's result
                    log.exception("on_event failed on %s", type(event).__name__)
        return keep  # events are written to the artifacts only when they are kept

    started = time.monotonic()
    try:
        inventory_arg = prepare_inventory(inventory, group_vars, private_dir, project)
        if merged_vars:
            write_extravars(merged_vars, private_dir)
        with _signal_handlers_kept():
            runner = ansible_runner.run(
                private_data_dir=str(private_dir),
                project_dir=str(project),
                playbook=phase.playbook,
                inventory=inventory_arg,
                limit=limit_arg,
                tags=tag_arg,
                skip_tags=_joined(skip_tags),
                cmdline=cmdline or None,
                envvars=env,
                # the passwords stay in memory, answered to ansible-playbook's prompts: ansible-runner would write
                # them, the cmdline, envvars and extravars to env/ (docs/api.md#passwords-through-ansible-runner)
                passwords=passwords or None,
                suppress_env_files=True,
                event_handler=handle,
                ident=uuid.uuid4().hex,
                quiet=True,
                verbosity=verbosity or None,
                # keep ansible.cfg's fact cache (facts survive between phases) instead of a per-run one
                fact_cache_type="ansible.cfg",
            )
        result = builder.build(
            status=str(runner.status),
            rc=int(runner.rc if runner.rc is not None else -1),
            playbook=phase.playbook,
            tags=tag_arg,
            limit=limit_arg,
            duration_s=time.monotonic() - started,
        )
    finally:
        if not keep:
            shutil.rmtree(private_dir, ignore_errors=True)
    if not result.ok and raise_on_failure:
        raise DeployError(result)
    return result
