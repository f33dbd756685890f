"""Grafana loads the provisioned dashboards: the files the monitoring role writes (its tasks/dashboards.yml, run for
real by tests/monitoring/grafana.yml) held to the rules of Grafana's own provisioning readers, reproduced here from
Grafana's source (docs/monitoring.md, "Grafana's provisioning readers", cites each rule's file).

This is not a running Grafana (none can be installed on these machines): it is Grafana's reader logic for the
provisioning files and the dashboard JSON, each rule with a case that breaks it. Where Grafana only logs a broken
file and goes on without it, the contract refuses it: a dashboard Grafana skipped is a dashboard nobody sees.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "roles" / "monitoring" / "files" / "dashboards"

# pkg/util/shortid_generator.go: IsValidShortUID, IsShortUIDTooLong (both dashboards and data sources).
SHORT_UID = re.compile(r"^[a-zA-Z0-9\-_]*$")
MAX_UID = 40


class Refused(Exception):
    """What Grafana would refuse, or skip with only a line in its log."""


# --- Grafana's readers, reproduced ----------------------------------------------------------------------------------


def provisioning_files(directory: Path) -> list[Path]:
    """config_reader.go: os.ReadDir (sorted by name), only *.yaml and *.yml."""
    return sorted(p for p in directory.iterdir() if p.name.endswith((".yaml", ".yml")))


def api_version_1(path: Path) -> dict:
    """config_reader.go: a file whose apiVersion is not an integer above 0 is read as version 0, a bare list (and a
    non-integer apiVersion is silently taken as 0): the project writes version 1 only."""
    doc = yaml.safe_load(path.read_text())
    version = doc.get("apiVersion") if isinstance(doc, dict) else None
    if type(version) is not int or version < 1:
        raise Refused(f"{path.name}: apiVersion {version!r}: Grafana reads it as the deprecated version 0 (a list)")
    return doc


def short_uid(what: str, uid: str) -> None:
    """shortid_generator.go (IsShortUIDTooLong: len > 40; IsValidShortUID: ^[a-zA-Z0-9\\-\\_]*$); the dashboards'
    messages are dashboards/errors.go's ErrDashboardUidTooLong and ErrDashboardInvalidUid."""
    if len(uid) > MAX_UID:
        raise Refused(f"{what}: uid {uid!r}: uid too long, max 40 characters")
    if not SHORT_UID.match(uid):
        raise Refused(f"{what}: uid {uid!r}: uid contains illegal characters")


def read_dashboard_providers(directory: Path) -> list[dict]:
    """config_reader.go (readConfig, parseConfigs), types.go (mapToDashboardsAsConfig), dashboard.go
    (getFileReaders), file_reader.go (NewDashboardFileReader)."""
    providers: list[dict] = []
    for path in provisioning_files(directory):
        for provider in api_version_1(path).get("providers") or []:
            name = provider.get("name", "")
            if any(p["name"] == name for p in providers):
                raise Refused(f"{path.name}: dashboard name {name!r} is not unique")
            kind = provider.get("type") or "file"
            if kind != "file":
                raise Refused(f"{path.name}: provider {name!r}: type {kind} is not supported")
            options = provider.get("options") or {}
            where = options.get("path", options.get("folder"))
            if not isinstance(where, str):
                raise Refused(f"{path.name}: provider {name!r}: failed to load dashboards, path param is not a string")
            from_files = options.get("foldersFromFilesStructure") is True
            if from_files and provider.get("folder") and provider.get("folderUid"):
                raise Refused(
                    f"{path.name}: provider {name!r}: 'folder' and 'folderUID' should be empty using "
                    "'foldersFromFilesStructure' option"
                )
            providers.append(
                {"name": name, "path": where, "folder": provider.get("folder", ""), "from_files": from_files}
            )
    return providers


