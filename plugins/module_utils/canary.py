"""A canary upgrade of a serving fleet: the plan (which host changes, in what order, against which old release),
and the verdict on the canary (promote or roll back), from figures measured in the same run.

The plan is read from the serve phase's own decision on every host (roles/serve, decide.yml: whether the server
restarts, why, and what differs), taken read-only and all at once:

    canary      the first host, in inventory order (or `canary`), whose server restarts: it gets the new release first
    baseline    the next such host: still on the old release while the canary is judged, it takes the same load; a
                fleet where only one host changes has none, and the canary is then judged against its own figures
                taken before it restarted
    batches     the other restarting hosts, one batch at a time, after the canary was promoted
    unchanged   the hosts whose server keeps running (nothing to upgrade)
    kept_images what the rollback needs on disk: where the new release runs another image, the old one stays on every
                restarting host (a rollback runs it by ID, and nothing here removes it), its size each and in all

The verdict has two parts, both required to promote:

    correctness the canary's verification (roles/verify: the log markers, the smoke answers, the tool calls, the
                stream) has no failed check, and its benchmark no failed request: one failure rolls back, named;
    speed       on the same load, the canary's mean TTFT is at most `max_ttft_ratio` x the old release's and its
                decode throughput at least `min_decode_ratio` x (docs/fleet.md#canary-upgrades says why the
                defaults are 1.3 and 0.9).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL

PROMOTE, ROLL_BACK = "promote", "roll back"
# Same load, same run, same hardware: decode throughput is steady (the article's bands are +-7 %), TTFT less so (it
# waits in the queue behind other prefills); a release 2x slower to its first token, the case to catch, is far out.
DEFAULT_RULES = {"max_ttft_ratio": 1.3, "min_decode_ratio": 0.9}
# The verification's checks whose failure means the new release answers wrongly (the rest judge the host).
CORRECTNESS_PREFIXES = ("log:", "answer_", "chat_", "tool_call", "stream", "mtp_acceptance")


def upgrade_plan(
    decisions: Mapping[str, Mapping[str, Any]],
    order: Iterable[str],
    canary: str | None = None,
    images: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict:
    """The plan of an upgrade. `decisions`: host -> the serve decision (`restarts`, `why`, `differences`); `order`:
    the hosts in inventory order; `canary`: a host to take first instead of the first that restarts; `images`: host ->
    `old` (the image of the launch it runs), `new` (the release's image) and `old_bytes` (the old image's size)."""
    hosts = [h for h in order if h in decisions]
    restarting = [h for h in hosts if decisions[h].get("restarts")]
    if canary and canary not in restarting:
        state = "is not a server of this run" if canary not in decisions else "keeps running (nothing to upgrade)"
        raise ValueError(f"canary {canary!r} {state}: name one of {', '.join(restarting) or 'no host'}")
    if canary:
        restarting.remove(canary)
        restarting.insert(0, canary)
    first = restarting[0] if restarting else None
    baseline = restarting[1] if len(restarting) > 1 else None
    plan = {
        "canary": first,
        "baseline": baseline,
        "batches": [[h] for h in restarting[1:]],
        "unchanged": [h for h in hosts if h not in restarting],
    }
    plan["kept_images"] = kept_images(images or {}, restarting)
    plan["lines"] = plan_lines(plan, decisions)
    return plan


def plan_lines(plan: Mapping[str, Any], decisions: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The plan as a person reads it, before anything changes."""
    if not plan["canary"]:
        return ["nothing to upgrade: every server runs its launch already" + _hosts(plan["unchanged"])]
    lines = [f"1. canary {plan['canary']}: {decisions[plan['canary']].get('why') or 'the launch changed'}"]
    lines += [f"     - {d}" for d in decisions[plan["canary"]].get("differences") or []]
    lines.append(
        f"   out of the router and the gateway, drained, restarted, verified, back in, then benchmarked beside "
        f"{plan['baseline']} (still on the old release) on the same load"
        if plan["baseline"]
        else "   out of the router and the gateway, drained, restarted, verified, back in, then benchmarked against "
        "its own figures from before the restart (no other host changes)"
    )
    for step, (host,) in enumerate(plan["batches"], 2):
        lines.append(
            f"{step}. {host}, once the canary is promoted: {decisions[host].get('why') or 'the launch changed'}"
        )
    lines.append(
        "on a failed verdict the canary leaves the fleet again, rolls back (its last known-good launch, the old image "
        "by ID) and rejoins; "
        "no other host changes"
    )
    kept = plan["kept_images"]
    if kept["hosts"]:
        lines.append(
            f"the old image stays on {len(kept['hosts'])} server(s) until the fleet is promoted, and after (nothing "
            f"here removes it): {_gb(kept['bytes'])} in all ("
            + ", ".join(f"{h} {kept['hosts'][h]['image'][:19]} {_gb(kept['hosts'][h]['bytes'])}" for h in kept["hosts"])
            + ")"
        )
    elif plan["canary"]:
        lines.append("the release runs the image the servers run now: no old image to keep")
    if plan["unchanged"]:
        lines.append("unchanged:" + _hosts(plan["unchanged"]))
    return lines


