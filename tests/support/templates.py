"""The real chat templates of the preset families (tests/fixtures/templates, provenance in its README) and the
plain conversation the template tests render with them; shared by the template matrix and the tests that encode
data with real templates."""
from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"
TURNS = [{"role": "user", "content": "Hi there."}, {"role": "assistant", "content": "Hello."},
         {"role": "user", "content": "Bye now."}, {"role": "assistant", "content": "Bye."}]