def dashboard_files(root: Path) -> list[Path]:
    """file_reader.go (createWalkFn, validateWalkablePath): every *.json below the path, folders named .* skipped."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        found += [Path(folder) / f for f in sorted(files) if f.endswith(".json")]
    return found


def load_dashboards(providers: list[dict]) -> list[dict]:
    """file_reader.go (walkDisk, readDashboardFromFile, saveDashboard), types.go (createDashboardJSON: the title),
    validator.go (uids and titles used twice), dashboard.go (Provision: a missing path is only a warning)."""
    dashboards: list[dict] = []
    for provider in providers:
        root = Path(provider["path"])
        if not root.is_absolute():
            raise Refused(f"provider {provider['name']!r}: path {root} is relative to Grafana's working directory")
        if not root.exists():
            raise Refused(
                f"provider {provider['name']!r}: path {root} does not exist: Grafana logs 'Failed to provision "
                "config' and provisions no dashboard"
            )
        if not root.is_dir():
            raise Refused(f"provider {provider['name']!r}: path {root} is not a directory")
        files = dashboard_files(root)
        if not files:
            raise Refused(f"provider {provider['name']!r}: no *.json dashboard in {root}")
        for path in files:
            try:
                data = json.loads(path.read_text())
            except ValueError as err:
                raise Refused(f"{path.name}: failed to load dashboard: {err}") from err
            title, uid = data.get("title"), data.get("uid")
            if not isinstance(title, str) or not title:
                raise Refused(f"{path.name}: Dashboard title cannot be empty")
            if not isinstance(uid, str) or not uid:
                # Grafana would give it a random uid: the report's link /d/<uid> would lead nowhere.
                raise Refused(f"{path.name}: no uid")
            short_uid(path.name, uid)
            folder = provider["folder"]
            if provider["from_files"]:
                folder = "" if path.parent == root else path.parent.name
            dashboards.append({"file": path, "uid": uid, "title": title, "folder": folder, "json": data})
    for uid, times in Counter(d["uid"] for d in dashboards).items():
        if times > 1:
            raise Refused(f"the same uid is used more than once: {uid!r}")
    for (title, folder), times in Counter((d["title"], d["folder"]) for d in dashboards).items():
        if times > 1:
            raise Refused(f"dashboard title is not unique in folder: {title!r} in {folder!r}")
    return dashboards


def read_datasources(directory: Path) -> list[dict]:
    """datasources/config_reader.go (readConfig, validateDefaultUniqueness, validateAccessAndOrgID),
    datasources/datasources.go (ErrInvalidConfigToManyDefault), datasources/service/store.go (AddDataSource: the
    name and uid unique in the organisation, util.ValidateUID; no uid: a random one)."""
    sources: list[dict] = []
    defaults: Counter = Counter()
    for path in provisioning_files(directory):
        for ds in api_version_1(path).get("datasources") or []:
            name, uid, org = ds.get("name", ""), ds.get("uid", ""), ds.get("orgId") or 1
            if not name or not ds.get("type"):
                raise Refused(f"{path.name}: a data source needs a name and a type: {ds!r}")
            access = ds.get("access") or "proxy"
            if access not in ("proxy", "direct"):
                raise Refused(f"{path.name}: {name!r}: invalid access value {access!r} (Grafana uses 'proxy' instead)")
            if ds.get("isDefault") is True:
                defaults[org] += 1
                if defaults[org] > 1:
                    raise Refused(
                        "datasource.yaml config is invalid. Only one datasource per organization can be marked "
                        "as default"
                    )
            if not isinstance(uid, str) or not uid:
                raise Refused(
                    f"{path.name}: {name!r}: no uid: Grafana gives it a random one the dashboards cannot name"
                )
            short_uid(f"{path.name}: {name!r}", uid)
            if any(s["org"] == org and (s["name"] == name or s["uid"] == uid) for s in sources):
                raise Refused(f"{path.name}: {name!r}: a data source with the same name or uid already exists")
            sources.append({"name": name, "uid": uid, "type": ds["type"], "org": org})
    return sources


def datasource_refs(dashboard: dict):
    """Every data source a dashboard names: each panel's (rows' panels too), each query's, each variable's."""
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "datasource":
            yield f"variable {variable.get('name')}", variable.get("datasource")
    panels = list(dashboard.get("panels", []))
    while panels:
        panel = panels.pop(0)
        panels += panel.get("panels", [])
        where = f"panel {panel.get('title')!r}"
        if panel.get("type") != "row" or "datasource" in panel:
            yield where, panel.get("datasource")
        for target in panel.get("targets", []):
            yield f"{where} query {target.get('refId')}", target.get("datasource")


def check_references(dashboard: dict, sources: list[dict]) -> int:
    """Each reference {type, uid} names a provisioned data source of that type; a uid `${name}`/`$name` is a
    variable of type datasource whose query is the plugin type and whose current value is a provisioned uid."""
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", []) if v.get("type") == "datasource"}
    for name, variable in variables.items():
        current = (variable.get("current") or {}).get("value")
        if not any(s["uid"] == current and s["type"] == variable.get("query") for s in sources):
            raise Refused(f"variable {name}: current {current!r} is no provisioned {variable.get('query')} data source")
    count = 0
    for where, ref in datasource_refs(dashboard):
        if not isinstance(ref, dict) or not ref.get("uid"):
            raise Refused(f"{where}: datasource {ref!r}: name it by {{type, uid}}")
        uid = ref["uid"]
        var = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
        if var:
            variable = variables.get(var.group(1) or var.group(2))
            if variable is None:
                raise Refused(f"{where}: {uid} is no data source variable")
            uid = variable["current"]["value"]
        source = next((s for s in sources if s["uid"] == uid), None)
        if source is None:
            raise Refused(f"{where}: data source uid {uid!r} is not provisioned")
        if ref.get("type") not in (None, source["type"]):
            raise Refused(f"{where}: data source {uid!r} is a {source['type']}, not a {ref.get('type')}")
        count += 1
    return count


def grafana_loads(provisioning: Path) -> dict:
    """Grafana's provisioning at startup, for its provisioning directory: data sources, then dashboards."""
    sources = read_datasources(provisioning / "datasources")
    dashboards = load_dashboards(read_dashboard_providers(provisioning / "dashboards"))
    refs = {d["uid"]: check_references(d["json"], sources) for d in dashboards}
    return {"datasources": sources, "dashboards": dashboards, "refs": refs}