def kept_images(images: Mapping[str, Mapping[str, Any]], restarting: Iterable[str]) -> dict:
    """The old images a rollback needs, on the hosts that restart onto another image: host -> image and bytes, and
    the bytes in all (a size not read counts 0)."""
    hosts = {}
    for host in restarting:
        image = images.get(host) or {}
        old, new = str(image.get("old") or ""), str(image.get("new") or "")
        if old and old != new:
            hosts[host] = {"image": old, "bytes": int(image.get("old_bytes") or 0)}
    return {"hosts": hosts, "bytes": sum(h["bytes"] for h in hosts.values())}


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB"


def _hosts(hosts: list[str]) -> str:
    return (" " + ", ".join(hosts)) if hosts else ""


def _ratio(new: Any, old: Any) -> float | None:
    try:
        new, old = float(new), float(old)
    except (TypeError, ValueError):
        return None
    return round(new / old, 3) if old > 0 else None


def canary_verdict(
    checks: Iterable[Mapping[str, Any]],
    canary_bench: Mapping[str, Any],
    baseline_bench: Mapping[str, Any],
    rules: Mapping[str, Any] | None = None,
) -> dict:
    """Promote or roll back. `checks`: the canary's verification checks; the benches: results in bench_judge's shape
    (`mean_ttft_ms`, `decode_throughput`, `completed`, `failed`), the same load on each. Every reason is named."""
    rules = {**DEFAULT_RULES, **(rules or {})}
    reasons = [
        f"{c['name']} failed on the canary: {c.get('detail') or c.get('measured')}"
        for c in checks
        if c.get("status") == FAIL and str(c.get("name", "")).startswith(CORRECTNESS_PREFIXES)
    ]
    failed = int(canary_bench.get("failed") or 0)
    if failed:
        reasons.append(f"{failed} of the canary's {failed + int(canary_bench.get('completed') or 0)} requests failed")
    # A release that failed its own checks is not measured (it takes no request): its figures are not reasons too.
    unmeasured = bool(reasons) and not any(
        canary_bench.get(k) is not None for k in ("mean_ttft_ms", "decode_throughput")
    )
    rows = []
    for label, key, limit, worse in (
        ("mean TTFT (ms)", "mean_ttft_ms", float(rules["max_ttft_ratio"]), "above"),
        ("decode throughput (tok/s)", "decode_throughput", float(rules["min_decode_ratio"]), "below"),
    ):
        ratio = _ratio(canary_bench.get(key), baseline_bench.get(key))
        ok = None if unmeasured else ratio is not None and (ratio <= limit if worse == "above" else ratio >= limit)
        rows.append({"figure": label, "canary": canary_bench.get(key), "old release": baseline_bench.get(key),
                     "ratio": ratio, "limit": f"{'<=' if worse == 'above' else '>='} {limit:g}", "ok": ok})  # fmt: skip
        if unmeasured:
            continue
        if ratio is None:
            reasons.append(f"{label}: no figure to compare (canary {canary_bench.get(key)!r}, "
                           f"old release {baseline_bench.get(key)!r})")  # fmt: skip
        elif not ok:
            reasons.append(f"{label} {ratio:g}x the old release's, {worse} the limit {limit:g}x")
    return {"decision": ROLL_BACK if reasons else PROMOTE, "reasons": reasons, "rows": rows, "rules": rules}


def canary_figures(bench: Mapping[str, Any]) -> dict:
    """A vllm_bench result (its `scenarios`) as the verdict reads it: the mean TTFT over the TTFT runs (ms), the
    decode throughput of the highest concurrency run, and the requests completed and failed in all of them."""
    scenarios = bench.get("scenarios") or {}
    runs = [r for key in ("concurrency", "ttft") for r in scenarios.get(key) or [] if r]
    ttfts = [float(r["mean_ttft_ms"]) for r in scenarios.get("ttft") or [] if r and r.get("mean_ttft_ms") is not None]
    decode = [r for r in scenarios.get("concurrency") or [] if r and r.get("decode_throughput") is not None]
    top = max(decode, key=lambda r: int(r.get("max_concurrency") or 0), default=None)
    return {
        "mean_ttft_ms": round(sum(ttfts) / len(ttfts), 1) if ttfts else None,
        "decode_throughput": round(float(top["decode_throughput"]), 1) if top else None,
        "completed": sum(int(r.get("completed") or 0) for r in runs),
        "failed": sum(int(r.get("failed") or 0) for r in runs),
    }


def verdict_lines(verdict: Mapping[str, Any]) -> list[str]:
    """The verdict as the report shows it: the decision and why, then one line a figure."""
    head = verdict["decision"] + (": " + "; ".join(verdict["reasons"]) if verdict["reasons"] else ": every check held")
    state = {None: "not measured (it failed its checks)", True: "ok", False: "FAIL"}
    figures = [
        f"  {r['figure']}: canary {r['canary']}, old release {r['old release']}, ratio {r['ratio']} "
        f"(limit {r['limit']}) {state[r['ok']]}"
        for r in verdict["rows"]
    ]
    return [head, *figures]
