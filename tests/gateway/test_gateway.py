"""The gateway phase: the gateway_smoke module (plugins/modules/gateway_smoke.py) against the vLLM test double
behind the nginx gateway stand-in (tests/testbed/gateway), one named diagnosis per failure of the article, and
playbooks/gateway.yml end to end - the client files, their modes, and the key in no output, log or report."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.modules import gateway_smoke
from conftest import ROOT
from harness import Launcher, free_port

PROFILE = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
SMOKE = PROFILE["smoke"]  # the arithmetic check the role sends, from the model profile
DIAGNOSES = yaml.safe_load((ROOT / "roles/gateway/defaults/main/diagnoses.yml").read_text())["gateway_diagnoses"]
SECRET = "sk-static-" + "9f3c1a7e5b2d4c6e8a0b"  # the static tests' key: never in a result either

# --- the chain: the vLLM test double (a local process, no key of its own) behind the gateway stand-in (nginx from
# a800-testbed/gateway-standin:latest, run with the host's network), which holds the key -------------------------

STANDIN_IMAGE = "a800-testbed/gateway-standin:latest"
KEY = "sk-gw-test-" + uuid.uuid4().hex  # unique: its absence from outputs means something


@dataclass
class Chain:
    gateway: str  # http://127.0.0.1:PORT, the stand-in's root; the base URL of the tools is gateway + "/api"
    upstream: str  # the double, straight
    key: str
    container: str

    @property
    def base_url(self) -> str:
        return f"{self.gateway}/api"

    @property
    def port(self) -> int:
        """The double's port: the fleet's serve_port, whose /metrics must count the smoke."""
        return int(self.upstream.rsplit(":", 1)[1])


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=60)


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1)
    except urllib.error.HTTPError:
        return True  # nginx answers 404 on its root
    except OSError:
        return False
    return True


def _standin(upstream: str) -> tuple[str, str]:
    """The gateway stand-in in front of `upstream`, holding KEY: (its root URL, its container name)."""
    container = f"a800-gateway-standin-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    port = free_port()
    _docker("run", "-d", "--name", container, "--network", "host",
            "-e", f"GATEWAY_UPSTREAM={upstream}", "-e", f"GATEWAY_API_KEY={KEY}",
            "-e", f"GATEWAY_LISTEN=127.0.0.1:{port}", STANDIN_IMAGE)  # fmt: skip
    gateway = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not _answers(gateway + "/"):
        running = _docker("inspect", "-f", "{{.State.Running}}", container, check=False).stdout.strip()
        if running != "true" or time.monotonic() > deadline:
            logs = _docker("logs", container, check=False)
            _docker("rm", "-f", container, check=False)
            pytest.fail(f"the gateway stand-in did not answer: {logs.stdout}{logs.stderr}")
        time.sleep(0.1)
    return gateway, container


def _double(launcher: Launcher):
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("VLLM_API_KEY", raising=False)  # the gateway holds the key, not the server
        run = launcher.start()
    assert "Application startup complete." in run.log, run.log[-2000:]
    return run


def _chain(tmp_path_factory, installs, weights, name: str):
    """A double (a local process, no key of its own) behind its own gateway stand-in, which holds the key."""
    launcher = Launcher(tmp_path_factory.mktemp(name), installs, weights)
    container = ""
    try:
        run = _double(launcher)
        gateway, container = _standin(run.url)
        yield Chain(gateway=gateway, upstream=run.url, key=KEY, container=container)
    finally:
        if container:
            _docker("rm", "-f", container, check=False)
        launcher.stop_all()


@pytest.fixture(scope="module")
def chain(tmp_path_factory, installs, weights, testbed_images):
    yield from _chain(tmp_path_factory, installs, weights, "gateway-double")


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory, installs, weights, testbed_images):
    """A gateway that answers from a second backend, not from the fleet: a second double behind its own stand-in."""
    yield from _chain(tmp_path_factory, installs, weights, "gateway-elsewhere")


def smoke(base_url: str, key: str, **over) -> dict:
    """Run the module's logic with the role's defaults; assert that the key left no trace in the result."""
    params = {
        "base_url": base_url,
        "api_key": key,
        "model": "glm-5.2-nvfp4",
        "proxy": "",
        "diagnoses": DIAGNOSES,
        "probe": True,
        "prompt": SMOKE["prompt"],
        "expect": SMOKE["expect_in_content"],
        "max_tokens": SMOKE["max_tokens"],
        "temperature": SMOKE["temperature"],
        "timeout_s": 10.0,
        "validate_certs": True,
        **over,
    }
    result = gateway_smoke.smoke(params)
    text = json.dumps(result)
    assert key.strip() not in text or not key.strip(), "the key leaked into the result"
    return result


def by_name(result: dict) -> dict[str, dict]:
    return {c["name"]: c for c in result["checks"]}


# --- the catalogue and the checks of the settings (no request) ------------------------------------------------------


def test_catalogue_is_valid_and_names_every_case_of_the_article():
    assert gateway_smoke.catalogue_errors(DIAGNOSES) == []
    names = [d["name"] for d in DIAGNOSES]
    assert len(names) == len(set(names))
    for name in ("key_missing", "key_wrong", "key_whitespace", "doubled_v1", "wrong_model_id", "reading_choices",
                 "local_proxy_failed", "oauth_login", "base_url_invalid", "model_missing"):  # fmt: skip
        assert name in names


def test_a_base_url_ending_in_v1_is_refused_with_the_doubled_url_and_the_fix():
    for base in ("https://taotoken.net/api/v1", "https://taotoken.net/api/v1/"):
        check = by_name(smoke(base, SECRET, probe=False))["base_url"]
        assert check["status"] == "fail" and check["diagnosis"] == "doubled_v1"
        assert "https://taotoken.net/api/v1/v1/chat/completions -> 404" in check["detail"]
        assert "https://taotoken.net/api:" in check["fix"] or "https://taotoken.net/api " in check["fix"]


@pytest.mark.parametrize("base", ["ftp://taotoken.net/api", "taotoken.net/api", "", "https://taotoken.net/api?x=1"])
def test_a_base_url_that_is_not_http_is_refused_without_a_request(base):
    result = smoke(base, SECRET)
    assert by_name(result)["base_url"]["diagnosis"] == "base_url_invalid"
    assert result["exchanges"] == []


def test_the_key_is_refused_by_its_defect_never_shown():
    cases = {"": "key_missing", f" {SECRET}": "key_whitespace", f"{SECRET}\n": "key_whitespace",
             f'"{SECRET}"': "key_quoted"}  # fmt: skip
    for key, diagnosis in cases.items():
        check = by_name(smoke("https://taotoken.net/api", key, probe=False))["api_key"]
        assert (check["status"], check["diagnosis"]) == ("fail", diagnosis)
    ok = by_name(smoke("https://taotoken.net/api", SECRET, probe=False))["api_key"]
    assert ok["status"] == "pass" and SECRET not in json.dumps(ok)


def test_passwords_in_urls_are_never_shown():
    result = smoke("https://user:hunter2pw@taotoken.net/api", SECRET, proxy="http://u:proxypw@127.0.0.1:1")
    assert by_name(result)["base_url"]["diagnosis"] == "base_url_invalid"
    assert "hunter2pw" not in json.dumps(result) and "proxypw" not in json.dumps(result)


def test_an_empty_model_id_is_refused():
    check = by_name(smoke("https://taotoken.net/api", SECRET, model="", probe=False))["model"]
    assert (check["status"], check["diagnosis"]) == ("fail", "model_missing")


def test_a_model_id_that_differs_from_the_served_name_in_case_is_refused_before_any_request():
    """The article: the id must match exactly. GLM-5.2-NVFP4 against the served glm-5.2-nvfp4 fails the settings
    check (nothing written, nothing sent), naming both; a gateway that maps ids lets it through as a warning."""
    result = smoke("https://taotoken.net/api", SECRET, model="GLM-5.2-NVFP4", served_model="glm-5.2-nvfp4", probe=False)
    check = by_name(result)["model_id"]
    assert (check["status"], check["diagnosis"]) == ("fail", "model_id_case")
    assert "'GLM-5.2-NVFP4'" in check["detail"] and "'glm-5.2-nvfp4'" in check["detail"]
    assert "gateway_model" in check["fix"] and result["exchanges"] == []
    other = by_name(smoke("https://taotoken.net/api", SECRET, model="glm-5", served_model="glm-5.2-nvfp4", probe=False))
    assert other["model_id"]["diagnosis"] == "model_id_mismatch"
    mapped = smoke("https://taotoken.net/api", SECRET, model="GLM-5.2-NVFP4", served_model="glm-5.2-nvfp4",
                   model_mapping=True, probe=False)  # fmt: skip
    assert by_name(mapped)["model_id"]["status"] == "warn"
    same = smoke("https://taotoken.net/api", SECRET, served_model="glm-5.2-nvfp4", probe=False)
    assert by_name(same)["model_id"]["status"] == "pass"


# --- through the stand-in: the good path and each failure of the article ------------------------------------------


def test_good_path_all_pass(chain):
    result = smoke(chain.base_url, chain.key)
    checks = by_name(result)
    assert [c["status"] for c in result["checks"]] == ["pass"] * 8, result["checks"]
    assert list(checks) == ["base_url", "api_key", "model", "model_id", "gateway_models", "model_listed",
                            "gateway_chat", "gateway_messages"]  # fmt: skip
    assert checks["gateway_messages"]["measured"][-1] == "text"  # the Anthropic Messages API through the gateway
    assert result["urls"]["messages"] == f"{chain.gateway}/api/v1/messages"
    assert checks["gateway_models"]["measured"] == ["glm-5.2-nvfp4"]
    assert "408" in checks["gateway_chat"]["measured"]["content"]
    assert result["urls"]["chat"] == f"{chain.gateway}/api/v1/chat/completions"
    assert result["urls"]["sdk_base_url"] == f"{chain.gateway}/api/v1"
    assert result["diagnoses"] == []


def test_missing_key(chain):
    result = smoke(chain.base_url, "")
    checks = by_name(result)
    assert checks["gateway_models"]["diagnosis"] == "key_missing"
    assert (
        "HTTP 401" in checks["gateway_models"]["measured"] and "Missing API key" in checks["gateway_models"]["measured"]
    )
    assert result["diagnoses"] == ["key_missing"]


def test_wrong_key(chain):
    result = smoke(chain.base_url, "sk-not-the-key-0123456789")
    assert by_name(result)["gateway_models"]["diagnosis"] == "key_wrong"
    assert by_name(result)["gateway_chat"]["diagnosis"] == "key_wrong"
    assert result["diagnoses"] == ["key_wrong"]


def test_key_with_a_trailing_space(chain):
    """nginx drops the whitespace at the end of a header value, so this gateway lets the request through; the
    check of the key as given (stripped vs raw) still names it: other clients send it verbatim or refuse it."""
    result = smoke(chain.base_url, chain.key + " ")
    check = by_name(result)["api_key"]
    assert (check["status"], check["diagnosis"]) == ("fail", "key_whitespace")
    assert "0 leading, 1 trailing" in check["measured"]
    assert result["diagnoses"] == ["key_whitespace"]


def test_key_with_a_leading_space_gets_401_named_whitespace(chain):
    result = smoke(chain.base_url, " " + chain.key)
    assert by_name(result)["gateway_models"]["diagnosis"] == "key_whitespace"
    assert "HTTP 401" in by_name(result)["gateway_models"]["measured"]


def test_base_url_with_v1_gets_404_named_doubled_v1(chain):
    result = smoke(chain.base_url + "/v1", chain.key)
    checks = by_name(result)
    assert checks["base_url"]["diagnosis"] == "doubled_v1"
    assert checks["gateway_models"]["fact"] == f"GET {chain.gateway}/api/v1/v1/models"
    assert checks["gateway_models"]["measured"].startswith("HTTP 404")
    assert checks["gateway_models"]["diagnosis"] == "doubled_v1"
    assert f"{chain.gateway}/api:" in checks["gateway_models"]["fix"]
    assert set(result["diagnoses"]) == {"doubled_v1"}


def test_wrong_model_id_case_prints_the_whole_error_body(chain):
    result = smoke(chain.base_url, chain.key, model="GLM-5.2-NVFP4")
    checks = by_name(result)
    assert checks["model_listed"]["diagnosis"] == "wrong_model_id"
    assert "in case only" in checks["model_listed"]["detail"]
    chat = checks["gateway_chat"]
    assert chat["diagnosis"] == "wrong_model_id"
    assert "reading choices" in chat["detail"]
    body = chat["measured"].removeprefix("HTTP 404: ")
    assert json.loads(body)["error"]["message"] == "The model `GLM-5.2-NVFP4` does not exist."
    assert "glm-5.2-nvfp4" in chat["fix"]


def test_refused_local_proxy(chain):
    proxy = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = smoke(chain.base_url, chain.key, proxy=proxy)
    checks = by_name(result)
    assert checks["proxy"]["status"] == "pass"
    for name in ("gateway_models", "gateway_chat"):
        assert checks[name]["diagnosis"] == "local_proxy_failed"
        assert "Connection refused" in checks[name]["measured"]
        assert proxy in checks[name]["detail"]
    assert result["diagnoses"] == ["local_proxy_failed"]


def test_empty_answer_with_finish_length_is_a_warning(chain):
    result = smoke(chain.base_url, chain.key, max_tokens=5)
    chat = by_name(result)["gateway_chat"]
    assert (chat["status"], chat["diagnosis"]) == ("warn", "budget_spent_on_reasoning")
    assert chat["measured"]["finish_reason"] == "length"


# --- the playbook: files, modes, and the key nowhere else -----------------------------------------------------------


def playbook(
    tmp_path, *args: str, playbook_file: str = "playbooks/gateway.yml", **extra
) -> subprocess.CompletedProcess:
    inventory = tmp_path / "inventory" / "hosts.yml"  # two servers with the prod group_vars (profile, BOM)
    inventory.parent.mkdir(exist_ok=True)
    # local stand-ins for the serving hosts (the gateway role reads each one's /metrics from it), on this Python
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {"gw-test-1": host, "gw-test-2": host}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"a800_servers": {"hosts": hosts}}}}))
    if not (inventory.parent / "group_vars").exists():
        (inventory.parent / "group_vars").symlink_to(ROOT / "inventories/prod/group_vars", target_is_directory=True)
    extra_vars = tmp_path / "extra-vars.json"  # the key reaches ansible-playbook in a file, as a vault would
    extra_vars.write_text(json.dumps({"gateway_enabled": True, **extra}))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"),
         "-i", str(inventory), playbook_file, "-e", f"@{extra_vars}", "-v", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,  # a bound, not a speed: ~20 s idle
    )  # fmt: skip


def test_playbook_writes_0600_client_files_and_the_key_appears_nowhere_else(chain, tmp_path):
    out = tmp_path / "clients"
    settings = {"gateway_base_url": chain.base_url + "/", "gateway_api_key": chain.key, "gateway_config_dir": str(out),
                "serve_port": chain.port}  # fmt: skip
    first = playbook(tmp_path, **settings)
    log = first.stdout + first.stderr
    assert first.returncode == 0, log[-4000:]
    assert chain.key not in log
    assert "gateway_chat" in log and "9 pass" in log  # the smoke's 8 and fleet_answered

    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    secret_files = {
        ".env",
        "claude-code-settings.json",
        "cline-openai-compatible.json",
        "article-generic-settings.json",
    }
    for name in (*secret_files, "openai_client.py", "curl-examples.sh"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    for path in out.iterdir():
        assert (chain.key in path.read_text()) == (path.name in secret_files), path.name
    env = dict(line.split("=", 1) for line in (out / ".env").read_text().splitlines() if "=" in line)
    assert env["OPENAI_BASE_URL"] == f"{chain.gateway}/api/v1"  # the OpenAI SDKs add no /v1 themselves
    assert env["GATEWAY_BASE_URL"] == f"{chain.gateway}/api"
    assert (env["OPENAI_API_KEY"], env["OPENAI_MODEL"]) == (chain.key, "glm-5.2-nvfp4")
    # Claude Code: the env block of its settings.json, the base without /v1 (it calls <base>/v1/messages)
    claude = json.loads((out / "claude-code-settings.json").read_text())
    served = "glm-5.2-nvfp4"  # also for its background model and the /model aliases (else Claude ids)
    models = ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
              "ANTHROPIC_DEFAULT_OPUS_MODEL")  # fmt: skip
    assert claude == {"env": {"ANTHROPIC_BASE_URL": f"{chain.gateway}/api", "ANTHROPIC_AUTH_TOKEN": chain.key,
                              **dict.fromkeys(models, served)}}  # fmt: skip
    # Cline's OpenAI Compatible provider (apiProvider "openai" in its ApiConfiguration): the base with /v1
    cline = json.loads((out / "cline-openai-compatible.json").read_text())
    assert cline == {"apiProvider": "openai", "openAiBaseUrl": f"{chain.gateway}/api/v1", "openAiApiKey": chain.key,
                     "openAiModelId": "glm-5.2-nvfp4"}  # fmt: skip
    generic = json.loads((out / "article-generic-settings.json").read_text())
    assert generic == {"baseUrl": f"{chain.gateway}/api", "apiKey": chain.key, "model": "glm-5.2-nvfp4"}
    assert "authMode" not in json.dumps([claude, cline, generic])  # no tool has such a field
    index = (out / "README.txt").read_text()
    for name in (*secret_files, "openai_client.py", "curl-examples.sh"):
        assert name in index
    assert f'BASE_URL = "{chain.gateway}/api/v1"' in (out / "openai_client.py").read_text()
    report = json.loads((out / "smoke.json").read_text())
    assert report["diagnoses"] == [] and {c["status"] for c in report["checks"]} == {"pass"}

    # converged: check mode with diff changes nothing and shows no key either
    again = playbook(tmp_path, "--check", "--diff", **settings)
    log = again.stdout + again.stderr
    assert again.returncode == 0, log[-4000:]
    assert chain.key not in log
    assert "changed=0" in log and "changed=1" not in log


# The real client SDKs (vLLM's own dependencies, in the contract venv) read the written files and call the gateway:
# the OpenAI SDK with .env's OPENAI_BASE_URL, the Anthropic SDK as Claude Code is configured (its settings' env block).
SDK_CALLS = """
import json, sys
from pathlib import Path
import anthropic, openai
out = Path(sys.argv[1])
env = dict(l.split("=", 1) for l in (out / ".env").read_text().splitlines() if "=" in l and not l.startswith("#"))
client = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"])
chat = client.chat.completions.create(model=env["OPENAI_MODEL"], max_tokens=150,
                                      messages=[{"role": "user", "content": "What is 17 multiplied by 24?"}])