# --- the role's files -----------------------------------------------------------------------------------------------


def install(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(ROOT / "inventories" / "prod"),
         str(ROOT / "tests" / "monitoring" / "grafana.yml"), "-e", json.dumps({"monitoring_render_dir": str(out)})],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The role's dashboard tasks, run into an empty directory (Grafana's provisioning directory below it), with a
    dashboards directory whose name YAML would cut at ' #' if the provisioning file did not quote it."""
    out = tmp_path_factory.mktemp("grafana") / "site #1"
    out.mkdir()
    result = install(out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture
def tree(installed, tmp_path) -> Path:
    """A copy of the installed tree to break, its provider's path moved along with it."""
    copy = tmp_path / "site"
    shutil.copytree(installed, copy)
    for provider_file in (copy / "provisioning" / "dashboards").iterdir():
        provider_file.write_text(provider_file.read_text().replace(str(installed), str(copy)))
    return copy


def test_grafana_loads_every_dashboard_the_role_installs_with_its_data_source(installed):
    loaded = grafana_loads(installed / "provisioning")
    assert [d["file"].name for d in loaded["dashboards"]] == sorted(p.name for p in DASHBOARDS.glob("*.json"))
    assert all(d["folder"] == "A800 vLLM" for d in loaded["dashboards"])
    assert [(s["uid"], s["type"]) for s in loaded["datasources"]] == [("a800-prometheus", "prometheus")]
    panels = json.loads((DASHBOARDS / "a800-vllm.json").read_text())["panels"]
    # every panel and every query of it, and the host variable, name the data source
    assert loaded["refs"]["a800-vllm"] == len(panels) + sum(len(p["targets"]) for p in panels) + 1


def edit_yaml(path: Path, change) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc))


def provider(tree: Path) -> Path:
    return tree / "provisioning" / "dashboards" / "a800-vllm.yml"


def source(tree: Path) -> Path:
    return tree / "provisioning" / "datasources" / "a800-prometheus.yml"


def dashboard(tree: Path) -> Path:
    return tree / "dashboards" / "a800-vllm.json"


def edit_dashboard(tree: Path, change) -> None:
    doc = json.loads(dashboard(tree).read_text())
    change(doc)
    dashboard(tree).write_text(json.dumps(doc))


def second_provider(tree: Path) -> None:
    other = tree / "provisioning" / "dashboards" / "other.yaml"
    shutil.copy(provider(tree), other)


def path_to_a_file(tree: Path) -> None:
    edit_yaml(provider(tree), lambda d: d["providers"][0]["options"].update(path=str(dashboard(tree))))


def second_dashboard_same_uid(tree: Path) -> None:
    doc = json.loads(dashboard(tree).read_text())
    doc["title"] = "another title"
    (tree / "dashboards" / "copy.json").write_text(json.dumps(doc))


def second_default(tree: Path) -> None:
    def change(doc):
        second = dict(doc["datasources"][0], name="second", uid="second", isDefault=True)
        doc["datasources"][0]["isDefault"] = True
        doc["datasources"].append(second)

    edit_yaml(source(tree), change)


