"""Filters: the serving image's inputs judged before anything changes (preflight and the image phase's first step).

The image phase runs after the preflight, a possible driver reboot and a prewarm of up to 22 minutes; a patch file
that is missing, a diff that does not parse, a registry image that is not pinned or a tarball that is not the one
reviewed must fail in seconds instead. Each check returns a record (plugins/module_utils/checks.py), named after
the variable it judges, with the fix.

``image_input_checks(ctx)`` reads what the image role's ``preflight.yml`` gathered (read-only):

    source, name, digest                   image_source, image_name, image_digest
    overlay_dir, overlay                   image_overlay_dir; {"exists", "files": [paths relative to it]}
    patch_files                            [{"path", "exists", "isreg", "readable", "text"}] in image_patch_files order
    patch_commit, text_patches             image_patch_commit, image_text_patches
    tarball, tarball_src, tarball_sha256   image_tarball, image_tarball_src, image_tarball_sha256
    tarball_stat                           {"where": host|controller, "exists", "isreg", "readable", "size", "checksum"}
    image_cuda, driver_version             the image on the host ({inspected, name, require_cuda}) and the driver
    patches_required                       image_patches_required: the profile's model needs the sm80 sparse backend
"""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, check
from ansible_collections.a800.vllm.plugins.module_utils.cuda_requirement import image_cuda_driver_check
from ansible_collections.a800.vllm.plugins.module_utils.unified_diff import PatchFormatError, patch_summary
from ansible_collections.a800.vllm.plugins.module_utils.vllm_log import diagnose, split_lines

SOURCES = ("build", "registry", "tarball")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
RECIPE = "docs/sm80-image.md"


def _source_check(ctx: dict) -> dict:
    source = ctx.get("source")
    ok = source in SOURCES
    return check(
        "image_source",
        PASS if ok else FAIL,
        "image_source",
        source,
        " | ".join(SOURCES),
        f"the serving image comes from {source}" if ok else f"image_source is {source!r}",
        "" if ok else "set image_source to build (the patched sm80 image), registry or tarball",
    )


def _patch_files_check(ctx: dict) -> tuple[dict, list[dict]]:
    """One record for image_patch_files, and the summaries of the files that parse."""
    files = ctx.get("patch_files") or []
    problems, summaries = [], []
    names = [PurePosixPath(str(f.get("path", ""))).name for f in files]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        problems.append(f"file names used twice: {', '.join(doubled)} (the image labels name patches by file name)")
    for entry in files:
        path = str(entry.get("path", ""))
        if not entry.get("exists"):
            problems.append(f"{path} does not exist on the controller")
        elif not entry.get("isreg"):
            problems.append(f"{path} is not a regular file")
        elif not entry.get("readable") or entry.get("text") is None:
            problems.append(f"{path} cannot be read on the controller")
        else:
            try:
                summaries.append(patch_summary(entry["text"], PurePosixPath(path).name))
            except PatchFormatError as exc:
                problems.append(str(exc))
    if problems:
        record = check(
            "image_patch_files",
            FAIL,
            "image_patch_files",
            "; ".join(problems),
            "readable unified diffs of the vllm/ tree",
            f"{len(problems)} problem(s) with image_patch_files: " + "; ".join(problems),
            "fix or regenerate the patch files (git diff --no-renames v0.26.0 HEAD -- vllm/, " + RECIPE + ")",
        )
    else:
        hunks = sum(s["hunks"] for s in summaries)
        record = check(
            "image_patch_files",
            PASS,
            "image_patch_files",
            f"{len(summaries)} files, {hunks} hunks",
            "readable unified diffs of the vllm/ tree",
            f"{len(summaries)} patch files, {hunks} hunks over "
            f"{len({f for s in summaries for f in s['files']})} files of the vllm package",
        )
    return record, summaries


def _overlay_check(ctx: dict) -> dict | None:
    where = ctx.get("overlay_dir") or ""
    if not where:
        return None
    overlay = ctx.get("overlay") or {}
    files = [str(f) for f in overlay.get("files") or []]
    stray = [f for f in files if not f.startswith("vllm/")]
    if not overlay.get("exists"):
        problem = f"image_overlay_dir {where} does not exist on the controller"
    elif not files:
        problem = f"image_overlay_dir {where} holds no files on the controller"
    elif stray:
        problem = f"image_overlay_dir {where} has files outside its vllm/ tree: {', '.join(stray[:10])}"
    else:
        return check("image_overlay_dir", PASS, "image_overlay_dir", len(files), "a vllm/ tree", f"{len(files)} files")
    return check(
        "image_overlay_dir",
        FAIL,
        "image_overlay_dir",
        where,
        "a directory with a vllm/ tree",
        problem,
        "point image_overlay_dir at a directory whose vllm/ tree holds whole files to copy over the installed package, "
        "or leave it empty and give the changes as image_patch_files (" + RECIPE + ")",
    )


