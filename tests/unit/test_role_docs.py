"""Each role's README variables section matches its meta/argument_specs.yml."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_role_readmes_match_argument_specs():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "role_docs.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_every_role_has_argument_specs():
    roles = [p for p in (ROOT / "roles").iterdir() if p.is_dir()]
    assert roles
    missing = [r.name for r in roles if not (r / "meta" / "argument_specs.yml").exists()]
    assert missing == []
