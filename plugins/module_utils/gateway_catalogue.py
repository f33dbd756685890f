"""The gateway's diagnosis catalogue (roles/gateway/defaults/main/diagnoses.yml): entries checked, matched against
what a request saw, their texts filled in with the run's values."""

from __future__ import annotations

import re
from typing import Any

MATCH_KEYS = {"check", "status", "key", "shape", "error_type", "via", "local", "url", "body", "exception"}

# What an entry's `shows` holds: what a client tool shows its user when this is the cause (matched by explain()).
SHOWS_KEYS = {"tool", "text", "pattern", "source"}


REGEX_KEYS = {"url", "body", "exception"}


PLACEHOLDER = re.compile(r"\{(\w+)\}")


class Catalogue:
    """The diagnosis catalogue: matching of failed exchanges, lookup by name, placeholders in cause and fix."""

    def __init__(self, entries: list[dict[str, Any]], values: dict[str, str]) -> None:
        self.entries = entries
        self.values = values

    def render(self, text: str) -> str:
        return PLACEHOLDER.sub(lambda m: str(self.values.get(m.group(1), m.group(0))), text or "")

    def named(self, name: str, quote_shows: bool = True) -> dict[str, str]:
        """The entry's cause and fix, filled in; the cause quotes what the tools show for it (`shows`)."""
        for entry in self.entries:
            if entry.get("name") == name:
                found = {"name": name, "cause": self.render(entry["cause"]), "fix": self.render(entry["fix"])}
                shows = "; ".join(f'{s["tool"]}: "{s["text"]}"' for s in entry.get("shows") or [])
                if shows and quote_shows:
                    found["cause"] += f" (what the tools show - {shows})"
                return found
        return {"name": name, "cause": f"({name}: no entry in the diagnosis catalogue)", "fix": ""}

    def explain(self, message: str) -> list[dict[str, str]]:
        """The entries whose `shows` match a message a client tool showed, in catalogue order, each with the tool
        and the text it matched: what that message means and what to change. Whitespace is collapsed first (a
        message copied from a terminal wraps)."""
        text = " ".join(message.split())
        found = []
        for entry in self.entries:
            for shown in entry.get("shows") or []:
                if re.search(shown["pattern"], text):
                    named = self.named(entry["name"], quote_shows=False)
                    found.append({**named, "tool": shown["tool"], "shown": shown["text"]})
                    break
        return found

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
        errors += _shows_errors(where, entry.get("shows"))
    return errors


def _shows_errors(where: str, shows: Any) -> list[str]:
    """Each `shows` item names the tool, the text it shows (as its documentation or issue tracker gives it), the
    source, and a pattern that matches that very text."""
    if shows is None:
        return []
    if not isinstance(shows, list):
        return [f"{where}: shows must be a list of {{tool, text, pattern, source}}"]
    errors = []
    for item in shows:
        if not isinstance(item, dict) or set(item) != SHOWS_KEYS:
            errors.append(f"{where}: each shows item has exactly the keys {sorted(SHOWS_KEYS)}")
            continue
        try:
            matched = re.search(item["pattern"], " ".join(str(item["text"]).split()))
        except (re.error, TypeError) as exc:
            errors.append(f"{where}: shows pattern does not compile ({exc})")
            continue
        if not matched:
            errors.append(f"{where}: shows pattern {item['pattern']!r} does not match its own text {item['text']!r}")
    return errors