BREAKS = {
    "no apiVersion": (lambda t: edit_yaml(provider(t), lambda d: d.pop("apiVersion")), "deprecated version 0"),
    "apiVersion a string": (lambda t: edit_yaml(provider(t), lambda d: d.update(apiVersion="1")), "version 0"),
    "data sources' apiVersion 0": (lambda t: edit_yaml(source(t), lambda d: d.update(apiVersion=0)), "version 0"),
    "a provider name twice": (second_provider, "dashboard name 'a800-vllm' is not unique"),
    "a provider type": (
        lambda t: edit_yaml(provider(t), lambda d: d["providers"][0].update(type="sql")),
        "type sql is not supported",
    ),
    "no path": (
        lambda t: edit_yaml(provider(t), lambda d: d["providers"][0].update(options={})),
        "path param is not a string",
    ),
    "a path that does not exist": (lambda t: shutil.rmtree(t / "dashboards"), "provisions no dashboard"),
    "a path to a file": (path_to_a_file, "is not a directory"),
    "a relative path": (
        lambda t: edit_yaml(provider(t), lambda d: d["providers"][0]["options"].update(path="dashboards")),
        "relative to Grafana's working directory",
    ),
    "no dashboard in the path": (lambda t: dashboard(t).rename(dashboard(t).with_suffix(".txt")), "no \\*.json"),
    "folders from files with folder and folderUid": (
        lambda t: edit_yaml(
            provider(t),
            lambda d: (
                d["providers"][0].update(folderUid="a800"),
                d["providers"][0]["options"].update(foldersFromFilesStructure=True),
            ),
        ),
        "should be empty using 'foldersFromFilesStructure'",
    ),
    "a dashboard that is not JSON": (lambda t: dashboard(t).write_text("{"), "failed to load dashboard"),
    "no title": (lambda t: edit_dashboard(t, lambda d: d.update(title="")), "Dashboard title cannot be empty"),
    "a uid of 41 characters": (lambda t: edit_dashboard(t, lambda d: d.update(uid="a" * 41)), "max 40 characters"),
    "a uid with a slash": (lambda t: edit_dashboard(t, lambda d: d.update(uid="a800/vllm")), "illegal characters"),
    "no dashboard uid": (lambda t: edit_dashboard(t, lambda d: d.pop("uid")), "no uid"),
    "a dashboard uid twice": (second_dashboard_same_uid, "the same uid is used more than once"),
    "two default data sources": (second_default, "Only one datasource per organization can be marked as default"),
    "no data source uid": (lambda t: edit_yaml(source(t), lambda d: d["datasources"][0].pop("uid")), "no uid"),
    "a data source uid of 41 characters": (
        lambda t: edit_yaml(source(t), lambda d: d["datasources"][0].update(uid="p" * 41)),
        "max 40 characters",
    ),
    "a data source access": (
        lambda t: edit_yaml(source(t), lambda d: d["datasources"][0].update(access="browser")),
        "invalid access value",
    ),
    "a panel naming a data source not provisioned": (
        lambda t: edit_dashboard(t, lambda d: d["panels"][3]["targets"][0]["datasource"].update(uid="loki-1")),
        "'loki-1' is not provisioned",
    ),
    "a panel naming the data source by another type": (
        lambda t: edit_dashboard(t, lambda d: d["panels"][0]["datasource"].update(type="loki")),
        "is a prometheus, not a loki",
    ),
    "a panel without a data source": (
        lambda t: edit_dashboard(t, lambda d: d["panels"][1].pop("datasource")),
        "name it by",
    ),
    "the data source variable's current value": (
        lambda t: edit_dashboard(t, lambda d: d["templating"]["list"][0]["current"].update(value="gone")),
        "'gone' is no provisioned prometheus",
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_what_grafana_would_refuse_or_skip_is_refused(tree, case):
    grafana_loads(tree / "provisioning")  # the copy itself loads
    breaks, message = BREAKS[case]
    breaks(tree)
    with pytest.raises(Refused, match=message):
        grafana_loads(tree / "provisioning")


def test_a_uid_of_40_characters_and_a_hidden_folder_are_grafanas_to_accept(tree):
    edit_dashboard(tree, lambda d: d.update(uid="a" * 40))
    (tree / "dashboards" / ".git").mkdir()
    (tree / "dashboards" / ".git" / "broken.json").write_text("{")
    assert [d["uid"] for d in grafana_loads(tree / "provisioning")["dashboards"]] == ["a" * 40]