def _text_patches_check(ctx: dict) -> dict | None:
    patches = ctx.get("text_patches") or []
    if not patches:
        return None
    bad = []
    for number, patch in enumerate(patches, start=1):
        path = str((patch or {}).get("path", ""))
        count = (patch or {}).get("count", 1)
        if (
            not path
            or path.startswith("/")
            or ".." in path.split("/")
            or not (patch or {}).get("search")
            or not isinstance((patch or {}).get("replace"), str)
            or not str(count).isdigit()
            or int(count) < 1
        ):
            bad.append(f"entry {number} ({path or 'no path'})")
    return check(
        "image_text_patches",
        FAIL if bad else PASS,
        "image_text_patches",
        ", ".join(bad) or len(patches),
        "path relative to the vllm package, search non-empty, replace a string, count >= 1",
        f"malformed: {', '.join(bad)}" if bad else f"{len(patches)} text patches",
        "fix those entries of image_text_patches" if bad else "",
    )


def _build_checks(ctx: dict) -> list[dict]:
    checks: list[dict] = []
    patch_files = ctx.get("patch_files") or []
    overlay = _overlay_check(ctx)
    if not patch_files and overlay is None and not ctx.get("patches_required", True):
        # a dense-attention model: the base image serves it as it is, and there is no patch commit to record
        return [
            check(
                "image_patch_files",
                PASS,
                "image_patch_files",
                "none",
                "none needed (dense attention)",
                "no patches: the profile's model uses dense attention (model_profile.architecture.sparse_attention "
                "false), so the base image serves it without the sm80 sparse backend",
            )
        ]
    if not patch_files and overlay is None:
        checks.append(
            check(
                "image_patch_files",
                FAIL,
                "image_patch_files",
                "none",
                "the sm80 backend's patch set",
                "image_source is build, and image_patch_files and image_overlay_dir are both empty: the image would "
                "be the base without the sm80 sparse backend (TRITON_MLA_SPARSE)",
                "set image_patch_files to the unified diffs of the backend against v0.26.0 (" + RECIPE + "), or set "
                "image_source: registry or tarball to use a patched image built elsewhere",
            )
        )
    elif patch_files:
        checks.append(_patch_files_check(ctx)[0])
    if overlay is not None:
        checks.append(overlay)
    commit = ctx.get("patch_commit") or ""
    checks.append(
        check(
            "image_patch_commit",
            PASS if commit else FAIL,
            "image_patch_commit",
            commit or "empty",
            "the commit the patches come from",
            f"patch commit {commit}" if commit else "image_patch_commit is empty",
            ""
            if commit
            else "set image_patch_commit to the commit the patch set was made from (e.g. the head of "
            "vllm PR #47629); it becomes the image label io.a800-vllm.patch-commit",
        )
    )
    text = _text_patches_check(ctx)
    if text is not None:
        checks.append(text)
    return checks


def _registry_check(ctx: dict) -> dict:
    name, digest = str(ctx.get("name") or ""), str(ctx.get("digest") or "")
    pinned = digest or (name.split("@", 1)[1] if "@" in name else "")
    ok = bool(DIGEST.match(pinned))
    return check(
        "image_registry_pin",
        PASS if ok else FAIL,
        "image_digest",
        pinned or "none",
        "sha256:<64 hex digits>",
        f"{name} pinned by {pinned}"
        if ok
        else f"{name} is {'not pinned by a digest' if not pinned else 'pinned by a malformed digest ' + pinned}: a "
        "tag can move between the build and every host's pull",
        ""
        if ok
        else "set bom.vllm_image.digest (image_digest) to the digest the registry serves for the image, as `docker "
        "inspect -f '{{.RepoDigests}}' IMAGE` shows it after the push (" + RECIPE + ")",
    )


