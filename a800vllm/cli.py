"""`python -m a800vllm COMMAND`: a phase of the deployment through ansible-runner, with a live progress display on
stderr and a summary (or --json, the Result) on stdout.

Exit codes: 0 ok; 1 a check or host failed; 2 usage, inventory or playbook error, or no host matched;
3 a host was unreachable (and none failed); 130 interrupted.

Vault and become passwords: ansible-playbook's options (--ask-vault-pass, --vault-password-file, --vault-id,
--ask-become-pass, --become-password-file), or for tooling the environment variables A800VLLM_VAULT_PASSWORD and
A800VLLM_BECOME_PASSWORD, which are taken out of the environment before Ansible starts (ansible-runner records its
environment in the artifacts)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from .display import ProgressDisplay
from .phases import PHASES
from .result import Result
from .runner import ConfigurationError, run

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
VAULT_PASSWORD_ENV = "A800VLLM_VAULT_PASSWORD"
BECOME_PASSWORD_ENV = "A800VLLM_BECOME_PASSWORD"


def parse_extravars(items: Sequence[str]) -> dict[str, Any]:
    """Like ansible-playbook's -e: `key=value` (a string), a JSON/YAML mapping `{...}`, or `@file.yml`."""
    merged: dict[str, Any] = {}
    for item in items:
        if item.startswith("@"):
            loaded = yaml.safe_load(Path(item[1:]).read_text(encoding="utf-8"))
        elif item.lstrip().startswith("{"):
            loaded = yaml.safe_load(item)
        elif "=" in item:
            key, _, value = item.partition("=")
            loaded = {key.strip(): value}
        else:
            raise ValueError(f"-e {item!r}: expected key=value, a {{...}} mapping or @file")
        if not isinstance(loaded, dict):
            raise ValueError(f"-e {item!r}: not a mapping")
        merged.update(loaded)
    return merged


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="a800vllm",
        description="Run a phase of the A800 vLLM deployment (site.yml and its playbooks) through ansible-runner.",
        epilog="exit codes: 0 ok, 1 a check/host failed, 2 usage/inventory error or no host, 3 unreachable, "
        "130 interrupted",
    )
    parser.add_argument(
        "command",
        type=phase_or_playbook,
        metavar="{" + ",".join(PHASES) + "} | PLAYBOOK.yml",
        help="; ".join(f"{p.name}: {p.description}" for p in PHASES.values())
        + "; or a playbook file (relative paths also under the project)",
    )
    parser.add_argument("-i", "--inventory", action="append", help="inventory path (default: ansible.cfg's)")
    parser.add_argument("-l", "--limit", help="limit to these hosts (Ansible pattern)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="K=V", help="extra variables")
    parser.add_argument("-t", "--tags", help="tags instead of the phase's own")
    parser.add_argument("--skip-tags", help="tags to skip")
    parser.add_argument("-C", "--check", action="store_true", help="check mode: change nothing")
    parser.add_argument(
        "--dry-run", action="store_true", help="upgrade: print the plan (which server first, against which) and stop"
    )
    parser.add_argument("-D", "--diff", action="store_true", help="show the differences of changed files")
    parser.add_argument("--json", action="store_true", help="print the Result as JSON on stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")
    parser.add_argument("--project-dir", help="the repository (default: the one holding this package)")
    parser.add_argument("--artifacts-dir", help="keep ansible-runner's private data directory under this folder")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="ansible-playbook verbosity")
    secrets = parser.add_argument_group(
        "vault and become passwords (never written to the artifacts)",
        f"For tooling: ${VAULT_PASSWORD_ENV} and ${BECOME_PASSWORD_ENV}, removed from the environment before Ansible "
        "starts; Ansible's own $ANSIBLE_VAULT_PASSWORD_FILE and $ANSIBLE_BECOME_PASSWORD_FILE work too.",
    )
    vault = secrets.add_mutually_exclusive_group()
    vault.add_argument(
        "-J", "--ask-vault-pass", "--ask-vault-password", action="store_true", help="ask for the vault password"
    )
    vault.add_argument(
        "--vault-password-file", "--vault-pass-file", action="append", metavar="PATH", help="a file or a script"
    )
    secrets.add_argument("--vault-id", action="append", metavar="LABEL@PATH", help="a vault identity")
    become = secrets.add_mutually_exclusive_group()
    become.add_argument("-K", "--ask-become-pass", action="store_true", help="ask for the become (sudo) password")
    become.add_argument("--become-password-file", "--become-pass-file", metavar="PATH", help="a file or a script")
    return parser


def phase_or_playbook(value: str) -> str:
    if value in PHASES or value.endswith((".yml", ".yaml")):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: neither a phase ({', '.join(PHASES)}) nor a playbook (.yml)")


