"""The gateway's diagnosis catalogue (roles/gateway/defaults/main/diagnoses.yml): entries checked, matched against
what a request saw, their texts filled in with the run's values."""

from __future__ import annotations

import re
from typing import Any

MATCH_KEYS = {"check", "status", "key", "shape", "via", "local", "url", "body", "exception"}


REGEX_KEYS = {"url", "body", "exception"}


PLACEHOLDER = re.compile(r"\{(\w+)\}")


class Catalogue:
    """The diagnosis catalogue: matching of failed exchanges, lookup by name, placeholders in cause and fix."""

    def __init__(self, entries: list[dict[str, Any]], values: dict[str, str]) -> None:
        self.entries = entries
        self.values = values

    def render(self, text: str) -> str:
        return PLACEHOLDER.sub(lambda m: str(self.values.get(m.group(1), m.group(0))), text or "")

    def named(self, name: str) -> dict[str, str]:
        for entry in self.entries:
            if entry.get("name") == name:
                return {"name": name, "cause": self.render(entry["cause"]), "fix": self.render(entry["fix"])}
        return {"name": name, "cause": f"({name}: no entry in the diagnosis catalogue)", "fix": ""}

    @staticmethod
    def _matches(alt: dict[str, Any], event: dict[str, Any]) -> bool:
        for key, want in alt.items():
            have = event.get(key)
            if key in REGEX_KEYS:
                if have is None or not re.search(want, str(have)):
                    return False
            elif key == "local":
                if bool(have) != bool(want):
                    return False
            elif have not in (want if isinstance(want, list) else [want]):
                return False
        return True

    def diagnose(self, event: dict[str, Any]) -> dict[str, str]:
        for entry in self.entries:
            if any(self._matches(alt, event) for alt in entry.get("match") or []):
                return self.named(entry["name"])
        return {
            "name": "unknown",
            "cause": "no entry of the diagnosis catalogue matches this answer",
            "fix": "read the whole body in `measured`; add an entry to gateway_diagnoses when the cause is found",
        }


def catalogue_errors(entries: list[dict[str, Any]]) -> list[str]:
    errors = []
    for index, entry in enumerate(entries):
        where = f"diagnoses[{index}] ({entry.get('name', '?')})"
        missing = [k for k in ("name", "cause", "fix") if not entry.get(k)]
        if missing:
            errors.append(f"{where}: needs {', '.join(missing)}")
        alternatives = entry.get("match") or []
        if not isinstance(alternatives, list):
            errors.append(f"{where}: match must be a list of alternatives")
            continue
        for alt in alternatives:
            if not isinstance(alt, dict):
                errors.append(f"{where}: each match alternative is a mapping")
                continue
            unknown = sorted(set(alt) - MATCH_KEYS)
            if unknown:
                errors.append(f"{where}: unknown match keys {unknown} (known: {sorted(MATCH_KEYS)})")
            for key in REGEX_KEYS & set(alt):
                try:
                    re.compile(alt[key])
                except (re.error, TypeError) as exc:
                    errors.append(f"{where}: {key} does not compile ({exc})")
    return errors