def _tarball_check(ctx: dict) -> dict:
    path, src = str(ctx.get("tarball") or ""), str(ctx.get("tarball_src") or "")
    want = str(ctx.get("tarball_sha256") or "").lower().removeprefix("sha256:")
    stat = ctx.get("tarball_stat") or {}
    where = stat.get("where", "host")
    shown = src if where == "controller" else path
    problem, fix = "", ""
    if not path.startswith("/"):
        problem = f'image_tarball is "{path}", not an absolute path on the host'
        fix = "set image_tarball to where the docker save archive is (or is to be copied) on the host"
    elif not SHA256.match(want):
        problem = "image_tarball_sha256 is " + (f"malformed ({want})" if want else "empty")
        fix = f"set image_tarball_sha256 to the archive's sha256 (sha256sum {shown}, where it was saved)"
    elif not stat.get("exists"):
        problem = f"{shown} does not exist on the {where}"
        fix = (
            "copy the docker save archive there, or set image_tarball_src to its path on the controller"
            if where == "host"
            else "put the archive at image_tarball_src on the controller"
        )
    elif not stat.get("isreg") or not stat.get("readable"):
        problem = f"{shown} on the {where} is not a readable file"
        fix = "make it a readable regular file"
    elif not stat.get("checksum"):
        problem = f"the sha256 of {shown} on the {where} could not be read"
        fix = "make the archive readable for the connecting user (become), then run again"
    elif stat["checksum"] != want:
        problem = f"{shown} has sha256 {stat['checksum']}, image_tarball_sha256 is {want}: not the archive reviewed"
        fix = "copy the archive again (an incomplete or other file), or set image_tarball_sha256 to the new archive's"
    if problem:
        return check("image_tarball", FAIL, "image_tarball", shown, f"sha256 {want or '?'}", problem, fix)
    return check(
        "image_tarball",
        PASS,
        "image_tarball",
        shown,
        f"sha256 {want}",
        f"{shown} on the {where}, {float(stat.get('size') or 0) / 1e9:.1f} GB, sha256 matches",
    )


def image_input_checks(ctx: dict) -> list[dict[str, Any]]:
    """The records of the image's inputs (see the module docstring)."""
    checks = [_source_check(ctx)]
    source = ctx.get("source")
    if source == "build":
        checks += _build_checks(ctx)
    elif source == "registry":
        checks.append(_registry_check(ctx))
    elif source == "tarball":
        checks.append(_tarball_check(ctx))
    image = ctx.get("image_cuda")
    if image and image.get("inspected"):
        checks.append(image_cuda_driver_check(image, ctx.get("driver_version")))
    return checks


def image_patch_manifest(patch_files: list[dict], base_digest: str) -> dict[str, Any]:
    """The build context's patches/manifest.json: each patch file in order, by file name and sha256, and the base
    image's digest (named in a failing hunk's message)."""
    entries = []
    for number, entry in enumerate(patch_files, start=1):
        summary = patch_summary(entry["text"], PurePosixPath(entry["path"]).name)
        entries.append(
            {"name": summary["name"], "file": f"{number:04d}-{summary['name']}", "sha256": summary["sha256"]}
        )
    return {"base_digest": base_digest, "patches": entries}


def image_patch_label(manifest: dict) -> str:
    """The label io.a800-vllm.patch-files: the patch files in the order applied, as JSON [{name, sha256}]."""
    return json.dumps([{"name": p["name"], "sha256": p["sha256"]} for p in manifest.get("patches", [])])


def image_self_check_diagnosis(output: str, catalogue: list[dict]) -> list[dict[str, Any]]:
    """The error catalogue's entries that the failed lines of a self-check (or a failed build's output) match:
    {name, cause, fix}, the primary first. Only the failed lines are read, so that a check that passed and
    mentions a name (TRITON_MLA_SPARSE) never diagnoses anything."""
    failed = [line for line in split_lines(output or "") if "FAILED" in line or "Error" in line]
    return [{k: d[k] for k in ("name", "cause", "fix")} for d in diagnose(failed, catalogue or [])]


def docker_images_inspected(result: dict[str, Any] | None, strict: bool = False) -> list[dict[str, Any]]:
    """The images a `docker image inspect NAME` run (a command of a800.vllm.host_read: rc, stdout, stderr) found, as
    community.docker.docker_image_info lists them (the Engine API's inspect, which the CLI prints): [] where there is
    no such image. Another failure (no engine answering, no docker) is [] too, for a read that may find no Docker yet
    (the preflight); with `strict`, where the engine must answer (the build), it is an error naming docker's own."""
    result = result or {}
    if result.get("rc") == 0:
        try:
            found = json.loads(result.get("stdout") or "[]")
        except ValueError as err:
            raise AnsibleFilterError(f"docker image inspect printed no JSON: {err}") from err
        return [image for image in found if isinstance(image, dict)] if isinstance(found, list) else []
    stderr = str(result.get("stderr") or "")
    if "no such image" in stderr.lower() or "no such object" in stderr.lower() or not strict:
        return []
    raise AnsibleFilterError(f"docker image inspect failed (rc {result.get('rc')}): {stderr.strip()}")


class FilterModule:
    def filters(self) -> dict:
        return {
            "image_input_checks": image_input_checks,
            "image_patch_manifest": image_patch_manifest,
            "image_patch_label": image_patch_label,
            "image_self_check_diagnosis": image_self_check_diagnosis,
            "docker_images_inspected": docker_images_inspected,
        }
