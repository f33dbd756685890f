"""The benchmark: the project's streaming client (plugins/module_utils/bench_client.py) against scripted HTTP servers
and the vLLM test double, its statistics against a real `vllm bench serve` result file, the judge against the
article's baselines (plugins/module_utils/bench_judge.py), and the vllm_bench module (plugins/modules/vllm_bench.py)
with both tools. Fast: the double runs at speed factor 50; the comparisons with a real vLLM are in
tests/contract/test_bench_contract.py."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.module_utils import bench_client, bench_judge
from conftest import FIXTURES, ROOT, ansible_adhoc

MODEL = "glm-5.2-nvfp4"
BENCH_FIXTURES = FIXTURES / "bench"
DETAILED = json.loads((BENCH_FIXTURES / "vllm-0.32.0-openai-chat-c4-detailed.json").read_text())
PLAIN = json.loads((BENCH_FIXTURES / "vllm-0.32.0-openai-chat-c1.json").read_text())
BASELINES = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"][
    "baselines"
]


def max_overlap(records: list[dict]) -> int:
    """The most requests in flight at once, from their start and end times."""
    events = sorted(
        [(r["start_s"], 1) for r in records] + [(r["start_s"] + r["e2el_s"], -1) for r in records],
        key=lambda e: (e[0], e[1]),
    )
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


# --- statistics: vLLM's definitions, checked on vLLM's own numbers ------------------------------------------------
def outputs_of(document: dict) -> list[dict]:
    """The per-request lists of a --save-detailed file as bench_client outputs."""
    return [
        {
            "success": True,
            "ttft": document["ttfts"][i],
            "latency": document["latencies"][i],
            "itl": document["itls"][i],
            "output_tokens": document["output_lens"][i],
            "input_tokens": document["input_lens"][i],
        }
        for i in range(len(document["ttfts"]))
    ]


STATS = ("mean", "median", "std", "p50", "p90", "p99")


def test_summarize_reproduces_every_figure_of_a_real_vllm_bench_serve_result():
    result = bench_client.summarize(outputs_of(DETAILED), DETAILED["duration"])
    keys = [f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in STATS]
    keys += ["completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput"]
    keys += ["output_throughput", "total_token_throughput"]
    assert len(keys) == 31
    for key in keys:
        assert result[key] == pytest.approx(DETAILED[key], rel=1e-9), key


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [([], 50, 0.0), ([3.0], 99, 3.0), ([1.0, 2.0, 3.0, 4.0], 50, 2.5), ([4.0, 1.0, 3.0, 2.0], 90, 3.7)],
)
def test_percentile_interpolates_linearly(values, p, expected):
    assert bench_client.percentile(values, p) == pytest.approx(expected)


def test_tpot_leaves_out_requests_with_one_token():
    outputs = [
        {"success": True, "ttft": 0.1, "latency": 1.1, "itl": [], "output_tokens": 11, "input_tokens": 5},
        {"success": True, "ttft": 0.2, "latency": 0.2, "itl": [], "output_tokens": 1, "input_tokens": 5},
        {"success": False, "error": "HTTP 500"},
    ]
    result = bench_client.summarize(outputs, 2.0)
    assert result["mean_tpot_ms"] == pytest.approx(100.0)
    assert result["mean_ttft_ms"] == pytest.approx(150.0)
    assert (result["completed"], result["failed"], result["total_output_tokens"]) == (2, 1, 12)
    assert result["output_throughput"] == pytest.approx(6.0)


# --- parsing vllm bench serve's result files ----------------------------------------------------------------------
def test_parse_a_detailed_result_file():
    result = bench_judge.parse_vllm_result(DETAILED, prompt_tokens=80, max_tokens=32)
    assert result["tool"] == "vllm" and result["backend"] == "openai-chat"
    assert (result["max_concurrency"], result["num_prompts"], result["completed"], result["failed"]) == (4, 12, 12, 0)
    assert result["mean_ttft_ms"] == DETAILED["mean_ttft_ms"] and result["p99_e2el_ms"] == DETAILED["p99_e2el_ms"]
    assert result["errors"] == [] and result["mean_input_tokens"] == pytest.approx(1050 / 12)
    requests = result["requests"]
    assert len(requests) == 12 and all(r["success"] and r["output_tokens"] == 32 for r in requests)
    assert min(r["start_s"] for r in requests) == 0.0
    tpots = [r["tpot_s"] for r in requests]
    assert sum(tpots) / len(tpots) * 1000 == pytest.approx(DETAILED["mean_tpot_ms"])
    assert max_overlap(requests) == 4
    # decode throughput from the requests' decode spans: near 4 streams / mean TPOT, never above what was produced
    assert result["decode_throughput"] == pytest.approx(4000 / DETAILED["mean_tpot_ms"], rel=0.25)
    assert 12 * 31 / DETAILED["duration"] < result["decode_throughput"]


def test_parse_a_plain_result_file_falls_back_to_tpot():
    result = bench_judge.parse_vllm_result(PLAIN, prompt_tokens=240, max_tokens=16)
    assert "requests" not in result
    assert result["max_concurrency"] == 1 and result["completed"] == 4
    assert result["decode_throughput"] == pytest.approx(1000 / PLAIN["mean_tpot_ms"])
    assert result["mean_input_tokens"] == pytest.approx(PLAIN["total_input_tokens"] / 4)


def test_parse_keeps_the_errors_of_failed_requests():
    document = dict(DETAILED, completed=11, failed=1)
    document["errors"] = ["", "Traceback ...: ClientConnectorError"] + [""] * 10
    document["output_lens"] = [32, 0] + [32] * 10
    result = bench_judge.parse_vllm_result(document)
    assert result["errors"] == ["Traceback ...: ClientConnectorError"]
    assert result["requests"][1] == {"success": False, "error": "Traceback ...: ClientConnectorError"}


# --- decode throughput --------------------------------------------------------------------------------------------
def record(start: float, ttft: float, e2el: float, tokens: int) -> dict:
    return {"success": True, "start_s": start, "ttft_s": ttft, "e2el_s": e2el, "output_tokens": tokens}


def test_decode_throughput_counts_time_when_requests_decode():
    # one stream, two requests back to back: 1 / TPOT, the prefills left out
    one = {"max_concurrency": 1, "completed": 2, "requests": [record(0, 0.2, 1.2, 81), record(1.2, 0.2, 1.2, 81)]}
    assert bench_judge.decode_throughput(one) == pytest.approx(80.0)


def test_decode_throughput_is_not_fooled_by_a_server_that_runs_fewer_streams_than_asked():
    # 32 asked, the server batches 16: two waves of 16 streams at 24 tok/s each, one after the other
    waves = [record(0, 0.2, 10.2, 241) for _ in range(16)] + [record(0, 10.4, 20.4, 241) for _ in range(16)]
    result = {"max_concurrency": 32, "completed": 32, "mean_tpot_ms": 1000 / 24, "requests": waves}
    assert bench_judge.decode_throughput(result) == pytest.approx(16 * 24.0)
    del result["requests"]  # without per-request times: streams / TPOT, which assumes they all decode together
    assert bench_judge.decode_throughput(result) == pytest.approx(32 * 24.0)


def test_decode_throughput_without_decoding():
    assert bench_judge.decode_throughput({"completed": 0, "mean_tpot_ms": 0}) is None
    assert bench_judge.decode_throughput({"completed": 1, "requests": [record(0, 0.1, 0.1, 1)]}) is None


# --- the judge ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("measured", "status", "note"),
    [
        (80.0, "pass", "inside the band"),
        (90.0, "pass", "above the article's band"),
        (70.0, "pass", "within the 10 % tolerance"),
        (66.6, "pass", "within the 10 % tolerance"),
        (62.0, "warn", "below the band by more than 10 %"),
        (59.0, "fail", "below the band by more than 20 %"),
        (None, "fail", "not measured"),
    ],
)
def test_throughput_bands(measured, status, note):
    check = bench_judge.judge_higher("decode_tok_s@1", measured, [74, 85], 10, "tok/s", "decode")
    assert check["status"] == status and note in check["detail"]
    assert check["expected"] == [74, 85] and check["limits"] == {"pass": 66.6, "warn": 59.2}


@pytest.mark.parametrize(
    ("measured", "status", "note"),
    [
        (0.1, "pass", "faster than the article's band"),
        (0.3, "pass", "inside the band"),
        (0.55, "pass", "within the 10 % tolerance"),
        (0.58, "warn", "slower than the band by more than 10 %"),
        (0.7, "fail", "slower than the band by more than 20 %"),
    ],
)
def test_latency_bands(measured, status, note):
    check = bench_judge.judge_lower("ttft_s@80", measured, [0.2, 0.5], 10, "s", "mean TTFT")
    assert check["status"] == status and note in check["detail"]
    assert check["limits"] == {"pass": 0.55, "warn": 0.6}


def test_tolerance_is_configurable():
    assert bench_judge.judge_higher("x", 73, [74, 85], 0, "tok/s", "x")["status"] == "fail"
    assert bench_judge.judge_higher("x", 60, [74, 85], 25, "tok/s", "x")["status"] == "pass"
    assert bench_judge.judge_lower("x", 0.7, [0.2, 0.5], 25, "s", "x")["status"] == "warn"


def result_of(concurrency: int, prompt: int, tok_s: float, ttft_s: float, completed: int | None = None) -> dict:
    n = concurrency if completed is None else completed
    return {
        "max_concurrency": concurrency,
        "num_prompts": concurrency,
        "completed": n,
        "failed": concurrency - n,
        "prompt_tokens": prompt,
        "mean_tpot_ms": concurrency * 1000 / tok_s,
        "mean_ttft_ms": ttft_s * 1000,
        "p90_ttft_ms": ttft_s * 1100,
        "output_throughput": tok_s * 0.95,
        "total_input_tokens": n * prompt,
        "errors": [] if n == concurrency else ["HTTP 400: context too long"],
    }


def test_judge_a_run_against_the_article():
    scenarios = {
        "concurrency": [
            result_of(1, 128, 79.0, 0.2),
            result_of(4, 128, 150.0, 0.3),
            result_of(8, 128, 300, 0.3),
            result_of(16, 128, 300.0, 0.4),
        ],
        "ttft": [result_of(1, 80, 80, 0.21), result_of(1, 960, 80, 0.62), result_of(1, 2048, 80, 0.9)],
        "long_context": result_of(4, 32768, 170.0, 2.5),
    }
    checks = bench_judge.judge(scenarios, BASELINES, 10, gpu_utilization_pct=95.0)
    by_name = {c["name"]: c for c in checks}
    assert list(by_name) == [
        "decode_tok_s@1",
        "decode_tok_s@4",
        "decode_tok_s@16",  # no band for 8 streams: not judged
        "ttft_s@80",
        "ttft_s@960",  # 2048 tokens is outside the article's 80-960: not judged
        "long_context@4x32768",
        "gpu_utilization_pct",
        "requests",
    ]
    statuses = {name: c["status"] for name, c in by_name.items()}
    assert statuses == {
        "decode_tok_s@1": "pass",
        "decode_tok_s@4": "pass",  # 150 >= 160 x 0.9 = 144
        "decode_tok_s@16": "fail",  # 300 < 386 x 0.8
        "ttft_s@80": "pass",
        "ttft_s@960": "fail",  # 0.62 > 0.5 x 1.2
        "long_context@4x32768": "pass",
        "gpu_utilization_pct": "pass",
        "requests": "pass",
    }
    assert "output throughput incl. prefill 75.0 tok/s" in by_name["decode_tok_s@1"]["detail"]
    assert "p90 0.682 s" in by_name["ttft_s@960"]["detail"]
    assert by_name["long_context@4x32768"]["detail"].startswith("4/4 requests of 32768 prompt tokens completed")
    lines = bench_judge.summary_lines(checks)
    assert lines[0].startswith("PASS decode_tok_s@1: decode throughput at 1 concurrent: 79.0 tok/s")
    assert lines[-1] == "bench fail: 6 pass, 0 warn, 2 fail"


def test_failed_requests_fail_the_bench():
    scenarios = {"concurrency": [result_of(4, 128, 180, 0.3)], "ttft": [], "long_context": result_of(4, 32768, 1, 1, 2)}
    checks = {c["name"]: c for c in bench_judge.judge(scenarios, BASELINES)}
    assert checks["long_context@4x32768"]["status"] == "fail"
    assert checks["long_context@4x32768"]["measured"] == 2 and checks["long_context@4x32768"]["expected"] == [4, 4]
    assert checks["requests"]["status"] == "fail"
    assert checks["requests"]["detail"] == (
        "6/8 requests completed; failures at concurrency 4 x 32768 prompt tokens; "
        "first error: HTTP 400: context too long"
    )
    assert bench_judge.worst(list(checks.values())) == "fail"


def test_long_context_bands_when_the_baselines_have_them():
    bands = dict(BASELINES, long_context={"decode_tok_s": [160, 196], "ttft_s": [1, 3]})
    checks = bench_judge.judge({"long_context": result_of(4, 32768, 100.0, 2.5)}, bands)
    assert [(c["name"], c["status"]) for c in checks] == [
        ("long_context@4x32768", "pass"),
        ("long_context_decode_tok_s", "fail"),
        ("long_context_ttft_s", "pass"),
        ("requests", "pass"),
    ]


def test_worst_and_empty():
    assert bench_judge.worst([]) == "pass"
    assert bench_judge.worst([{"status": "pass"}, {"status": "warn"}]) == "warn"


# --- client: URLs, prompts, SSE -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("http://127.0.0.1:8001", ("http", "127.0.0.1", 8001, "/v1/chat/completions")),
        ("https://taotoken.net/api", ("https", "taotoken.net", 443, "/api/v1/chat/completions")),
        ("https://taotoken.net/api/v1/", ("https", "taotoken.net", 443, "/api/v1/chat/completions")),
        ("http://gpu1/", ("http", "gpu1", 80, "/v1/chat/completions")),
    ],
)
def test_chat_url(base, expected):
    assert bench_client.chat_url(base) == expected


def test_chat_url_rejects_what_is_not_http():
    with pytest.raises(ValueError, match="base_url must be"):
        bench_client.chat_url("127.0.0.1:8001")


def test_synthetic_prompts_count_as_asked_on_the_double_and_differ_from_the_first_word():
    prompts = [bench_client.synthetic_prompt(960, seed) for seed in range(8)]
    assert {(len(p) + 3) // 4 for p in prompts} == {960}  # the double: one token per 4 characters
    assert len({p.split()[0] + p.split()[1] + p.split()[2] for p in prompts}) == 8
    assert len(bench_client.synthetic_prompt(960, 0, tokens_per_word=2.5).split()) == 384


def test_request_body_fixed_length():
    body = bench_client.request_body(MODEL, "hi", 64)
    assert body["ignore_eos"] is True and body["max_tokens"] == 64 and "min_tokens" not in body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert bench_client.request_body(MODEL, "hi", 64, min_tokens=True)["min_tokens"] == 64
    assert "ignore_eos" not in bench_client.request_body(MODEL, "hi", 64, fixed_length=False)


def test_sse_messages_across_reads():
    buffer = bytearray()
    assert bench_client.sse_messages(buffer, b'data: {"a": 1}\r\n\r') == []  # the CR before an LF still to come
    assert bench_client.sse_messages(buffer, b'\ndata: {"b"') == ['{"a": 1}']
    assert bench_client.sse_messages(buffer, b": 2}\n\n: ping\n\nevent: x\ndata: [DONE]\r\rdata: 3\n\n") == [
        '{"b": 2}',
        "[DONE]",
        "3",
    ]
    assert buffer == bytearray()


# --- client against scripted HTTP servers -------------------------------------------------------------------------
def sse(*events: dict | str) -> bytes:
    return (
        b"".join((e if isinstance(e, str) else json.dumps(e)).join(["data: ", "\r\n\r\n"]).encode() for e in events)
        + b": keep-alive\r\n\r\n"
    )


def delta(**fields) -> dict:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


class Scripted(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
        self.server.peers.add(self.client_address[1])
        getattr(self, "play_" + self.server.mode)()

    def head(self, status: int, **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()

    def play_chunked(self) -> None:  # no usage chunk: tokens are counted; 7-byte HTTP chunks cut the events
        self.head(200, Content_Type="text/event-stream", Transfer_Encoding="chunked")
        stream = sse(delta(role="assistant", content=""), delta(reasoning="r"), delta(content="a"))
        stream += sse(delta(content="b"), {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, "[DONE]")
        for i in range(0, len(stream), 7):
            part = stream[i : i + 7]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def play_dropping(self) -> None:  # closes the kept-alive connection after the answer, without saying so
        self.play_chunked()
        self.close_connection = True

    def play_close(self) -> None:  # body delimited by the end of the connection
        self.head(200, Content_Type="text/event-stream", Connection="close")
        usage = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}}
        self.wfile.write(sse(delta(role="assistant"), delta(content="abc"), usage, "[DONE]"))
        self.close_connection = True

    def play_unauthorized(self) -> None:
        text = b'{"error": "Unauthorized"}'
        self.head(401, Content_Type="application/json", Content_Length=str(len(text)))
        self.wfile.write(text)

    def play_no_choices(self) -> None:
        stream = sse({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 0}}, "[DONE]")
        self.head(200, Content_Type="text/event-stream", Content_Length=str(len(stream)))
        self.wfile.write(stream)

    def play_slow(self) -> None:  # answers only once the test lets it (30 s at most, against a hang)
        self.server.release.wait(30)
        self.play_chunked()


@pytest.fixture
def scripted():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    server.daemon_threads = True
    server.seen, server.peers, server.mode, server.release = [], set(), "chunked", threading.Event()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def test_chunked_stream_without_usage_is_counted_on_one_keep_alive_connection(scripted):
    result = bench_client.run_load(scripted.url + "/v1", MODEL, "sk-key", 1, 3, 16, 8, timeout_s=10)
    assert result["completed"] == 3 and result["failed"] == 0 and result["errors"] == []
    assert result["usage_reported"] is False and result["malformed_events"] == 0
    assert [r["output_tokens"] for r in result["requests"]] == [3, 3, 3]  # reasoning, a, b (role chunk carries none)
    assert [r["chunks"] for r in result["requests"]] == [5, 5, 5]
    assert all(r["finish_reason"] == "length" for r in result["requests"])
    assert len(scripted.peers) == 1  # one connection for the three requests
    seen = scripted.seen[0]
    assert seen["path"] == "/v1/chat/completions" and seen["headers"]["Authorization"] == "Bearer sk-key"
    assert seen["body"]["ignore_eos"] is True and seen["body"]["model"] == MODEL


def test_connection_close_bodies_and_usage(scripted):
    scripted.mode = "close"
    result = bench_client.run_load(scripted.url, MODEL, None, 1, 2, 16, 8, timeout_s=10)
    assert result["completed"] == 2 and result["usage_reported"] is True
    assert result["total_output_tokens"] == 10 and result["total_input_tokens"] == 18
    assert len(scripted.peers) == 2  # a new connection after each close
    assert "Authorization" not in scripted.seen[0]["headers"]


def test_a_kept_alive_connection_closed_by_the_server_is_replaced(scripted):
    scripted.mode = "dropping"
    result = bench_client.run_load(scripted.url, MODEL, None, 1, 3, 16, 8, timeout_s=10)
    assert result["completed"] == 3 and result["errors"] == []
    assert len(scripted.peers) == 3


def test_error_status_is_a_failed_request(scripted):
    scripted.mode = "unauthorized"
    result = bench_client.run_load(scripted.url, MODEL, "wrong", 2, 2, 16, 8, timeout_s=10)
    assert result["completed"] == 0 and result["failed"] == 2
    assert result["errors"] == ['HTTP 401: {"error": "Unauthorized"}'] * 2
    assert result["requests"][0] == {"success": False, "error": 'HTTP 401: {"error": "Unauthorized"}'}


def test_a_stream_without_choices_cannot_be_timed(scripted):
    scripted.mode = "no_choices"
    result = bench_client.run_load(scripted.url, MODEL, None, 1, 1, 16, 8, timeout_s=10)
    assert result["failed"] == 1 and result["errors"] == ["no streamed chunk with choices (cannot measure TTFT)"]


def test_timeout_and_refused_connection(scripted):
    scripted.mode = "slow"  # no answer until the client has given up, however slow the machine
    result = bench_client.run_load(scripted.url, MODEL, None, 1, 1, 16, 8, timeout_s=0.2)
    scripted.release.set()
    assert result["errors"] == ["timed out after 0.2 s"]
    closed = bench_client.run_load("http://127.0.0.1:9", MODEL, None, 1, 1, 16, 8, timeout_s=5)
    assert closed["failed"] == 1 and "ConnectionRefusedError" in closed["errors"][0]


# --- client against the vLLM test double --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def double(tmp_path_factory, installs, weights):
    from harness import Launcher

    launcher = Launcher(tmp_path_factory.mktemp("bench-double"), installs, weights)
    run = launcher.start(env={"VLLM_TEST_DOUBLE_SPEED": "50"})
    assert "Application startup complete." in run.log, run.log
    yield run
    launcher.stop_all()


def test_run_load_against_the_double(double):
    result = bench_judge.annotate(bench_client.run_load(double.url, MODEL, None, 4, 8, 80, 32))
    assert (result["completed"], result["failed"], result["usage_reported"]) == (8, 0, True)
    assert result["total_output_tokens"] == 8 * 32 and result["total_input_tokens"] == 8 * 84  # + the template's 4
    assert result["output_throughput"] == pytest.approx(result["total_output_tokens"] / result["duration"])
    requests = result["requests"]
    assert max_overlap(requests) == 4  # never more than the concurrency, and reached
    assert all(r["ttft_s"] >= 0.2 / 50 for r in requests)  # the double's prefill of 80 tokens at speed 50
    assert all(r["tpot_s"] == pytest.approx((r["e2el_s"] - r["ttft_s"]) / 31) for r in requests)
    assert result["decode_throughput"] > 0 and result["mean_input_tokens"] == 84
    print(
        f"\nBENCH bench_client on the double (speed 50, 4 streams): decode {result['decode_throughput']:.0f} tok/s "
        f"(model 180 x 50 = 9000), mean TTFT {result['mean_ttft_ms']:.1f} ms (model 4.0)"
    )


def test_calibrate_on_the_double(double):
    calibration = bench_client.calibrate(double.url, MODEL)
    assert calibration["tokens_per_word"] == 1.0 and calibration["template_tokens"] == 4
    assert calibration["probes"] == [{"words": 64, "prompt_tokens": 68}, {"words": 512, "prompt_tokens": 516}]


def test_unknown_model_and_natural_length(double):
    wrong = bench_client.run_load(double.url, "no-such-model", None, 2, 2, 8, 4)
    assert wrong["failed"] == 2 and wrong["errors"][0].startswith("HTTP 404: ")
    assert "The model `no-such-model` does not exist." in wrong["errors"][0]
    natural = bench_client.run_load(double.url, MODEL, None, 2, 2, 8, 500, fixed_length=False)
    tokens = [r["output_tokens"] for r in natural["requests"]]
    assert tokens[0] == tokens[1] < 500  # the reply's own length


# --- the vllm_bench module ----------------------------------------------------------------------------------------
from ansible_collections.a800.vllm.plugins.modules import vllm_bench  # noqa: E402


def run_main(args: dict, capsys) -> tuple[int, dict]:
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        vllm_bench.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


SMALL = {
    "concurrency": [1, 4],
    "ttft_prompt_tokens": [80, 2048],
    "long_context": {"concurrency": 2, "prompt_tokens": 4096, "max_tokens": 8},
}


def test_module_with_the_client_against_the_double(double, tmp_path, capsys):
    args = {"base_url": double.url, "model": MODEL, "scenarios": SMALL, "output_tokens": 32, "ttft_requests": 2}
    args |= {"docker": str(tmp_path / "no-docker"), "baselines": BASELINES, "gpu_sampling": False}
    code, out = run_main(args, capsys)
    assert code == 0 and out["changed"] is False, out
    bench = out["bench"]
    assert bench["tool"] == "client" and bench["tool_reason"].endswith("; using the project's client")
    assert bench["calibration"]["tokens_per_word"] == 1.0
    scenarios = bench["scenarios"]
    assert [(r["max_concurrency"], r["num_prompts"], r["completed"]) for r in scenarios["concurrency"]] == [
        (1, 2, 2),
        (4, 8, 8),
    ]
    assert [r["mean_input_tokens"] for r in scenarios["ttft"]] == [84, 2052]
    assert scenarios["long_context"]["mean_input_tokens"] == 4100 and scenarios["long_context"]["completed"] == 2
    checks = {c["name"]: c for c in bench["checks"]}
    assert list(checks) == ["decode_tok_s@1", "decode_tok_s@4", "ttft_s@80", "long_context@2x4096", "requests"]
    assert checks["long_context@2x4096"]["status"] == "pass" and checks["requests"]["status"] == "pass"  # counts
    # the speeds are this machine's: each check judges its scenario's own figure against the article's band (the
    # verdicts themselves: test_throughput_bands, test_latency_bands), and is printed, not asserted
    for result in scenarios["concurrency"]:
        check = checks[f"decode_tok_s@{result['max_concurrency']}"]
        assert check["measured"] == round(result["decode_throughput"], 3) and check["unit"] == "tok/s"
        assert check["expected"] == BASELINES["decode_tok_s"][f"concurrency_{result['max_concurrency']}"]
    assert checks["ttft_s@80"]["measured"] == round(scenarios["ttft"][0]["mean_ttft_ms"] / 1000, 3)
    assert checks["ttft_s@80"]["expected"] == BASELINES["ttft_s"]["range"]
    assert bench["status"] == bench_judge.worst(bench["checks"])
    assert bench["summary"] == bench_judge.summary_lines(bench["checks"])
    for check in bench["checks"][:3]:
        print(f"\nBENCH vllm_bench module on the double (speed 50): {check['status'].upper()} {check['detail']}")


FAKE_DOCKER = """#!{python}
import json, os, pathlib, shutil, sys
root = pathlib.Path({root!r})
args = sys.argv[1:]
with (root / "calls.log").open("a") as calls:
    calls.write(json.dumps(args) + "\\n")
