"""Vault and become passwords through the Python API and CLI (a800vllm): what the options and environment variables
turn into (no Ansible), then two real CLI runs of tests/api/vault-become.yml against a local host whose inventory
holds vaulted gateway keys (a vaulted group_vars file, as the README tells, and an encrypt_string value) and whose
become goes through the sudo double (tests/doubles/sudo/sudo), which checks the become password. No password or key
may appear in the kept private data directory (artifacts, job events, the recorded command and environment) or in
the CLI's output."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible.constants import DEFAULT_VAULT_ID_MATCH
from ansible.parsing.vault import VaultLib, VaultSecret
from conftest import ROOT

from a800vllm import ResultBuilder, cli
from a800vllm.runner import BECOME_PROMPT, VAULT_PROMPT, ConfigurationError, run, secret_options

PLAYBOOK = "tests/api/vault-become.yml"
SUDO_DOUBLE = ROOT / "tests" / "doubles" / "sudo" / "sudo"
HOST = "a800-vault-local"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def no_result():
    return ResultBuilder().build(status="successful", rc=0, playbook=PLAYBOOK)


# --- options, environment variables and checks (no Ansible) --------------------------------------------------


def test_passwords_become_prompt_answers_and_files_become_options(tmp_path):
    vault_file = tmp_path / "vault-pass"
    vault_file.write_text("x\n")
    args, passwords = secret_options(vault_password="v", become_password="b")
    assert args == ["--ask-vault-pass", "--ask-become-pass"] and passwords == {VAULT_PROMPT: "v", BECOME_PROMPT: "b"}
    args, passwords = secret_options(vault_password_file=vault_file, vault_id=f"prod@{vault_file}")
    assert args == ["--vault-password-file", str(vault_file), "--vault-id", f"prod@{vault_file}"] and not passwords
    args, _ = secret_options(become_password_file=str(vault_file))
    assert args == ["--become-password-file", str(vault_file)]
    assert secret_options() == ([], {})


def test_the_prompt_patterns_match_ansible_playbooks_prompts():
    import re

    # the pseudo-terminal's output as ansible-runner searches it: earlier lines, then the prompt, no newline
    assert re.search(VAULT_PROMPT, "[WARNING]: x\r\nVault password: ", re.M)
    assert re.search(BECOME_PROMPT, "BECOME password: ", re.M)
    assert not re.search(VAULT_PROMPT, "Vault password (prod): ", re.M)  # a vault id's prompt: refused instead
    assert not re.search(BECOME_PROMPT, "ok: [h] => BECOME password: is set\r\n", re.M)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"vault_password": ""}, "vault_password: empty"),
        ({"become_password": "a\nb"}, "become_password: holds a line break"),
        ({"vault_password_file": "/nonexistent/vault-pass"}, "vault_password_file /nonexistent/vault-pass: no such"),
        ({"vault_id": "prod@prompt"}, "vault_id prod@prompt: its prompt would wait"),
        ({"vault_password": "v", "vault_password_file": __file__}, "vault_password and vault_password_file"),
        ({"become_password": "b", "become_password_file": __file__}, "become_password and become_password_file"),
    ],
)
def test_bad_password_arguments_are_refused_before_anything_runs(kwargs, named, tmp_path):
    with pytest.raises(ConfigurationError, match=named):
        run(PLAYBOOK, inventory="nonexistent,", artifacts_dir=tmp_path / "runs", **kwargs)
    assert not (tmp_path / "runs").exists()  # refused before the private directory


def test_the_cli_asks_like_ansible_playbook_and_takes_the_variables_out_of_the_environment(monkeypatch):
    prompts: list[str] = []
    calls: list[dict[str, Any]] = []

    def fake_run(playbook: str, **kwargs: Any):
        calls.append({"environ": dict(os.environ), **kwargs})
        return no_result()

    monkeypatch.setattr(cli, "run", fake_run)
    monkeypatch.setattr(cli.getpass, "getpass", lambda prompt: prompts.append(prompt) or f"typed {prompt}")
    monkeypatch.setenv(cli.VAULT_PASSWORD_ENV, "from-env-vault")
    monkeypatch.setenv(cli.BECOME_PASSWORD_ENV, "from-env-become")
    cli.main(["status", "-q", "-J", "--ask-become-pass"])
    assert prompts == ["Vault password: ", "BECOME password: "]  # ansible-playbook's own prompts
    assert calls[-1]["vault_password"] == "typed Vault password: "
    assert calls[-1]["become_password"] == "typed BECOME password: "
    assert cli.VAULT_PASSWORD_ENV not in calls[-1]["environ"] and cli.BECOME_PASSWORD_ENV not in calls[-1]["environ"]

    monkeypatch.setenv(cli.VAULT_PASSWORD_ENV, "from-env-vault")
    cli.main(["status", "-q", "--vault-id", "prod@f", "--become-password-file", "bf"])
    assert calls[-1]["vault_password"] == "from-env-vault" and calls[-1]["become_password"] is None
    assert calls[-1]["vault_id"] == ["prod@f"] and calls[-1]["become_password_file"] == "bf"
    assert len(prompts) == 2 and "from-env-vault" not in json.dumps(calls[-1]["environ"])


def test_the_cli_refuses_two_sources_of_one_password(monkeypatch, capsys):
    monkeypatch.setattr(cli, "run", lambda *a, **k: pytest.fail("ran"))
    monkeypatch.setenv(cli.VAULT_PASSWORD_ENV, "v")
    assert cli.main(["status", "-q", "--vault-password-file", "f"]) == 2
    assert "--vault-password-file and $A800VLLM_VAULT_PASSWORD both" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:  # ansible-playbook's own exclusions
        cli.main(["status", "-J", "--vault-password-file", "f"])
    assert info.value.code == 2


# --- real runs through the CLI -------------------------------------------------------------------------------


def vaulted(text: str, password: str) -> str:
    """What ansible-vault encrypt (a file) and encrypt_string (the text after `!vault |`) write."""
    vault = VaultLib([(DEFAULT_VAULT_ID_MATCH, VaultSecret(password.encode()))])
    return vault.encrypt(text).decode()


def inventory(directory: Path, vault_password: str, become_password: str, keys: dict[str, str]) -> Path:
    """A local host in a800_gateways: the team key in a vaulted group_vars file, gateway_api_key vaulted in place,
    become through the sudo double expecting become_password's SHA-256."""
    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become_exe": str(SUDO_DOUBLE),
        "ansible_become_user": "nobody",  # Ansible skips become to the user it already is (become_allow_same_user)
        "ansible_become_flags": f"--password-sha256 {sha256(become_password)}",
    }
    lines = ["all:", "  children:", "    a800_gateways:", "      hosts:", f"        {HOST}:"]
    lines += [f"          {key}: {json.dumps(value)}" for key, value in host_vars.items()]
    lines += ["          gateway_api_key: !vault |"]
    lines += [f"            {line}" for line in vaulted(keys["gateway"], vault_password).splitlines()]
    directory.mkdir()
    (directory / "hosts.yml").write_text("\n".join(lines) + "\n")
    group_vars = directory / "group_vars" / "a800_gateways"
    group_vars.mkdir(parents=True)
    team_keys = json.dumps({"fleet_gateway_keys": [{"id": "team-a", "key": keys["fleet"]}]})
    (group_vars / "keys.yml").write_text(vaulted(team_keys, vault_password))
    return directory