claude = json.loads((out / "claude-code-settings.json").read_text())["env"]
question = [{"role": "user", "content": "What is 17 multiplied by 24?"}]
messages = anthropic.Anthropic(base_url=claude["ANTHROPIC_BASE_URL"], auth_token=claude["ANTHROPIC_AUTH_TOKEN"],
                               api_key=None).messages.create(model=claude["ANTHROPIC_MODEL"], max_tokens=150,
                                                              messages=question)
print(json.dumps({"openai": [openai.__version__, chat.choices[0].message.content],
                  "anthropic": [anthropic.__version__, [b.type for b in messages.content],
                                "".join(b.text for b in messages.content if b.type == "text")]}))
"""


def test_the_real_sdks_answer_through_the_written_files(chain, tmp_path):
    """OpenAI's and Anthropic's own Python SDKs, configured from the files the gateway phase wrote, get 408 from the
    double behind the gateway stand-in: the base URLs, key and model in those files are what the SDKs need."""
    out = tmp_path / "clients"
    run = playbook(tmp_path, gateway_base_url=chain.base_url, gateway_api_key=chain.key, gateway_config_dir=str(out),
                   serve_port=chain.port)  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}  # straight to the stand-in
    sdk = subprocess.run([str(ROOT / ".venv-vllm/bin/python"), "-c", SDK_CALLS, str(out)], capture_output=True,
                         text=True, timeout=120, env=env)  # fmt: skip
    assert sdk.returncode == 0, sdk.stderr[-3000:]
    answers = json.loads(sdk.stdout.strip().splitlines()[-1])
    assert "408" in answers["openai"][1]
    assert answers["anthropic"][1][-1] == "text" and "408" in answers["anthropic"][2]


def test_a_gateway_answering_from_elsewhere_is_named_answered_elsewhere(chain, elsewhere, tmp_path):
    """The gateway (elsewhere) answers 408 from its own backend; the fleet's server (chain's double, serve_port)
    counts nothing: the smoke passed, the fleet_answered check fails with answered_elsewhere and its fix."""
    out = tmp_path / "clients"
    run = playbook(tmp_path, gateway_base_url=elsewhere.base_url, gateway_api_key=elsewhere.key,
                   gateway_config_dir=str(out), serve_port=chain.port)  # fmt: skip
    log = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0
    assert "Gateway smoke failed (answered_elsewhere)" in log, log[-3000:]
    assert "fleet_answered" in log and "no server of this fleet counted a request" in log
    report = json.loads((out / "smoke.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["gateway_chat"]["status"] == "pass" and checks["fleet_answered"]["status"] == "fail"
    assert checks["fleet_answered"]["measured"] == 0 and "gw-test-1: +0 requests" in checks["fleet_answered"]["detail"]


def test_playbook_refuses_a_v1_base_before_writing_anything(chain, tmp_path):
    out = tmp_path / "clients"
    run = playbook(tmp_path, gateway_base_url=chain.base_url + "/v1", gateway_api_key=chain.key,
                   gateway_config_dir=str(out))  # fmt: skip
    log = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"{chain.gateway}/api/v1/v1/chat/completions -> 404" in log
    assert chain.key not in log
    assert not out.exists()


def test_playbook_refuses_a_model_id_in_the_wrong_case_before_writing_anything(chain, tmp_path):
    """The article's pitfall: GLM-5.2-NVFP4 for the served glm-5.2-nvfp4. Refused by the settings check, with both
    names and the fix, before a file is written or a request sent; gateway_model_mapping lets it through."""
    out = tmp_path / "clients"
    run = playbook(tmp_path, gateway_base_url=chain.base_url, gateway_api_key=chain.key, gateway_config_dir=str(out),
                   gateway_model="GLM-5.2-NVFP4", serve_port=chain.port)  # fmt: skip
    log = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0
    assert "Gateway settings refused (nothing written, nothing sent)" in log
    assert "model_id" in log and "'GLM-5.2-NVFP4'" in log and "'glm-5.2-nvfp4'" in log
    assert not out.exists()


def test_playbook_is_opt_in(tmp_path):
    """With gateway_enabled false the play ends for each host at its first task: no role runs, no file is written."""
    out = tmp_path / "clients"
    run = playbook(tmp_path, gateway_enabled=False, gateway_api_key=SECRET, gateway_config_dir=str(out))
    assert run.returncode == 0, run.stdout[-3000:]
    tasks = re.findall(r"^TASK \[(.+?)\]", run.stdout, flags=re.M)
    assert set(tasks) == {"End the play here unless gateway_enabled (off by default)"}, run.stdout[-3000:]
    assert not out.exists() and SECRET not in run.stdout + run.stderr
    on = playbook(tmp_path, "--check", gateway_enabled=True, gateway_api_key=SECRET, gateway_config_dir=str(out))
    ran = re.findall(r"^TASK \[(.+?)\]", on.stdout, flags=re.M)
    assert any(task.startswith("gateway : ") for task in ran), on.stdout[-3000:]


def test_explain_names_the_cause_of_a_tool_message_and_writes_nothing(tmp_path):
    """playbooks/explain.yml: Claude Code's login prompt looked up in the catalogue, without a key, a request or a
    file; a message no entry quotes fails and names the smoke."""
    out = tmp_path / "clients"
    run = playbook(tmp_path, playbook_file="playbooks/explain.yml", gateway_config_dir=str(out),
                   gateway_tool_message="Not logged in · Please run /login")  # fmt: skip
    log = " ".join((run.stdout + run.stderr).split())
    assert run.returncode == 0, log[-3000:]
    assert "DIAGNOSIS claude_code_not_logged_in (Claude Code" in log
    assert "claude-code-settings.json" in log and "~/.claude/settings.json" in log
    assert not out.exists()
    unknown = playbook(tmp_path, playbook_file="playbooks/explain.yml", gateway_tool_message="Segmentation fault")
    said = " ".join((unknown.stdout + unknown.stderr).split())
    assert unknown.returncode != 0
    assert "no entry of the diagnosis catalogue quotes this message" in said and "playbooks/gateway.yml" in said
