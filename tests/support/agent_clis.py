"""The real coding-agent CLIs as the tests and the request recorder run them: where they are installed, the
environment Claude Code gets, Codex's config.toml for a swiftbox provider, and a child environment without the
user's own ANTHROPIC_* / OPENAI_* / CODEX_* settings."""
from __future__ import annotations

import os
from pathlib import Path

NAME = "local"       # the served model name both CLIs ask for
PACKAGES = ["@anthropic-ai/claude-code@^2.1.197", "@openai/codex@^0.169.0"]

CODEX_HEAD = """\
model = "{name}"
model_provider = "swiftbox"
"""
# the prompt-shrinking switches docs/serving.md gives for a small model (top-level keys, then tables)
CODEX_TRIMMED = """\
model_instructions_file = "{instructions}"
web_search = "disabled"
include_permissions_instructions = false
include_environment_context = false
include_apps_instructions = false
[features]
multi_agent = false
goals = false
apps = false
"""
CODEX_PROVIDER = """\
[model_providers.swiftbox]
name = "swiftbox"
base_url = "{url}/v1"
env_key = "SWIFTBOX_API_KEY"
wire_api = "responses"
"""


def bin_dir() -> Path:
    """node_modules/.bin of the npm prefix in the cache that holds `claude` and `codex`."""
    from swiftbox.catalog.toy import cache_root

    return cache_root() / "agent-clis" / "node_modules" / ".bin"


def child_env(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without the user's agent settings, plus NO_COLOR and `env`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
    return {**clean, "NO_COLOR": "1", **env}


def claude_env(home: Path, url: str, key: str, max_tokens: int) -> dict[str, str]:
    """Claude Code against a swiftbox server: every model name it asks for (main, small/fast, haiku) is NAME."""
    return {"HOME": str(home), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": key, "ANTHROPIC_MODEL": NAME,
            "ANTHROPIC_SMALL_FAST_MODEL": NAME, "ANTHROPIC_DEFAULT_HAIKU_MODEL": NAME,
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(max_tokens), "DISABLE_AUTOUPDATER": "1"}


def codex_config(url: str, instructions: Path | None, extra: str = "") -> str:
    """Codex's config.toml: swiftbox as a Responses-API provider; trimmed when `instructions` is given; `extra`:
    more top-level keys."""
    trimmed = CODEX_TRIMMED.format(instructions=instructions) if instructions is not None else ""
    return CODEX_HEAD.format(name=NAME) + extra + trimmed + CODEX_PROVIDER.format(url=url)
