"""The evidence site.yml leaves on the control node: reports/<host>/verify.json and report.md, every check passing but
the one warning the article's launch earns (kv_capacity: 64k-token requests, 16 at once, in a KV cache that holds
fewer than 3 of them), and the start's ledger, which may warn about the page cache."""

import json
import os
from datetime import datetime
from pathlib import Path

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])


def test_verify_json_all_pass_but_the_kv_capacity_warning(host):
    report = json.loads((ROOT / "reports" / host.backend.get_hostname() / "verify.json").read_text())
    assert report["summary"]["ok"] is True
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    # start_ledger: the double loads its weights at the article's ~6 min (the budget) from a hot page cache, and CI's
    # memory pressure evicts some of them; so it may warn, and then for model loading alone
    ledger = next(c for c in report["checks"] if c["name"] == "start_ledger")
    page_cache_only = ledger["fix"].startswith("model loading (weights): the weights in the page cache") and (
        "CUDA graph capture" not in ledger["fix"]
    )
    assert ledger["status"] == "pass" or (ledger["status"] == "warn" and page_cache_only), ledger
    others = {name: status for name, status in statuses.items() if status != "pass" and name != "start_ledger"}
    assert others == {"kv_capacity": "warn"}, statuses
    kv = next(c for c in report["checks"] if c["name"] == "kv_capacity")
    assert "fewer than max_num_seqs 16" in kv["detail"] and "max_num_seqs to 2" in kv["fix"]
    for name in ("log:sparse_backend_in_use", "log:no_dense_fallback", "answer_17x24", "chat_short_prompt",
                 "chat_long_prompt", "tool_call_auto", "stream", "mtp_acceptance"):  # fmt: skip
        assert name in statuses


def test_the_start_ledger_is_a800_shaped(host):
    """Where the double's start went, from the lines it logs as the engine does, with its simulated A800 seconds:
    model loading, torch.compile (70 s on a first start, 18 s with the graphs an earlier one left in the compile
    cache the serve role mounts), the engine's profiling and KV cache, CUDA graph capture (29 sizes for 16 requests
    of 6 tokens a step: 60.5 s + 0.5 s each), the API server (no P2P check on 8 PCIe GPUs); the report shows the
    table."""
    folder = ROOT / "reports" / host.backend.get_hostname()
    ledger = json.loads((folder / "verify.json").read_text())["ledger"]
    phases = [p["phase"] for p in ledger["phases"]]
    assert phases == ["model_loading", "torch_compile", "kv_cache", "cuda_graphs", "api_server"], ledger
    figures = {p["phase"]: p["s"] for p in ledger["phases"]}
    assert figures["torch_compile"] in (70.0, 18.0) and figures["cuda_graphs"] == 75.0, figures
    assert figures["kv_cache"] > 0, figures
    assert ledger["ready"] is True and ledger["total_s"] > 0 and ledger["started_at"], ledger
    text = (folder / "report.md").read_text()
    assert "## Start: where its" in text and "| CUDA graph capture | " in text, text


def test_report_md_has_the_verdict_and_the_table(host):
    text = (ROOT / "reports" / host.backend.get_hostname() / "report.md").read_text()
    assert text.startswith("# glm-5.2-nvfp4 on ") and ": PASS" in text.splitlines()[0]
    assert "| pass | `answer_17x24` | 408 |" in text


def test_bench_judged_every_figure_of_the_article(host):
    """Each of the article's figures was measured and judged against its band; the verdicts depend on how fast
    the CI machine ran the simulated host, so they are printed, not asserted (the judge's own rules are unit-tested
    in tests/unit/test_bench.py; `make bench` compares the speeds)."""
    folder = ROOT / "reports" / host.backend.get_hostname()
    document = json.loads((folder / "bench.json").read_text())
    bench, bands = document["bench"], document["baselines"]
    checks = {c["name"]: c for c in bench["checks"]}
    expected = {f"decode_tok_s@{n}": bands["decode_tok_s"][f"concurrency_{n}"] for n in (1, 4, 16)}
    expected |= {f"ttft_s@{n}": bands["ttft_s"]["range"] for n in (80, 960)}
    for name, band in expected.items():
        check = checks.get(name)
        assert check and check["expected"] == band and check["status"] in ("pass", "warn", "fail"), bench["checks"]
        assert isinstance(check["measured"], (int, float)), check  # measured, not "not measured"
        print(f"\nBENCH molecule default bench: {check['status'].upper()} {check['detail']}")
    assert checks["requests"]["status"] == "pass", checks["requests"]  # every request of every scenario completed
    assert (folder / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Benchmark against the article" in (folder / "report.md").read_text()


def test_idempotence_did_not_restart_the_server(host):
    """last-good.json is written when the first start became ready and not rewritten by an unchanged run: the
    container started before it, so the idempotence run did not re-create it."""
    good = host.file("/etc/a800-vllm/glm52-nvfp4/last-good.json").mtime.timestamp()
    started = host.check_output("docker inspect -f '{{.State.StartedAt}}' glm52-nvfp4")
    assert datetime.fromisoformat(started[:26].rstrip("Z") + "+00:00").timestamp() < good
    assert host.check_output("docker inspect -f '{{.RestartCount}}' glm52-nvfp4") == "0"