i = 1
while args[i] == "-e":
    i += 2
cmd = args[i + 1:]
if cmd[:3] == ["vllm", "bench", "serve"]:
    if "--help" in cmd:
        if (root / "no-bench").exists():
            sys.stderr.write("OCI runtime exec failed: exec: vllm: executable file not found in $PATH\\n")
            sys.exit(126)
        print("usage: vllm bench serve [options]")
        sys.exit(0)
    (root / "key.txt").write_text(os.environ.get("OPENAI_API_KEY", ""))
    directory = pathlib.Path(cmd[cmd.index("--result-dir") + 1])
    directory.mkdir(parents=True)
    fixture = {fixtures!r}[cmd[cmd.index("--max-concurrency") + 1]]
    shutil.copy(fixture, directory / cmd[cmd.index("--result-filename") + 1])
elif cmd[0] == "cat":
    sys.stdout.write(pathlib.Path(cmd[1]).read_text())
elif cmd[:2] == ["rm", "-rf"]:
    shutil.rmtree(cmd[2], ignore_errors=True)
"""


@pytest.fixture
def docker(tmp_path):
    path = tmp_path / "docker"
    fixtures = {
        "4": str(BENCH_FIXTURES / "vllm-0.32.0-openai-chat-c4-detailed.json"),
        "1": str(BENCH_FIXTURES / "vllm-0.32.0-openai-chat-c1.json"),
    }
    path.write_text(FAKE_DOCKER.format(python=sys.executable, root=str(tmp_path), fixtures=fixtures))
    path.chmod(0o755)
    return path


def test_module_with_vllm_bench_serve_in_the_container(docker, tmp_path, capsys):
    scenarios = {"concurrency": [4], "ttft_prompt_tokens": [240], "long_context": {"enabled": False}}
    args = {"base_url": "http://127.0.0.1:8001", "model": MODEL, "api_key": "sk-bench-secret", "docker": str(docker)}
    args |= {"scenarios": scenarios, "output_tokens": 32, "tokenizer": "/models/GLM-5.2-NVFP4", "baselines": BASELINES}
    code, out = run_main(args | {"gpu_sampling": False, "ttft_requests": 4}, capsys)
    assert code == 0, out
    bench = out["bench"]
    assert bench["tool"] == "vllm" and bench["calibration"] is None
    assert bench["tool_reason"] == "`vllm bench serve` is available in container glm52-nvfp4"
    level = bench["scenarios"]["concurrency"][0]
    expected = bench_judge.parse_vllm_result(DETAILED, prompt_tokens=128, max_tokens=32)
    assert level["decode_throughput"] == pytest.approx(expected["decode_throughput"])
    assert level["mean_tpot_ms"] == DETAILED["mean_tpot_ms"] and len(level["requests"]) == 12
    assert [(c["name"], c["status"]) for c in bench["checks"]] == [
        ("decode_tok_s@4", "pass"),
        ("ttft_s@240", "pass"),
        ("requests", "pass"),
    ]
    calls = [json.loads(line) for line in (tmp_path / "calls.log").read_text().splitlines()]
    runs = [c for c in calls if "--random-input-len" in c]
    assert len(runs) == 2
    first = runs[0]
    assert first[:5] == ["exec", "-e", "OPENAI_API_KEY", "glm52-nvfp4", "vllm"]
    flags = {first[i]: first[i + 1] for i in range(5, len(first) - 1)}
    assert flags["--base-url"] == "http://127.0.0.1:8001" and flags["--model"] == MODEL
    assert flags["--tokenizer"] == "/models/GLM-5.2-NVFP4" and flags["--backend"] == "openai-chat"
    assert (flags["--max-concurrency"], flags["--num-prompts"]) == ("4", "8")
    assert (flags["--random-input-len"], flags["--random-output-len"]) == ("128", "32")
    assert "--ignore-eos" in first and "--save-detailed" in first
    second = {runs[1][i]: runs[1][i + 1] for i in range(5, len(runs[1]) - 1)}
    assert (second["--max-concurrency"], second["--num-prompts"], second["--random-input-len"]) == ("1", "4", "240")
    assert flags["--seed"] != second["--seed"]  # other prompts: no prefix-cache hits across scenarios
    assert (tmp_path / "key.txt").read_text() == "sk-bench-secret"  # through the environment only
    assert not any("sk-bench-secret" in arg for call in calls for arg in call)
    assert any(c[-3:-1] == ["rm", "-rf"] for c in calls)


def test_tool_vllm_fails_when_the_image_has_no_bench(docker, tmp_path, capsys):
    (tmp_path / "no-bench").touch()
    code, out = run_main({"model": MODEL, "tool": "vllm", "docker": str(docker), "tokenizer": "/m"}, capsys)
    assert code == 1 and out["failed"] is True
    assert out["msg"] == (
        "tool=vllm: `vllm bench serve --help` in glm52-nvfp4 exited 126: "
        "OCI runtime exec failed: exec: vllm: executable file not found in $PATH"
    )


def test_check_mode_sends_nothing(capsys):
    code, out = run_main({"model": MODEL, "base_url": "http://127.0.0.1:9", "_ansible_check_mode": True}, capsys)
    assert code == 0 and out["skipped"] is True and out["changed"] is False
    assert out["bench"] == {"tool": "none", "skipped": True, "checks": [], "status": "pass", "summary": []}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"scenarios": {"concurrency": [0]}}, "concurrency levels, prompt and output token counts"),
        ({"tolerance_pct": -1}, "tolerance_pct must not be negative"),
        ({"base_url": "127.0.0.1:8001"}, "base_url must start with http:// or https://"),
        ({"tool": "guidellm"}, "value of tool must be one of: auto, client, vllm"),
    ],
)
def test_invalid_options(args, message, capsys):
    code, out = run_main({"model": MODEL, **args}, capsys)
    assert code == 1 and message in out["msg"]


def test_gpu_sampler(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\nprint('95\\n93')\n")
    smi.chmod(0o755)
    sampler = vllm_bench.GpuSampler(str(smi), interval=0.02)
    sampler.start()
    deadline = time.monotonic() + 120  # a bound for a loaded machine: a sample comes within one nvidia-smi run
    while not sampler.samples:
        if time.monotonic() > deadline:
            sampler.stop()
            pytest.fail("the sampler took no sample in 120 s")
        time.sleep(0.02)
    gpu = sampler.stop()
    assert gpu["mean_pct"] == 94.0 and gpu["per_gpu_mean_pct"] == [95.0, 93.0] and gpu["samples"] >= 1


def test_module_runs_under_ansible(double):
    args = {"base_url": double.url, "model": MODEL, "api_key": "sk-never-logged", "tool": "client"}
    args |= {"scenarios": {"concurrency": [2], "ttft_prompt_tokens": [], "long_context": {"enabled": False}}}
    args |= {"output_tokens": 8, "baselines": {"decode_tok_s": {"concurrency_2": [1, 2]}}, "gpu_sampling": False}
    rc, out, raw = ansible_adhoc(
        "localhost", "-c", "local", "-i", "localhost,", "-m", "a800.vllm.vllm_bench", "-a", json.dumps(args)
    )
    assert rc == 0 and out, raw
    host = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert host["changed"] is False, host
    checks = host["bench"]["checks"]
    assert [c["name"] for c in checks] == ["decode_tok_s@2", "requests"], checks
    assert checks[1]["status"] == "pass"  # both requests completed; the speed's verdict is this machine's
    assert host["bench"]["status"] == bench_judge.worst(checks)
    print(f"\nBENCH vllm_bench under Ansible on the double (speed 50): {checks[0]['status']} {checks[0]['detail']}")
    assert "sk-never-logged" not in raw


def test_bench_files_are_stdlib_only():
    """The module_utils run on the GPU hosts, where python3 is all there is (and the collection's own checks)."""
    allowed = {"__future__", "asyncio", "json", "math", "random", "ssl", "time", "urllib", "collections", "typing"}
    for name in ("bench_client.py", "bench_judge.py"):
        text = (ROOT / "plugins" / "module_utils" / name).read_text()
        modules = [line.split()[1] for line in text.splitlines() if line.startswith(("import ", "from "))]
        own = "ansible_collections.a800.vllm.plugins.module_utils."  # the collection's own, stdlib-only too
        imports = {m.split(".")[0] for m in modules if not m.startswith(own)}
        assert imports <= allowed, (name, imports - allowed)