def cli_run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "a800vllm", PLAYBOOK, *args, "--json"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def secret_hits(needles: list[str], directory: Path, *texts: str) -> list[str]:
    """Where a needle appears: every file under directory (bytes), and the texts."""
    hits = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        content = path.read_bytes()
        hits += [f"{path}: {i}" for i, needle in enumerate(needles) if needle.encode() in content]
    hits += [f"output {n}: {i}" for n, text in enumerate(texts) for i, needle in enumerate(needles) if needle in text]
    return hits


def private_dirs(artifacts: Path) -> list[Path]:
    runs = sorted(artifacts.glob("a800vllm-run-*"))
    assert len(runs) == 1, runs
    recorded = list(runs[0].glob("artifacts/*/command")) + list(runs[0].glob("artifacts/*/job_events/*.json"))
    assert len(recorded) > 5  # the grep reads what ansible-runner recorded: command, environment, events, stdout
    assert not (runs[0] / "env" / "passwords").exists()
    return runs


def test_vaulted_keys_and_become_password_from_the_environment_reach_ansible_and_nothing_else(tmp_path):
    vault_password, become_password = f"vault-{secrets.token_hex(8)}", f"become-{secrets.token_hex(8)}"
    keys = {"fleet": secrets.token_hex(24), "gateway": f"sk-{secrets.token_hex(20)}"}
    hosts = inventory(tmp_path / "inventory", vault_password, become_password, keys)
    artifacts = tmp_path / "artifacts"
    env = {cli.VAULT_PASSWORD_ENV: vault_password, cli.BECOME_PASSWORD_ENV: become_password}
    extra = '{"vault_become_extra_vars": {"passed": true}}'  # -e still reaches Ansible (env/extravars, 0600)
    done = cli_run("-i", str(hosts), "--artifacts-dir", str(artifacts), "-e", extra, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)["data"]
    assert data["vault_become"][HOST] == {"fleet_key_sha256": sha256(keys["fleet"]),
                                          "gateway_key_sha256": sha256(keys["gateway"]),
                                          "extra_vars": {"passed": True}}  # fmt: skip
    # the command ran through the double, which took the password (it sets SUDO_USER, the caller, as sudo does)
    assert data["vault_become_sudo_user"][HOST] == pwd.getpwuid(os.getuid()).pw_name
    needles = [vault_password, become_password, *keys.values()]
    private = private_dirs(artifacts)[0]
    assert secret_hits(needles, private, done.stdout, done.stderr) == []
    assert (private / "env" / "extravars").stat().st_mode & 0o777 == 0o600


def test_password_files_and_a_wrong_become_password_fail_the_become_task_with_sudos_message(tmp_path):
    vault_password, become_password = f"vault-{secrets.token_hex(8)}", f"become-{secrets.token_hex(8)}"
    keys = {"fleet": secrets.token_hex(24), "gateway": f"sk-{secrets.token_hex(20)}"}
    hosts = inventory(tmp_path / "inventory", vault_password, become_password, keys)
    (tmp_path / "vault-pass").write_text(vault_password + "\n")
    wrong = f"wrong-{secrets.token_hex(8)}"
    (tmp_path / "become-pass").write_text(wrong + "\n")
    artifacts = tmp_path / "artifacts"
    vault_file = ("--vault-password-file", str(tmp_path / "vault-pass"))
    become_file = {"ANSIBLE_BECOME_PASSWORD_FILE": str(tmp_path / "become-pass")}  # Ansible's own, passed through
    done = cli_run("-i", str(hosts), "--artifacts-dir", str(artifacts), *vault_file, env=become_file)
    assert done.returncode == 1, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert document["data"]["vault_become"][HOST]["gateway_key_sha256"] == sha256(keys["gateway"])
    assert document["failed_hosts"] == [HOST] and "vault_become_sudo_user" not in document["data"]
    assert "Sorry, try again." in document["failures"][0]["message"]
    needles = [vault_password, become_password, wrong, *keys.values()]
    assert secret_hits(needles, private_dirs(artifacts)[0], done.stdout, done.stderr) == []