def passwords(args: argparse.Namespace) -> dict[str, str | None]:
    """The vault and become passwords: asked for (-J, -K), else from the environment variables, which leave the
    environment either way (ansible-runner copies it into its artifacts). Raises ValueError on a conflict."""
    from_env = {name: os.environ.pop(name, None) or None for name in (VAULT_PASSWORD_ENV, BECOME_PASSWORD_ENV)}
    vault, become = from_env[VAULT_PASSWORD_ENV], from_env[BECOME_PASSWORD_ENV]
    if args.ask_vault_pass:
        vault = getpass.getpass("Vault password: ")
    elif vault is not None and args.vault_password_file:
        raise ValueError(f"--vault-password-file and ${VAULT_PASSWORD_ENV} both give the vault password: keep one")
    if args.ask_become_pass:
        become = getpass.getpass("BECOME password: ")
    elif become is not None and args.become_password_file:
        raise ValueError(f"--become-password-file and ${BECOME_PASSWORD_ENV} both give the become password: keep one")
    return {"vault_password": vault, "become_password": become}


def check_summary(checks: Any) -> str:
    if isinstance(checks, dict):
        checks = checks.get("checks")
    if not isinstance(checks, list):
        return ""
    counts: dict[str, int] = {}
    for check in checks:
        if isinstance(check, dict):
            counts[str(check.get("status"))] = counts.get(str(check.get("status")), 0) + 1
    failed = [str(c.get("name")) for c in checks if isinstance(c, dict) and c.get("status") == "fail"]
    text = ", ".join(f"{n} {status}" for status, n in counts.items())
    return text + (f" (failed: {', '.join(failed)})" if failed else "")


def summary(result: Result) -> str:
    """The recap for people: per host its stats and what each phase returned."""
    lines = []
    for host, stats in result.hosts.items():
        lines.append(
            f"{host:<24} ok={stats.ok} changed={stats.changed} failed={stats.failures} "
            f"unreachable={stats.unreachable} skipped={stats.skipped}"
        )
        for key in ("preflight", "serve_checks", "verify", "bench", "gateway"):
            text = check_summary(result.phase_data(key).get(host))
            if text:
                lines.append(f"  {key}: {text}")
        for key in ("serve", "status"):
            entry = result.phase_data(key).get(host)
            if isinstance(entry, dict) and entry.get("message"):
                lines.append(f"  {key}: {entry.get('container', '')}: {entry['message']}")
            start = entry.get("start") if isinstance(entry, dict) else None
            if isinstance(start, dict) and start.get("status") in ("pass", "warn"):
                lines.append(f"  last start ({start['status']}): {start.get('detail', '')}")
    for host, alerts in result.phase_data("alerts").items():
        if isinstance(alerts, list):
            names = ", ".join(f"{a.get('alert')} ({a.get('host')}, {a.get('severity')})" for a in alerts)
            lines.append(f"{host:<24} alerts: {len(alerts)} firing" + (f": {names}" if names else ""))
    upgrade = result.phase_data("upgrade")
    if isinstance(upgrade.get("plan"), dict):
        lines += ["upgrade plan:", *(f"  {line}" for line in upgrade["plan"].get("lines", []))]
    if upgrade.get("verdict_lines"):
        lines += [f"upgrade of {upgrade.get('canary')} (the canary): {upgrade['verdict_lines'][0]}",
                  *(f"  {line.strip()}" for line in upgrade["verdict_lines"][1:])]  # fmt: skip
    verdict = "OK" if result.ok else result.outcome.upper()
    lines.append(f"{verdict} in {result.duration_s:.0f} s (rc {result.rc})")
    if result.message:
        lines.append(result.message)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        extravars = parse_extravars(args.extra_vars)
        secrets = passwords(args)
    except (ValueError, OSError, yaml.YAMLError) as error:
        print(f"a800vllm: {error}", file=sys.stderr)
        return EXIT_USAGE
    except EOFError:
        print("a800vllm: no password read (end of input at the prompt)", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    command = args.command
    if args.dry_run:
        if command != "upgrade":
            print("a800vllm: --dry-run is for upgrade (other phases: --check)", file=sys.stderr)
            return EXIT_USAGE
        extravars["upgrade_dry_run"] = True
        args.check = True
    if command not in PHASES and Path(command).is_file():
        command = str(Path(command).absolute())  # a playbook from here, not from the project directory
    display = None if args.quiet else ProgressDisplay(sys.stderr)
    inventory = args.inventory[0] if args.inventory and len(args.inventory) == 1 else args.inventory
    try:
        result = run(
            command,
            inventory=inventory,
            extravars=extravars,
            limit=args.limit,
            tags=args.tags,
            skip_tags=args.skip_tags,
            check=args.check,
            diff=args.diff,
            on_event=display,
            raise_on_failure=False,
            project_dir=args.project_dir,
            artifacts_dir=args.artifacts_dir,
            verbosity=args.verbose,
            vault_password_file=args.vault_password_file,
            vault_id=args.vault_id,
            become_password_file=args.become_password_file,
            **secrets,
        )
    except ConfigurationError as error:
        print(f"a800vllm: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        if display is not None:
            display.close()
    if args.json:
        print(result.to_json())
    else:
        print(summary(result))
    return result.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
