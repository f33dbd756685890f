"""What the tools show, and the Anthropic API's error form: the diagnosis catalogue's `shows` items (explained by
the gateway_explain module) and the smoke's reading of `{"type": "error", "error": {...}}` answers, sent by an
Anthropic-speaking gateway double on loopback (the bodies as docs.anthropic.com/en/api/errors gives them)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.module_utils.gateway_catalogue import Catalogue, catalogue_errors
from ansible_collections.a800.vllm.plugins.module_utils.gateway_probe import smoke
from ansible_collections.a800.vllm.plugins.module_utils.openai_api import error_info
from conftest import ROOT

DIAGNOSES = yaml.safe_load((ROOT / "roles/gateway/defaults/main/diagnoses.yml").read_text())["gateway_diagnoses"]
SERVED = "glm-5.2-nvfp4"


def explain(message: str) -> list[str]:
    return [e["name"] for e in Catalogue(DIAGNOSES, {"model": SERVED}).explain(message)]


# --- shows: what a tool shows, quoted with its source -----------------------------------------------------------


def test_every_quoted_message_explains_its_own_entry():
    quoted = [(entry["name"], shown) for entry in DIAGNOSES for shown in entry.get("shows") or []]
    assert len(quoted) >= 12
    for name, shown in quoted:
        assert name in explain(shown["text"]), (name, shown["text"])
        assert shown["source"].startswith("https://"), name


@pytest.mark.parametrize(
    ("message", "names"),
    [
        # Claude Code without a token (nothing reached the gateway), as copied from a wrapped terminal
        ("Not logged in · Please run /login", ["claude_code_not_logged_in"]),
        ("Not logged in\n   · Please run /login", ["claude_code_not_logged_in"]),
        ("Select login method:\n \u276f 1. Claude account with subscription", ["claude_code_not_logged_in"]),
        ("Invalid API key · Fix external API key", ["key_wrong"]),
        ('API Error: 401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}',
         ["key_wrong"]),
        # its background model, a Claude id the fleet does not serve, apart from the model id of the settings
        ("There's an issue with the selected model (claude-haiku-4-5-20251001). It may not exist or you may not have "
         "access to it. Run /model to pick a different model.", ["claude_code_background_model"]),
        # the same text for the fleet's own id: an unknown id and an unrouted /v1/messages look alike to Claude Code
        ("There's an issue with the selected model (GLM-5.2-NVFP4). It may not exist",
         ["wrong_model_id", "messages_api_missing"]),
        ("The model `GLM-5.2-NVFP4` does not exist. Valid aliases: glm-5.2-nvfp4.", ["wrong_model_id"]),
        ("API Error: 529 Overloaded. This is a server-side issue, usually temporary", ["overloaded"]),
        ("<html><head><title>413 Request Entity Too Large</title></head>", ["request_too_large"]),
        ("API Error: Invalid URL", ["base_url_invalid"]),
        ("Segmentation fault", []),
    ],
)  # fmt: skip
def test_a_tool_message_names_its_causes_in_catalogue_order(message, names):
    assert explain(message) == names


def test_an_explained_entry_carries_the_fix_with_the_served_name():
    (entry,) = Catalogue(DIAGNOSES, {"model": SERVED}).explain("issue with the selected model (claude-opus-4-1)")
    assert entry["tool"] == "Claude Code" and "ANTHROPIC_DEFAULT_HAIKU_MODEL" in entry["fix"]
    assert f"to {SERVED} in Claude Code's env block" in entry["fix"]


@pytest.mark.parametrize(
    ("shows", "error"),
    [
        ([{"tool": "x", "text": "Boom", "pattern": "(?i)bang", "source": "https://x"}], "does not match its own text"),
        ([{"tool": "x", "text": "Boom", "pattern": "(", "source": "https://x"}], "does not compile"),
        ([{"tool": "x", "text": "Boom", "pattern": "Boom"}], "exactly the keys"),
        ({"tool": "x"}, "must be a list"),
    ],
)
def test_a_shows_item_that_cannot_explain_its_own_text_is_refused(shows, error):
    entry = {"name": "n", "cause": "c", "fix": "f", "shows": shows}
    (found,) = catalogue_errors([entry])
    assert error in found


def test_a_smoke_diagnosis_quotes_what_the_tools_show():
    named = Catalogue(DIAGNOSES, {}).named("key_wrong")
    assert 'what the tools show - Claude Code: "Invalid API key · Fix external API key"' in named["cause"]


# --- the Anthropic API's error form, through the smoke ----------------------------------------------------------

ERRORS = {  # status, error.type, message: docs.anthropic.com/en/api/errors
    "authentication_error": (401, "invalid x-api-key"),
    "permission_error": (403, "Your API key does not have permission to use the specified resource."),
    "not_found_error": (404, "model: GLM-5.2-NVFP4"),
    "request_too_large": (413, "Request exceeds the maximum allowed number of bytes."),
    "rate_limit_error": (429, "Number of request tokens has exceeded your per-minute rate limit"),
    "api_error": (500, "An unexpected error has occurred internal to Anthropic's systems."),
    "overloaded_error": (529, "Overloaded"),
}


def anthropic_error(kind: str) -> tuple[int, bytes]:
    status, message = ERRORS[kind]
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}
    return status, json.dumps(body).encode()


def test_the_anthropic_form_is_read_by_its_error_type():
    status, body = anthropic_error("overloaded_error")
    info = error_info(status, body.decode())
    assert (info["shape"], info["type"], info["message"]) == ("anthropic-error", "overloaded_error", "Overloaded")
    # the OpenAI form keeps its own shape
    assert error_info(404, '{"error": {"message": "x", "type": "NotFoundError"}}')["shape"] == "error-object"


class AnthropicGatewayDouble(BaseHTTPRequestHandler):
    """TEST DOUBLE of a gateway that speaks the Anthropic API: /v1/models and /v1/chat/completions answer as vLLM
    does, /v1/messages answers the error of the class attribute `kind` in the Anthropic form."""

    kind = "overloaded_error"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(200, json.dumps({"object": "list", "data": [{"id": SERVED, "object": "model"}]}).encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("/v1/messages"):
            self._send(*anthropic_error(self.kind))
            return
        message = {"role": "assistant", "content": "408", "reasoning": None}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        self._send(200, json.dumps({"object": "chat.completion", "model": SERVED, "choices": [choice]}).encode())


@pytest.fixture(scope="module")
def anthropic_gateway():
    server = ThreadingHTTPServer(("127.0.0.1", 0), AnthropicGatewayDouble)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("kind", "diagnosis"),
    [
        ("authentication_error", "key_wrong"),
        ("permission_error", "key_wrong"),
        ("not_found_error", "wrong_model_id"),
        ("request_too_large", "request_too_large"),
        ("rate_limit_error", "rate_limited"),
        ("api_error", "server_error"),
        ("overloaded_error", "overloaded"),
    ],
)
def test_an_anthropic_error_of_the_messages_api_is_diagnosed_from_its_type(anthropic_gateway, kind, diagnosis):
    AnthropicGatewayDouble.kind = kind
    key = "sk-anthropic-form-" + "5e1d"
    result = smoke({
        "base_url": anthropic_gateway, "api_key": key, "model": SERVED, "served_model": SERVED,
        "model_mapping": False, "proxy": "", "diagnoses": DIAGNOSES, "probe": True, "prompt": "17 * 24?",
        "expect": "408", "max_tokens": 150, "temperature": 0.6, "timeout_s": 10.0, "validate_certs": True,
    })  # fmt: skip
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["gateway_chat"]["status"] == "pass"
    messages = checks["gateway_messages"]
    assert (messages["status"], messages["diagnosis"]) == ("fail", diagnosis)
    assert f'"type": "{kind}"' in messages["measured"]  # the whole error body, as the tool got it
    assert key not in json.dumps(result)
